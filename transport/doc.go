// Package transport is the MCP Streamable HTTP endpoint (SPEC §5): the
// routes, the admission of every request in SPEC §5's order, the JSON-RPC
// codec, the SSE writer, the bounds, and the one table of answers. The
// module root wraps it as mcpruntime.MCPEndpoint; nothing else imports it.
//
// # Components
//
//	net/http ──▶ Server.ServeHTTP ──▶ httprouter: POST / GET / DELETE on Options.Path
//	               │ statusWriter (the status, for the Observer)
//	               ├─ httpguard.Guard        Origin and Host (step 1)
//	               ├─ Host.Available      the node serves, or 503 (handlers.go: front)
//	               ├─ Backend.Authenticate   the bearer token → principal.Principal (step 2)
//	               ├─ Host.Route             the principal's home node (but for a read): ReverseProxy there (node.go)
//	               ├─ session.Table          the MCP session by id and owner (step 3), the caps
//	               ├─ limits                 requests and body bytes in flight (step 4)
//	               ├─ decodeMessage          one JSON-RPC message, validated in place (step 5)
//	               ├─ Dispatch               the feature methods: params decoded, Backend's method, errors mapped
//	               ├─ callWriter             a request's Output and answer: JSON, or its SSE stream
//	               ├─ session.Streams        a session's streams and the events kept to resume them
//	               ├─ session.Table subs     resources/subscribe: per session, and URI → sessions
//	               └─ liveness.Monitor       ends streams and sessions whose credentials die
//
//	session actor "mcp-session/<id>" (actors/session): Start, Delete, IdleCheck, CloseStream
//	Backend ──▶ Server.ListChanged / ResourceUpdated ──▶ each session's standalone stream
//	session.Asks (actors/session, shared memory): the session's pending asks of its client
//
// [Backend] is the endpoint's one seam (backend.go): authentication, one
// method per feature (tools/*, resources/* but subscribe and unsubscribe,
// prompts/*, completion/complete), the server capabilities answered at
// initialize, and whether a principal may read a resource. The protocol is
// the endpoint's (dispatch.go): it names the method, decodes the params,
// checks the client declared what input requests need, and maps the
// backend's domain errors (internal/fault's sentinels) to JSON-RPC. The
// module root implements it over the Runtime; the package's tests implement it with
// a fake over a store of their own, so the endpoint's whole HTTP behaviour
// is tested here, against the wire (testdata/conformance/*.txtar).
//
// errors.go holds the one table of answers: a failure kind → status,
// JSON-RPC code, message and headers; and backendErrors, the backend's
// domain error → its failure in each era. Call sites name the failure; no
// HTTP status appears anywhere else.
//
// # A request, step by step
//
// POST, the path of every JSON-RPC message:
//
//  1. The Origin/Host guard (SPEC §5 step 1): 403.
//  2. The bearer token, from the Authorization header only (step 2): 401,
//     with WWW-Authenticate "Bearer" when there is none and
//     `Bearer error="invalid_token"` when it does not authenticate. The
//     endpoint's credential generation is read first (see Invariants).
//     A POST with MCP-Protocol-Version: 2026-07-28 leaves here for the
//     stateless era's own ladder (modern.go, modern_ladder.go; SPEC §5a.2): no
//     session is looked up; GET and DELETE with it are 405.
//  3. Mcp-Session-Id, if present, looked up with the caller's namespace
//     (step 3): unknown, ended and foreign are one nil, one 404 of the same
//     bytes, nothing touched.
//  4. MCP-Protocol-Version is read, but a version not served is answered
//     only once the body is in, so that its id is echoed (-32022, SPEC §5a);
//     until then Accept (406) and Content-Type (415) are checked, on the
//     headers alone.
//  5. The bounds (step 4): the namespace's requests in flight (429), the
//     endpoint's (503), then the body: a declared length over MaxBodyBytes
//     is 413 before a byte is read; the body's bytes are reserved in the
//     body budget (503) and read within BodyTimeout (408, the connection
//     closed). Every answer written before the body was read closes the
//     connection: a refused caller's body is never read.
//  6. Step 0: the token and the session are checked again, now that the
//     body is in (recheck): 401 or 404, as a request arriving now would get.
//  7. The body is decoded (step 5): invalid UTF-8, an escaped lone
//     surrogate or malformed JSON is -32700, a batch (but on a session
//     negotiated at 2025-03-26: batch.go, each message served as alone and
//     the responses answered as one JSON array) or anything but one
//     JSON-RPC 2.0 message -32600, all 400 without an id; then the version
//     (header, or a _meta claim in the body) with the id echoed.
//  8. initialize creates a session (Table.Reserve, spawn, Start as a
//     request, Commit, then Start's answer, so the record exists before the
//     id is answered); any
//     other message needs a session (400). Notifications and responses
//     answer 202; ping, logging/setLevel (logging.go) and
//     resources/subscribe|unsubscribe (subscribe.go) are answered at once,
//     the feature methods from the
//     request's goroutine: the request registers itself in the session's
//     Calls (a duplicate id is -32600), runs the backend's method with a context
//     that notifications/cancelled, the session's end and the death of a
//     streaming request's credential cancel — not the client going away
//     (SPEC §5b.17) — and answers application/json, or text/event-stream
//     once a notification has to go first (callWriter, the request's
//     Output). A request whose context ended gets no JSON-RPC response
//     (SPEC §5.2).
//
// Asking the client (asks.go, SPEC §5b.18–22): when the backend answers a
// session's request with input requests, the endpoint checks the client
// declared each capability (dispatch.go), sends elicitation/create,
// sampling/createMessage or roots/list on the request's own stream with
// ids srv-<n> (session.Asks, per session, bounded), waits on the request's
// goroutine — never in an actor — for the answers within AskTimeout, and
// calls the method again with them and the backend's State, at most ten rounds.
// A client's answer is a POSTed response: admitted like any request (a
// foreign session is the unknown session's 404), matched by id value in
// its own session only, 202 whatever it matched. An elicitation's accepted
// content is validated against the requested schema; an invalid answer is
// no answer. The request's end cancels its asks; the client is told
// (notifications/cancelled) when it cancelled the request or the wait
// timed out.
//
// GET takes steps 1–3, the version (without an id) and Accept. Without
// Last-Event-ID it opens the session's one standalone stream: it registers
// its cancel in the session's Calls (a second one is 409), attaches a
// reader to a new standalone stream of the session's Streams, where
// ListChanged and ResourceUpdated queue their notifications, and watches
// the credential it was opened with; it ends when the client goes, the
// credential dies, or the session's actor ends it. With Last-Event-ID
// (streams.go, SPEC §5b.16) it resumes the stream the id names, within the
// session only: it replays the kept events after the id, then carries the
// rest of the stream. DELETE takes steps 1–3 and the version, then asks the
// session's actor to end the session: 204 once the record is gone.
//
// # Streams
//
// Once a request's answer is an event stream it is a session.Stream: each
// event is appended to the session's Streams (a bounded buffer over all the
// session's streams, nothing allocated while it never streamed) and written
// on the POST's connection while that lives; the response written on a live
// connection completes the stream and frees its events. A write that failed,
// or Output.CloseStream (2025-11-25: the connection is taken and closed; the
// body is delimited by it), leaves the events for a GET with Last-Event-ID.
// The standalone stream keeps only what its reader has not written yet: its
// notifications are hints, not a log. resources/updated events carry their
// URI, and the GET writes one only if its principal may still read it
// (Backend.CanRead at delivery).
//
// # Several nodes
//
// node.go and the gate in handlers.go (docs/cluster.md). Host.Available is asked after the
// Origin/Host guard and before authentication — a node whose credential
// replica is not proven current cannot authenticate — and again at
// dispatch (recheck) and wherever a stream or a 2026-07-28 call registers
// to be ended: 503 + Retry-After. CloseStreamsUnavailable ends every stream
// through the liveness monitor (each stream watches its credential, so
// ending every credential watch ends them all, by a revocation's path) and
// cancels the 2026-07-28 calls (flights); the sessions, watched by
// namespace, stay. Host.Route is asked right after authentication, in
// front, for every request of both eras: a home node elsewhere gets the
// whole request through httputil.ReverseProxy, the body unread, answers
// streamed (FlushInterval -1); a home node gone or unreachable is the
// unknown session's 404 for a request naming a session, else 503. The home
// node serves it through ServeForwarded, which repeats every check but
// Route; the mark is in the request's context, never a header. Route is
// told the request's Mcp-Method and Mcp-Name headers and the
// Mcp-Runtime-Revision it asks for (RouteRequest), so that the runtime
// answers a 2026-07-28 read where it arrives; Host.Forwarded hears each
// forwarded request's end (read-your-writes), and every answer carries
// Host.Revision in Mcp-Runtime-Revision (statusWriter).
//
// # Invariants
//
//   - Nothing reaches a session, its actor or a tool before steps 1–3 passed
//     for the request's own token, and step 0 passed at dispatch.
//   - Nothing is authenticated while Host.Available says no; nothing
//     forwarded was not authenticated here first, and its home node
//     authenticates and checks the owner again.
//   - A foreign and an unknown session id get the same bytes; a foreign
//     request touches nothing of the session (not even its activity).
//   - The dispatch check costs no store read while no credential changed:
//     the store's commit hook counts committed writes that changed a
//     credential (credGen); if the count is what it was just before the
//     token was authenticated and its expiry has not come, nothing can have
//     revoked it. Otherwise its row is read by id.
//   - No JSON-RPC error carries "id": null: the id is echoed only when it
//     is a valid id of a request (a batch's element included).
//   - A Last-Event-ID is looked up in the session the owner check found:
//     another namespace's stream cannot be named, and an id the session
//     never issued is the unknown session's 404.
//   - ListChanged and ResourceUpdated never block on a client: they append
//     to bounded buffers under short locks; the slow reader loses the oldest.
//   - Every answer is JSON, no-store, and valid UTF-8.
//   - Close leaves no session: it ends the sessions the Table's CloseAll
//     returns, and an initialize whose Commit comes after CloseAll (Commit
//     reports it) ends its own session the same way and answers 503.
//
// # The hot path's shared memory
//
// A tools/call does not go through a mailbox: it authenticates (one
// lock-free store read), finds its session in the Table (a read lock),
// registers itself in the session's Calls (a mutex), runs Backend.CallTool and
// answers. The Calls are shared with the session's actor on purpose — the
// actor cancels what they hold when the session ends — and documented in
// actors/session. The bounds are two atomics and a sharded map; the fixed
// answers' bodies are built once.
package transport

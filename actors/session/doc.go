// Package session owns the MCP session (Streamable HTTP, Mcp-Session-Id)
// whole: the [Table] of an endpoint's sessions, each session's [Calls],
// and one actor per session, bound to the namespace that initialized it
// (SPEC §5).
//
// # Components
//
//	MCP endpoint (HTTP goroutine) ── Reserve/Lookup/Commit ──▶ Table ──▶ Entry{id, owner, pid, Calls}
//	        │ Begin/BeginCall/OpenStream (shared memory)                       ▲
//	        └── Start, Delete, IdleCheck, CloseStream ──▶ session actor "mcp-session/<id>"
//	                                                       │ writes: its mcp_sessions row
//	liveness monitor ──ownerDead──────────────────────────┘ (the owner namespace lost its last live credential)
//
// The [Table] holds the sessions' slots against the caps (a slot is
// reserved before initialize runs), the lookup by id and owner, the
// eviction of a full namespace's least recently active idle session, the
// idle ones for the sweep, the count of live sessions (the one count: the
// endpoint's gauge and the runtime's Stats read it) and the listing for
// operators. The endpoint authenticates and checks ownership before
// anything reaches a session (SPEC §5 steps 1–3), so only its owner ever
// reaches it.
//
// Each session's [Calls] is shared with the HTTP path on purpose: a
// request marks itself busy, a tools/call registers its cancel in the call
// table, the standalone GET stream registers its cancel — a map write under
// a mutex, no round trip through the mailbox, since calls are the hot path.
// The work itself (a tool call, writing an SSE stream) runs on the HTTP
// request's goroutine, so a slow tool never blocks the mailbox and several
// calls run at once. Idle is judged in one place, Calls.idle, which the
// sweep's filter and the actor's decision both ask.
//
// So are its [Streams] (streams.go): the session's SSE streams and the
// events kept until each was delivered to completion, so that a client
// resumes a lost stream (Last-Event-ID; SPEC §5b.16), bounded per session by
// the Table's [StreamLimits] and empty — no map — for a session that never
// streamed; and its subscriptions (subscriptions.go), kept by the Table
// per session and by URI under one lock, dropped when the Table removes the
// session (SPEC §5b.13). The actor closes the Streams as the session ends:
// every reader stops.
//
// Each session's [Asks] is shared the same way: the runtime's pending
// requests to the session's client (elicitation, sampling, roots), which a
// request registers and waits on on its own goroutine and a POSTed
// response of the session's owner answers by id. The actor only closes it
// as the session ends.
//
// # The actor
//
// The actor owns the session's endings and its record. All sessions of an
// endpoint share one Props ([NewProps]); the spawner sends [Start] first,
// plain data: the actor finds its Entry in the Table by id. Its phases are
// behaviours — starting, live, ended. Start writes the ownership record,
// registers the owner with the liveness monitor and answers [Started]; the session ends on DELETE
// by its owner, on idle eviction (an [IdleCheck] finds it idle), on cap
// eviction by the endpoint, when its owner namespace has no live credential
// left (revoked or expired: the monitor tells it), and when it is stopped
// (shutdown). Ending cancels every call in flight and the stream, closes
// the Calls and the Streams so none starts afterwards, drops the pending asks, removes the ownership record, frees
// the slot in the Table, calls OnEnd, and stops the actor. The record is
// removed before the actor stops, so the id answers 404 forever after.
//
// # Memory
//
// An endpoint may hold 100 000 idle sessions, so what each keeps is
// counted (`bench/`'s idle mode measures it): the Entry is one
// 160-byte object, its streams, asks and subscriptions made at their first
// use; the actor keeps no copy of Start; the actor has its own mailbox
// (mailbox.go: protoactor's semantics, its queues made only while messages
// wait); the session id shares its bytes with the actor's name. What is
// left per session is protoactor's (the actor's context, process and PID,
// its registry entry), the ownership record with its index's radix-tree
// nodes, the Table's maps and the liveness watch.
//
// # Dispatch
//
// The endpoint runs every session's mailbox on its [Workers]: a few
// long-lived goroutines, one taking a turn when it is idle, a goroutine of
// its own otherwise, so that no turn waits for a worker and a turn that
// blocked would hold only its own.
//
// # Invariants
//
//   - A session never changes owner.
//   - An ownership record exists exactly while the actor runs (SPEC §6.7).
//   - Messages are plain data: no pointer, func or error value crosses the
//     mailbox; shared state is the Table's, found by id.
package session

package transport

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/julienschmidt/httprouter"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/actors/session"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/token"
)

// Header names in net/http's canonical form, so that Header.Get and Set
// find them without building the canonical key again (MCP spells the
// protocol header MCP-Protocol-Version; header names are case-insensitive).
const (
	headerSession  = "Mcp-Session-Id"
	headerProtocol = "Mcp-Protocol-Version"
)

// The gate every request passes: one node of several (docs/cluster.md)
// serves only while it may (Host.Available) and closes its streams
// when it stops (CloseStreamsUnavailable).

// errUnavailable cancels the 2026-07-28 calls in flight when the node
// stops serving (CloseStreamsUnavailable).
var errUnavailable = errors.New("node unavailable")

// available reports whether the node serves (Host.Available).
func (s *Server) available() bool { return s.opts.Available == nil || s.opts.Available() }

// CloseStreamsUnavailable is for a node that stopped serving: every open
// stream ends — 2025 GET streams (standalone or resuming a POST's), the
// SSE answers of 2025 calls in flight (the call is cancelled, as when its
// credential dies), 2026-07-28 listen streams (ended without a result) —
// and every 2026-07-28 call in flight is cancelled and, unless it already
// streams, answered 503 + Retry-After with its id ("node unavailable").
// The MCP sessions stay: a client that comes back once the node serves
// again keeps its session. 2025 calls answering JSON go on. Every stream
// watches its credential in the liveness monitor, so ending each
// credential watch ends them all, by the path a revocation takes. Call it
// once Available returns false: a stream or call registered after it
// sees that and ends by itself.
func (s *Server) CloseStreamsUnavailable() {
	s.live.EndCredentialWatches()
	s.flights.cancelAll(errUnavailable)
}

// front is what every request of either era goes through first, in SPEC
// §5's order: the Origin/Host guard (step 1), the node's availability
// (a node that does not serve cannot authenticate), authentication (step
// 2), then the request's home node. On false the answer is written, or
// the home node's was.
func (s *Server) front(w http.ResponseWriter, r *http.Request) (caller, bool) {
	if !s.guard(w, r) {
		return caller{}, false
	}
	if !s.available() {
		s.fail(w, failUnavailable)
		return caller{}, false
	}
	p, ok := s.authenticate(w, r)
	if !ok || s.forward(w, r, p) {
		return caller{}, false
	}
	return p, true
}

// admit runs what every request goes through, whatever its method, in SPEC
// §5's order: the Origin/Host guard, the node's availability,
// authentication, the home node (front), and the session's owner check
// (unknown and foreign alike: 404, nothing touched). The entry is nil when
// the request names no session. On false the answer is
// written. The protocol version comes next, in each handler: a POST's
// answer echoes its id.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (caller, *session.Entry, bool) {
	p, ok := s.front(w, r)
	if !ok {
		return caller{}, nil, false
	}
	var e *session.Entry
	if sid := r.Header.Get(headerSession); sid != "" {
		if e = s.sessions.Lookup(sid, p.Namespace); e == nil {
			s.fail(w, failUnknownSession)
			return caller{}, nil, false
		}
	}
	return p, e, true
}

// handlePost serves POST: SPEC §5's checks in the order of its table —
// steps 1–3 (admit), step 5 on the headers, the bounds of step 4, the body
// (steps 4, 5 and its deadline), step 0 (the token and the session checked
// again) once the body is in, then step 5 on the body.
func (s *Server) handlePost(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if modernHeader(r) {
		s.handleModern(w, r) // SPEC §5a: its own ladder, no session
		return
	}
	p, e, ok := s.admit(w, r)
	if !ok {
		return
	}
	// A version not served is answered from the body (its id echoed),
	// whatever the Accept and Content-Type headers.
	version, versionOK := headerVersion(r)
	if versionOK && !accepts(r, "application/json", "text/event-stream") {
		s.fail(w, failAcceptPost)
		return
	}
	if versionOK && !isJSONContentType(r.Header.Get("Content-Type")) {
		s.fail(w, failContentType)
		return
	}
	if !s.admitRate(w, p.Namespace, 1, 1) || !s.admitRequest(w, p.Namespace) {
		return
	}
	defer s.limits.done(p.Namespace)
	body, held, ok := s.readBody(w, r)
	defer s.limits.release(held)
	if !ok || !s.recheck(w, p, e) {
		return
	}
	msg, err := decodeMessage(body)
	if !versionOK {
		s.failVersion(w, requestID(msg), version)
		return
	}
	switch {
	case errors.Is(err, errBatch) && e != nil && batchable(e.Version()):
		s.batch(w, r, p, e, body)
		return
	case err != nil:
		s.fail(w, failureOf(err))
		return
	}
	if claim, ok := metaVersion(msg.Params); ok && !served(claim) {
		if claim == modernVersion { // SPEC §5a.2: the header must say so too
			s.failFor(w, failHeaderMismatch, requestID(msg), "MCP-Protocol-Version header does not match params._meta."+metaProtocolVersion)
			return
		}
		s.failVersion(w, requestID(msg), claim)
		return
	}
	if msg.isRequest() && msg.Method == "initialize" {
		if e != nil {
			s.failFor(w, failInitialized, msg.ID, "")
			return
		}
		s.initialize(w, r, p, msg)
		return
	}
	if e == nil {
		if msg.isRequest() && !knownMethod(msg.Method) {
			s.failFor(w, failMethodNoSession, msg.ID, fmt.Sprintf("method %q not found: send initialize first", msg.Method))
			return
		}
		s.failFor(w, failNoSession, msg.ID, "")
		return
	}
	s.onSession(w, r, p, e, msg)
}

// failureOf is the failure that answers a body decodeMessage refused with
// err: a batch where none is taken, not one JSON-RPC 2.0 message, invalid
// UTF-8, or malformed JSON.
func failureOf(err error) failure {
	switch {
	case errors.Is(err, errBatch):
		return failBatch
	case errors.Is(err, errInvalid):
		return failInvalidMessage
	case errors.Is(err, errEncoding):
		return failEncoding
	}
	return failParse
}

// onSession serves one admitted message on session e, alone or as an
// element of a batch, counted as the session's activity: a notification
// and a response (to the session's asks, matched within this session
// only, else dropped) answer 202, a request its answer.
func (s *Server) onSession(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	e.Begin(s.opts.Now())
	defer func() { e.End(s.opts.Now()) }()
	switch {
	case msg.isNotification():
		s.notify(e, msg)
		writeAccepted(w)
	case msg.isResponse():
		s.answerAsk(e, msg)
		writeAccepted(w)
	default:
		s.request(w, r, p, e, msg)
	}
}

// ended reports whether a failed request to a session's actor failed
// because the session ended after the owner check (a racing DELETE, idle
// eviction or revocation): it is then 404, as if it had ended before.
func (s *Server) ended(e *session.Entry, err error) bool {
	return err != nil && (errors.Is(err, actor.ErrDeadLetter) || !s.sessions.Live(e))
}

// knownMethod reports whether m is a request method the endpoint serves
// on a session.
func knownMethod(m string) bool {
	return m == "initialize" || m == "ping" || m == "logging/setLevel" ||
		m == "resources/subscribe" || m == "resources/unsubscribe" || featureMethod(m)
}

// initialize creates a session owned by the caller's namespace.
func (s *Server) initialize(w http.ResponseWriter, r *http.Request, p caller, msg *message) {
	var params struct {
		ProtocolVersion string          `json:"protocolVersion"`
		Capabilities    json.RawMessage `json:"capabilities"`
		ClientInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
	}
	if len(msg.Params) == 0 || json.Unmarshal(msg.Params, &params) != nil || params.ProtocolVersion == "" {
		s.failFor(w, failInvalidParams, msg.ID, "initialize needs params.protocolVersion")
		return
	}
	caps, err := clientCapabilities(params.Capabilities)
	if err != nil {
		s.failFor(w, failInvalidParams, msg.ID, "initialize: params.capabilities must be an object")
		return
	}
	version := negotiate(params.ProtocolVersion)
	name, id := names.MCPSessionShared(token.NewID("mcps_"))
	owner := session.Owner{Namespace: p.Namespace, Credential: p.CredentialID}
	e, evicted, err := s.sessions.Reserve(id, owner, s.opts.Now())
	switch {
	case errors.Is(err, session.ErrNamespaceFull):
		s.fail(w, failNamespaceSessions)
		return
	case errors.Is(err, session.ErrClosing):
		s.fail(w, failClosing)
		return
	case err != nil:
		s.fail(w, failSessions)
		return
	}
	e.SetProtocol(version, caps)
	if evicted != nil {
		// Synchronous, so the evicted id is gone before the new one exists.
		s.ask(evicted.PID(), &session.Delete{Reason: session.ReasonCap})
	}
	pid, err := s.root.SpawnNamed(s.sessionProps, name)
	if err != nil {
		s.sessions.Unreserve(e)
		s.opts.Logger.Error("spawn session", "err", err)
		s.failFor(w, failSpawn, msg.ID, "")
		return
	}
	// First, before the session is findable: every later message is queued
	// behind it. One round trip: Start is answered once the ownership
	// record is written, so the id is usable the moment the client reads it.
	started := s.root.RequestFuture(pid, &session.Start{
		ID:              id,
		ProtocolVersion: version,
		ClientName:      truncate(params.ClientInfo.Name, 256),
		ClientVersion:   truncate(params.ClientInfo.Version, 64),
	}, s.opts.ActorTimeout)
	open := s.sessions.Commit(e, pid)
	s.opts.Observer.SessionOpened()
	if !open {
		// The endpoint closed between Reserve and Commit: its Close did
		// not see this session, so it ends here, as Close ends the others.
		s.endSession(pid)
		s.fail(w, failClosing)
		return
	}
	if res, err := started.Result(); err != nil || res.(*session.Started).Ended {
		s.opts.Logger.Error("session did not start", "err", err)
		s.failFor(w, failSessionNotStarted, msg.ID, "")
		s.root.Stop(pid)
		return
	}
	w.Header().Set(headerSession, id)
	result, ok := s.initializeResult(version)
	if !ok {
		writeResult(w, msg.ID, &initializeResult{
			Capabilities:    s.backend.Capabilities(),
			ProtocolVersion: version,
			ServerInfo:      serverInfo{Name: s.opts.ServerName, Version: s.opts.ServerVersion},
		})
		return
	}
	writeRawResult(w, msg.ID, result)
}

// initResults are the encoded initialize results of one capabilities
// value, by protocol version: all an initialize result depends on, the
// server's name and version being fixed.
type initResults struct {
	caps      *mcp.ServerCapabilities
	byVersion map[string][]byte
}

// initializeResult returns the encoded result of an initialize that
// negotiated version, made once per capabilities value the backend
// returns (compared by pointer) and shared; ok false if it cannot be
// encoded, and the caller encodes it as it goes.
func (s *Server) initializeResult(version string) (result []byte, ok bool) {
	caps := s.backend.Capabilities()
	c := s.initResults.Load()
	if c == nil || c.caps != caps {
		c = &initResults{caps: caps, byVersion: make(map[string][]byte, len(protocolVersions))}
		for _, v := range protocolVersions {
			b, err := json.Marshal(&initializeResult{
				Capabilities:    caps,
				ProtocolVersion: v,
				ServerInfo:      serverInfo{Name: s.opts.ServerName, Version: s.opts.ServerVersion},
			})
			if err != nil {
				return nil, false
			}
			c.byVersion[v] = b
		}
		s.initResults.Store(c)
	}
	result, ok = c.byVersion[version]
	return result, ok
}

// initializeResult is the result of initialize.
type initializeResult struct {
	Capabilities    *mcp.ServerCapabilities `json:"capabilities"`
	ProtocolVersion string                  `json:"protocolVersion"`
	ServerInfo      serverInfo              `json:"serverInfo"`
}

type serverInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// clientCapabilities decodes initialize's params.capabilities: nil when
// the client declared none (absent, null or {}), else its capabilities —
// roots, which the SDK type keeps in RootsV2, included.
func clientCapabilities(raw json.RawMessage) (*mcp.ClientCapabilities, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "{}" {
		return nil, nil
	}
	var caps mcp.ClientCapabilities
	var roots struct {
		Roots *mcp.RootCapabilities `json:"roots"`
	}
	if raw[0] != '{' || json.Unmarshal(raw, &caps) != nil || json.Unmarshal(raw, &roots) != nil {
		return nil, errInvalid
	}
	caps.RootsV2 = roots.Roots
	return &caps, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// notify handles a notification; unknown ones are ignored, as JSON-RPC
// asks. notifications/roots/list_changed is accepted and needs nothing: the
// runtime asks for roots afresh each time it needs them.
func (s *Server) notify(e *session.Entry, msg *message) {
	switch msg.Method {
	case "notifications/initialized":
		e.MarkInitialized() // shared state, like the log level: no actor turn
	case "notifications/cancelled":
		var params struct {
			RequestID json.RawMessage `json:"requestId"`
		}
		if json.Unmarshal(msg.Params, &params) != nil {
			return
		}
		if key, ok := idKey(params.RequestID); ok {
			e.CancelCall(key) // by value: any spelling of the call's id
		}
	}
}

// request dispatches a request of an initialized session: the endpoint's
// own methods here, the feature methods through the backend (serve).
func (s *Server) request(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	switch {
	case msg.Method == "ping":
		writeResult(w, msg.ID, struct{}{})
	case msg.Method == "logging/setLevel":
		s.setLevel(w, e, msg)
	case msg.Method == "resources/subscribe", msg.Method == "resources/unsubscribe":
		s.subscribe(w, p, e, msg, msg.Method == "resources/subscribe")
	case featureMethod(msg.Method):
		s.serve(w, r, p, e, msg)
	default:
		s.failFor(w, failMethodNotFound, msg.ID, fmt.Sprintf("method %q not found", msg.Method))
	}
}

// handleDelete ends a session on its owner's request.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	if s.modernStream(w, r) {
		return
	}
	_, e, ok := s.admit(w, r)
	if !ok {
		return
	}
	if v, ok := headerVersion(r); !ok {
		s.failVersion(w, nil, v)
		return
	}
	if e == nil {
		s.fail(w, failStreamNoSession)
		return
	}
	res, err := s.ask(e.PID(), &session.Delete{Reason: session.ReasonDeleted})
	if s.ended(e, err) {
		s.fail(w, failUnknownSession) // ended between the owner check and now
		return
	}
	if err != nil {
		s.fail(w, failSessionBusy)
		return
	}
	if res.(*session.Deleted).AlreadyEnded {
		s.fail(w, failUnknownSession)
		return
	}
	writeDeleted(w)
}

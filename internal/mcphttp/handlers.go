package mcphttp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/julienschmidt/httprouter"

	"github.com/agenthost/mcpruntime/actors/session"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/token"
)

const (
	headerSession  = "Mcp-Session-Id"
	headerProtocol = "MCP-Protocol-Version"
)

// admit runs what every request goes through, whatever its method, in SPEC
// §5's order: the Origin/Host guard, authentication, and the session's
// owner check (unknown and foreign alike: 404, nothing touched). The entry
// is nil when the request names no session. On false the answer is
// written. The protocol version comes next, in each handler: a POST's
// answer echoes its id.
func (s *Server) admit(w http.ResponseWriter, r *http.Request) (caller, *session.Entry, bool) {
	if !s.guard(w, r) {
		return caller{}, nil, false
	}
	p, ok := s.authenticate(w, r)
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
	switch err := s.limits.admit(p.Namespace); {
	case errors.Is(err, errRequestsPerNamespace):
		s.fail(w, failRequestsPerNamespace)
		return
	case err != nil:
		s.fail(w, failRequests)
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
	case errors.Is(err, errBatch):
		s.fail(w, failBatch)
		return
	case errors.Is(err, errInvalid):
		s.fail(w, failInvalidMessage)
		return
	case errors.Is(err, errEncoding):
		s.fail(w, failEncoding)
		return
	case err != nil:
		s.fail(w, failParse)
		return
	}
	if claim, ok := metaVersion(msg.Params); ok && !served(claim) {
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
	now := s.opts.Now()
	e.Begin(now)
	defer func() { e.End(s.opts.Now()) }()
	switch {
	case msg.isNotification():
		s.notify(e, msg)
		writeAccepted(w)
	case msg.isResponse():
		writeAccepted(w) // the server sends no requests; nothing awaits it
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

func knownMethod(m string) bool {
	switch m {
	case "initialize", "ping", "tools/list", "tools/call":
		return true
	}
	return false
}

// initialize creates a session owned by the caller's namespace.
func (s *Server) initialize(w http.ResponseWriter, r *http.Request, p caller, msg *message) {
	var params struct {
		ProtocolVersion string `json:"protocolVersion"`
		ClientInfo      struct {
			Name    string `json:"name"`
			Version string `json:"version"`
		} `json:"clientInfo"`
	}
	if len(msg.Params) == 0 || json.Unmarshal(msg.Params, &params) != nil || params.ProtocolVersion == "" {
		s.failFor(w, failInvalidParams, msg.ID, "initialize needs params.protocolVersion")
		return
	}
	id := token.NewID("mcps_")
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
	if evicted != nil {
		// Synchronous, so the evicted id is gone before the new one exists.
		s.ask(evicted.PID(), &session.Delete{Reason: session.ReasonCap})
	}
	pid, err := s.root.SpawnNamed(s.sessionProps, names.MCPSession(id))
	if err != nil {
		s.sessions.Unreserve(e)
		s.opts.Logger.Error("spawn session", "err", err)
		s.failFor(w, failSpawn, msg.ID, "")
		return
	}
	// First, before the session is findable: every later message is queued
	// behind it.
	s.root.Send(pid, &session.Start{
		ID:              id,
		ProtocolVersion: negotiate(params.ProtocolVersion),
		ClientName:      truncate(params.ClientInfo.Name, 256),
		ClientVersion:   truncate(params.ClientInfo.Version, 64),
	})
	open := s.sessions.Commit(e, pid)
	s.opts.Observer.SessionOpened()
	if !open {
		// The endpoint closed between Reserve and Commit: its Close did
		// not see this session, so it ends here, as Close ends the others.
		s.endSession(pid)
		s.fail(w, failClosing)
		return
	}
	// Wait until the actor wrote its ownership record: the id is usable
	// the moment the client reads it.
	if _, err := s.ask(pid, &session.GetInfo{}); err != nil {
		s.opts.Logger.Error("session did not start", "err", err)
		s.failFor(w, failSessionNotStarted, msg.ID, "")
		s.root.Stop(pid)
		return
	}
	w.Header().Set(headerSession, id)
	writeResult(w, msg.ID, map[string]any{
		"protocolVersion": negotiate(params.ProtocolVersion),
		"capabilities":    map[string]any{"tools": map[string]any{"listChanged": false}},
		"serverInfo":      map[string]string{"name": s.opts.ServerName, "version": s.opts.ServerVersion},
	})
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// notify handles a notification; unknown ones are ignored, as JSON-RPC asks.
func (s *Server) notify(e *session.Entry, msg *message) {
	switch msg.Method {
	case "notifications/initialized":
		s.root.Send(e.PID(), &session.Initialized{})
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

// request dispatches a request of an initialized session.
func (s *Server) request(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	switch msg.Method {
	case "ping":
		writeResult(w, msg.ID, struct{}{})
	case "tools/list":
		tools := s.backend.Tools()
		list := make([]map[string]any, len(tools))
		for i, t := range tools {
			list[i] = map[string]any{"name": t.Name, "description": t.Description, "inputSchema": t.InputSchema}
		}
		writeResult(w, msg.ID, map[string]any{"tools": list})
	case "tools/call":
		s.callTool(w, r, p, e, msg)
	default:
		s.failFor(w, failMethodNotFound, msg.ID, fmt.Sprintf("method %q not found", msg.Method))
	}
}

func (s *Server) callTool(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	params, ok := callParams(msg.Params)
	if !ok {
		s.failFor(w, failInvalidParams, msg.ID, "tools/call needs params.name")
		return
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	key, _ := idKey(msg.ID) // a validated id: a string or an integer
	switch err := e.BeginCall(key, cancel); {
	case errors.Is(err, session.ErrClosed):
		s.fail(w, failUnknownSession) // ended between the owner check and now
		return
	case err != nil:
		s.failFor(w, failDuplicateID, msg.ID, err.Error())
		return
	}
	defer e.EndCall(key)

	out := &callWriter{w: w, s: s, ctx: ctx, cancel: cancel, credential: p.CredentialID}
	var progress ProgressFunc
	if len(params.ProgressToken) > 0 {
		progress = func(done, total float64, message string) {
			n := map[string]any{"progressToken": params.ProgressToken, "progress": done}
			if total > 0 {
				n["total"] = total
			}
			if message != "" {
				n["message"] = message
			}
			out.event(map[string]any{"jsonrpc": "2.0", "method": "notifications/progress", "params": n})
		}
	}
	result, err := s.backend.CallTool(ctx, p.Principal, params.Name, params.Arguments, progress)
	switch {
	case ctx.Err() != nil:
		out.abandon(context.Cause(ctx))
	case errors.Is(err, ErrUnknownTool):
		out.finish(failUnknownTool, errorResponse(msg.ID, failures[failUnknownTool].code, fmt.Sprintf("unknown tool %q", params.Name)))
	case err != nil:
		s.opts.Logger.Error("tool call", "tool", params.Name, "err", err)
		out.finish(failToolError, errorResponse(msg.ID, failures[failToolError].code, failures[failToolError].message))
	default:
		out.finish(0, resultResponse(msg.ID, toolResult{
			Content:    []textContent{{Type: "text", Text: result.Text}},
			IsError:    result.IsError,
			Structured: result.StructuredContent,
		}))
	}
}

// toolResult is the result of tools/call.
type toolResult struct {
	Content    []textContent `json:"content"`
	IsError    bool          `json:"isError"`
	Structured any           `json:"structuredContent,omitempty"`
}

type textContent struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// toolCall is what tools/call's params carry that the endpoint reads.
type toolCall struct {
	Name          string
	Arguments     json.RawMessage
	ProgressToken json.RawMessage // params._meta.progressToken
}

// callParams reads tools/call's params: name (a non-empty string),
// arguments, _meta.progressToken. Names are matched exactly, as JSON-RPC's
// are. params comes from a validated body.
func callParams(params json.RawMessage) (toolCall, bool) {
	var c toolCall
	if len(params) == 0 {
		return c, false
	}
	err := eachMember(params, func(name, value []byte) error {
		switch string(name) {
		case "name":
			return stringValue(value, &c.Name)
		case "arguments":
			c.Arguments = value
		case "_meta":
			if value[0] != '{' {
				return nil
			}
			return eachMember(value, func(name, value []byte) error {
				if string(name) == "progressToken" {
					c.ProgressToken = value
				}
				return nil
			})
		}
		return nil
	})
	return c, err == nil && c.Name != ""
}

// callWriter answers one request: application/json when the result is all
// there is, text/event-stream once a notification has to go first.
type callWriter struct {
	w          http.ResponseWriter
	s          *Server
	ctx        context.Context
	cancel     context.CancelCauseFunc
	credential string

	mu        sync.Mutex // guards the fields below; progress may come from any goroutine
	streaming bool
	done      bool
}

func (c *callWriter) event(v any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.ctx.Err() != nil {
		return
	}
	if !c.streaming {
		c.streaming = true
		startEventStream(c.w)
		// A stream opened under a credential closes when it is revoked or
		// expires: the call is cancelled and the response ends.
		stop := c.s.live.WatchCredential(c.credential, c.credentialDead)
		context.AfterFunc(c.ctx, stop)
	}
	if err := writeEvent(c.w, v); err != nil {
		c.cancel(err)
	}
}

func (c *callWriter) credentialDead() { c.cancel(errCredentialDead) }

// errCredentialDead cancels a streaming call whose credential was revoked
// or expired.
var errCredentialDead = errors.New("credential no longer live")

// abandon ends a call whose context ended before its answer was written:
// it gets no JSON-RPC response, whatever the tool returned (the receiver
// of a cancellation SHOULD NOT answer it). A stream ends with what it sent.
// In JSON mode the answer is the session's 404 when the session ended under
// the call (as a request arriving now would get), else — the client
// cancelled it, or went away — an event stream that ends with no message.
func (c *callWriter) abandon(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	switch {
	case c.streaming:
	case errors.Is(cause, session.ErrClosed):
		c.s.fail(c.w, failUnknownSession)
	default:
		startEventStream(c.w)
	}
}

// finish answers the call with r: its result, or the JSON-RPC error of
// failure f (0 for a result).
func (c *callWriter) finish(f failure, r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if !c.streaming {
		if f != 0 {
			c.s.failWith(c.w, f, r)
			return
		}
		writeResponse(c.w, r)
		return
	}
	if c.ctx.Err() != nil {
		return // the stream was closed under it (revocation, DELETE)
	}
	writeEvent(c.w, r)
}

func writeEvent(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(w, "event: message\ndata: %s\n\n", b); err != nil {
		return err
	}
	return http.NewResponseController(w).Flush()
}

// handleGet opens the session's standalone SSE stream.
func (s *Server) handleGet(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
	p, e, ok := s.admit(w, r)
	if !ok {
		return
	}
	if v, ok := headerVersion(r); !ok {
		s.failVersion(w, nil, v)
		return
	}
	if !accepts(r, "text/event-stream") {
		s.fail(w, failAcceptGet)
		return
	}
	if e == nil {
		s.fail(w, failStreamNoSession)
		return
	}
	// The stream registers its own cancel in the session's Calls: the
	// session's actor ends it (CloseStream, the session's end).
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	switch err := e.OpenStream(cancel); {
	case errors.Is(err, session.ErrStreamBusy):
		s.fail(w, failStreamOpen)
		return
	case err != nil:
		s.fail(w, failUnknownSession) // ended between the owner check and now
		return
	}
	e.Begin(s.opts.Now())
	defer func() {
		// Unregistered before the activity ends: whoever sees the session
		// idle sees no stream.
		e.EndStream()
		e.End(s.opts.Now())
	}()
	startEventStream(w)
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	dead := make(chan struct{})
	defer s.live.WatchCredential(p.CredentialID, func() { close(dead) })()
	tick := time.NewTicker(s.opts.KeepAlive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-dead:
			return
		case <-tick.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		}
	}
}

// handleDelete ends a session on its owner's request.
func (s *Server) handleDelete(w http.ResponseWriter, r *http.Request, _ httprouter.Params) {
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

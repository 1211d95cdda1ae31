package mcphttp

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/agenthost/mcpruntime/actors/session"
)

// emptyParams is the params of a request that sent none.
var emptyParams = json.RawMessage(`{}`)

// serve answers a feature request through Backend.Serve, on the request's
// goroutine: it registers itself in the session's Calls (a duplicate id
// is -32600), so that notifications/cancelled and the session's end cancel
// its context, and answers what the backend returns — application/json,
// or text/event-stream once something had to go first (callWriter). A
// request whose context ended gets no JSON-RPC response (SPEC §5.2).
func (s *Server) serve(w http.ResponseWriter, r *http.Request, p caller, e *session.Entry, msg *message) {
	params := msg.Params
	switch {
	case len(params) == 0 || string(params) == "null":
		params = emptyParams
	case params[0] != '{':
		s.failFor(w, failInvalidParams, msg.ID, "params must be an object")
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

	// One allocation for the request and its Output.
	out := &callWriter{w: w, s: s, e: e, ctx: ctx, cancel: cancel, credential: p.CredentialID, progressToken: progressToken(params)}
	defer out.end()
	out.req = Request{
		Method:             msg.Method,
		Params:             params,
		Caller:             p.Principal,
		Era:                EraSession,
		ProtocolVersion:    e.Version(),
		ClientCapabilities: e.ClientCapabilities(),
		Out:                out,
	}
	res := s.backend.Serve(ctx, &out.req)
	switch {
	case ctx.Err() != nil:
		out.abandon(context.Cause(ctx))
	case res.Err != nil:
		out.finish(failBackendError, &response{JSONRPC: "2.0", ID: msg.ID, Error: &rpcError{Code: res.Err.Code, Message: res.Err.Message, Data: res.Err.Data}})
	case res.InputRequests != nil:
		// TODO(issue 13): the runtime's own asks, in a later commit.
		s.opts.Logger.Error("backend asked for input", "method", msg.Method)
		out.finish(failBackendFailed, errorResponse(msg.ID, failures[failBackendFailed].code, failures[failBackendFailed].message))
	default:
		out.answer(msg.ID, res.Result)
	}
}

// progressToken returns params._meta.progressToken, if the request carries
// one. params comes from a validated body.
func progressToken(params json.RawMessage) json.RawMessage {
	var tok json.RawMessage
	_ = eachMember(params, func(name, value []byte) error {
		if string(name) != "_meta" || value[0] != '{' {
			return nil
		}
		return eachMember(value, func(name, value []byte) error {
			if string(name) == "progressToken" && string(value) != "null" {
				tok = value
			}
			return nil
		})
	})
	return tok
}

// callWriter is the Output of one request and its answer: application/json
// when the response is all there is, text/event-stream once a notification
// has to go first.
type callWriter struct {
	req           Request // the request it is the Output of
	w             http.ResponseWriter
	s             *Server
	e             *session.Entry
	ctx           context.Context
	cancel        context.CancelCauseFunc
	credential    string
	progressToken json.RawMessage // nil: the request asked for no progress

	mu        sync.Mutex // guards the fields below; Output may be called from any goroutine
	streaming bool
	done      bool // answered or abandoned: Output is a no-op from now on
}

// Progress implements Output.
func (c *callWriter) Progress(progress, total float64, message string) {
	if c.progressToken == nil {
		return
	}
	c.event(&notification{JSONRPC: "2.0", Method: "notifications/progress", Params: progressParams{
		ProgressToken: c.progressToken, Progress: progress, Total: total, Message: message,
	}})
}

// CloseStream implements Output.
func (c *callWriter) CloseStream() {}

// notification is a JSON-RPC notification the endpoint sends.
type notification struct {
	JSONRPC string `json:"jsonrpc"`
	Method  string `json:"method"`
	Params  any    `json:"params,omitempty"`
}

// progressParams are the params of notifications/progress.
type progressParams struct {
	Message       string          `json:"message,omitempty"`
	Progress      float64         `json:"progress"`
	ProgressToken json.RawMessage `json:"progressToken"`
	Total         float64         `json:"total,omitempty"`
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

// end makes Output a no-op: the request is over, whatever its answer.
func (c *callWriter) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
}

// abandon ends a call whose context ended before its answer was written:
// it gets no JSON-RPC response, whatever the backend returned (the receiver
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

// answer answers the call with its result.
func (c *callWriter) answer(id json.RawMessage, result any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if !c.streaming {
		writeResultResponse(c.w, id, result)
		return
	}
	if c.ctx.Err() != nil {
		return // the stream was closed under it (revocation, DELETE)
	}
	writeEvent(c.w, resultResponse(id, result))
}

// finish answers the call with r, the JSON-RPC error of failure f.
func (c *callWriter) finish(f failure, r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if !c.streaming {
		c.s.failWith(c.w, f, r)
		return
	}
	if c.ctx.Err() != nil {
		return // the stream was closed under it (revocation, DELETE)
	}
	writeEvent(c.w, r)
}

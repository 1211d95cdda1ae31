package transport

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

// serve answers a feature request through the backend (Dispatch), on the request's
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
	// The client going away does not cancel the request (2025-11-25: a
	// disconnection SHOULD NOT be taken as a cancellation): it may resume
	// the stream. notifications/cancelled, the session's end and the
	// request's credential dying while it streams do.
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(r.Context()))
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
	out := &callWriter{w: w, s: s, e: e, ctx: ctx, conn: r.Context(), cancel: cancel, credential: p.CredentialID, progressToken: progressToken(params)}
	_, out.batch = w.(*batchWriter)
	defer out.end()
	out.method, out.params = msg.Method, params
	out.req = Request{
		Caller:             p.Principal,
		Era:                EraSession,
		ProtocolVersion:    e.Version(),
		ClientCapabilities: e.ClientCapabilities(),
		Out:                out,
	}
	res := s.dispatch(ctx, msg.Method, params, &out.req)
	if len(res.InputRequests) > 0 && res.Err == nil {
		res = s.converse(ctx, out, e, res) // the runtime asks the client (asks.go); never in the 2026-07-28 era
	}
	switch {
	case ctx.Err() != nil:
		out.abandon(context.Cause(ctx))
	case res.Err != nil:
		out.finish(res.failure(), &response{JSONRPC: "2.0", ID: msg.ID, Error: &rpcError{Code: res.Err.Code, Message: res.Err.Message, Data: res.Err.Data}})
	case res.InputRequests != nil || res.Result == nil:
		s.opts.Logger.Error("backend answered neither a result nor input requests", "method", msg.Method)
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
// when the response is all there is, text/event-stream once something has
// to go first. Once it streams, its events are kept in the session's
// Streams until the response went out on a live connection, so that a
// client that lost the connection resumes the stream (GET with
// Last-Event-ID): the POST's connection writes them as they come while it
// lives; after a write failed, or CloseStream, they wait for the client's
// GET.
type callWriter struct {
	req           Request // the request it is the Output of
	method        string
	params        json.RawMessage
	w             http.ResponseWriter
	s             *Server
	e             *session.Entry
	ctx           context.Context // the request's: cancelled, the session ended, …
	conn          context.Context // the connection's: done once the client went
	cancel        context.CancelCauseFunc
	credential    string
	progressToken json.RawMessage // nil: the request asked for no progress
	batch         bool            // one request of a batch: its answer is JSON, nothing streams

	mu     sync.Mutex      // guards the fields below; Output may be called from any goroutine
	stream *session.Stream // once it streams
	direct bool            // the POST's connection still delivers the stream
	done   bool            // answered or abandoned: Output is a no-op from now on
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

// event sends v on the request's stream, which it starts if need be.
func (c *callWriter) event(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		c.s.opts.Logger.Error("encode event", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.batch || c.ctx.Err() != nil || !c.startStream() {
		return
	}
	c.send(data, false)
}

// startStream turns the answer into an event stream, if it is not one yet:
// a stream of the session, the 200 text/event-stream, on a resumable
// session its priming event. False: the session ended. c.mu is held.
func (c *callWriter) startStream() bool {
	if c.stream != nil {
		return true
	}
	st, err := c.e.Streams().Open(false)
	if err != nil {
		c.cancel(err)
		return false
	}
	c.stream = st
	var b []byte
	if resumable(c.req.ProtocolVersion) {
		// The connection ends with the stream, so that CloseStream can end
		// it early: the body is not chunked but delimited by the
		// connection's end (net/http's way for SSE: Transfer-Encoding
		// identity), and no client reuses a connection the server closed.
		h := c.w.Header()
		h.Set("Connection", "close")
		h.Set("Transfer-Encoding", "identity")
		b = appendPriming(nil, st.ID())
	}
	startEventStream(c.w)
	if _, err := c.w.Write(b); err == nil && http.NewResponseController(c.w).Flush() == nil {
		c.direct = true
	}
	// A stream opened under a credential closes when it is revoked or
	// expires: the call is cancelled and the response ends.
	stop := c.s.live.WatchCredential(c.credential, c.credentialDead)
	context.AfterFunc(c.ctx, stop)
	// Watched first, then checked: a node that stopped serving before the
	// watch (CloseStreamsUnavailable did not see it) ends it here.
	if !c.s.available() {
		c.cancel(errUnavailable)
	}
	return true
}

// send keeps data as the stream's next event and writes it on the POST's
// connection while that lives; final: it is the response, and once written
// the stream is complete. c.mu is held.
func (c *callWriter) send(data []byte, final bool) {
	seq := c.stream.Append(data, final, "")
	if c.direct && c.conn.Err() != nil {
		c.direct = false // net/http saw the client go: a write could still "succeed"
	}
	if !c.direct {
		return
	}
	_, err := c.w.Write(appendEvent(nil, c.stream.ID(), seq, data))
	if err == nil {
		err = http.NewResponseController(c.w).Flush()
	}
	switch {
	case err != nil:
		c.direct = false // the client went; it may resume
	case final:
		c.stream.Complete()
	}
}

// CloseStream implements Output: on a resumable session the request's
// stream ends now, its priming event sent (the stream starts if it had
// not), without the response; the request goes on, and the client resumes
// the stream with GET and Last-Event-ID. The POST's connection is taken
// from net/http and closed (an HTTP/1 response cannot end otherwise while
// its handler runs; the stream's body is delimited by the connection's
// end, see startStream); where it cannot be taken (HTTP/2), the stream
// stops being written and ends when the request's handler returns, its
// response kept for the GET.
func (c *callWriter) CloseStream() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.batch || c.ctx.Err() != nil || !resumable(c.req.ProtocolVersion) || !c.startStream() || !c.direct {
		return
	}
	c.direct = false
	rc := http.NewResponseController(c.w)
	if rc.Flush() != nil {
		return
	}
	if conn, _, err := rc.Hijack(); err == nil {
		conn.Close()
	} // else the handler's return ends the response
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
// of a cancellation SHOULD NOT answer it). A stream ends with what it sent,
// and is not kept. In JSON mode the answer is the session's 404 when the
// session ended under the call (as a request arriving now would get), else
// — the client cancelled it — an event stream that ends with no message.
func (c *callWriter) abandon(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	switch {
	case c.stream != nil:
		c.stream.Complete()
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
	if c.stream == nil {
		writeResultResponse(c.w, id, result)
		return
	}
	c.final(resultResponse(id, result))
}

// finish answers the call with r, the JSON-RPC error of failure f.
func (c *callWriter) finish(f failure, r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if c.stream == nil {
		c.s.failWith(c.w, f, r)
		return
	}
	c.final(r)
}

// final sends r as the stream's last event. c.mu is held.
func (c *callWriter) final(r *response) {
	if c.ctx.Err() != nil {
		c.stream.Complete() // the stream was closed under it (revocation, DELETE)
		return
	}
	data, err := json.Marshal(r)
	if err != nil {
		c.s.opts.Logger.Error("encode response", "err", err)
		data, _ = json.Marshal(errorResponse(r.ID, CodeInternalError, "internal error"))
	}
	c.send(data, true)
}

package transport

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// modernWriter is the Output of one 2026-07-28 request and its answer:
// application/json when the result is all there is, a request-scoped
// text/event-stream (no event ids: the era has no resumption) once a
// notification has to go first. Nothing is sent once its context ended.
type modernWriter struct {
	req           Request
	w             http.ResponseWriter
	s             *Server
	ctx           context.Context
	progressToken json.RawMessage
	flight        flight // its registration in Server.flights

	mu        sync.Mutex
	logLevel  int32 // 0: the request asked for no notifications/message
	streaming bool
	done      bool
}

// Progress implements Output.
func (c *modernWriter) Progress(progress, total float64, message string) {
	if c.progressToken == nil {
		return
	}
	c.event(&notification{JSONRPC: "2.0", Method: "notifications/progress", Params: progressParams{
		ProgressToken: c.progressToken, Progress: progress, Total: total, Message: message,
	}})
}

// Log implements Output: only at or above the request's _meta logLevel;
// nothing without one.
func (c *modernWriter) Log(level mcp.LoggingLevel, logger string, data any) {
	if rank := logRank(level); c.logLevel == 0 || rank < c.logLevel {
		return
	}
	c.event(&notification{JSONRPC: "2.0", Method: "notifications/message", Params: logParams{Data: data, Level: level, Logger: logger}})
}

// CloseStream implements Output: a no-op, the era has no resumable streams.
func (c *modernWriter) CloseStream() {}

func (c *modernWriter) event(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		c.s.opts.Logger.Error("encode event", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.ctx.Err() != nil {
		return
	}
	c.frame(data)
}

// frame writes data as one SSE event, starting the stream if need be.
// c.mu is held.
func (c *modernWriter) frame(data []byte) {
	if !c.streaming {
		c.streaming = true
		c.w.Header().Set("X-Accel-Buffering", "no")
		startEventStream(c.w)
	}
	b := make([]byte, 0, len(data)+24)
	b = append(b, "event: message\ndata: "...)
	b = append(b, data...)
	b = append(b, "\n\n"...)
	if _, err := c.w.Write(b); err == nil {
		_ = http.NewResponseController(c.w).Flush()
	}
}

func (c *modernWriter) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
}

// answer sends the result, decorated as every modern result is.
func (c *modernWriter) answer(id json.RawMessage, result any, resultType string, hint cache) {
	if r, ok := result.(*mcp.CallToolResult); ok && resultType == "complete" && !hint.set && c.answerCall(id, r) {
		return
	}
	b, err := c.s.modernResult(result, resultType, hint)
	if err != nil {
		c.s.opts.Logger.Error("encode result", "err", err)
		c.fail(failBackendFailed, errorResponse(id, failures[failBackendFailed].code, failures[failBackendFailed].message))
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if !c.streaming {
		writeRaw(c.w, id, b)
		return
	}
	c.frame(trimNewline(appendRawResponse(nil, id, b)))
}

// answerCall is answer's fast path for a tools/call result of the common
// shape (appendModernCallResponse), built in a pooled buffer; false: not
// that shape, nothing was sent.
func (c *modernWriter) answerCall(id json.RawMessage, r *mcp.CallToolResult) bool {
	bp := bufPool.Get().(*[]byte)
	b, ok := appendModernCallResponse((*bp)[:0], id, r, c.s.serverInfo)
	if ok {
		c.mu.Lock()
		c.done = true
		if c.streaming {
			c.frame(trimNewline(b))
		} else {
			writeJSONBytes(c.w, b)
		}
		c.mu.Unlock()
	}
	if cap(b) <= maxPooledBuf {
		*bp = b[:0]
	}
	bufPool.Put(bp)
	return ok
}

// fail answers with the JSON-RPC error r of failure f.
func (c *modernWriter) fail(f failure, r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	if !c.streaming {
		c.s.failWith(c.w, f, r)
		return
	}
	data, _ := json.Marshal(r)
	c.frame(data)
}

// abandon ends a request whose context ended before its answer: nothing
// more is sent for it. A credential that died under a JSON answer gets the
// 401 a request arriving now would get; the endpoint closing under one, 503
// with the request's id, and so does the node ceasing to serve
// (CloseStreamsUnavailable).
func (c *modernWriter) abandon(id json.RawMessage, cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.done = true
	switch {
	case c.streaming:
	case errors.Is(cause, errCredentialDead):
		c.s.fail(c.w, failBadToken)
	case errors.Is(cause, errClosing):
		c.s.failFor(c.w, failClosing, id, "the server is shutting down")
	case errors.Is(cause, errUnavailable):
		c.s.failFor(c.w, failUnavailable, id, "")
	}
}

// errClosing cancels the 2026-07-28 calls in flight when the endpoint
// closes.
var errClosing = errors.New("endpoint closing")

func trimNewline(b []byte) []byte {
	if n := len(b); n > 0 && b[n-1] == '\n' {
		return b[:n-1]
	}
	return b
}

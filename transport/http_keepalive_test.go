package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptrace"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPKeepAlive: the endpoint reads a POST's body to its end and
// closes it, and answers without closing the connection: a client's
// requests on one session, sized and chunked bodies, a refused one, go over
// the connection the first one opened. (net/http closes a connection after
// a response when the handler left a body unread it would not drain.) A
// resumable stream's answer is the one that ends its connection, on
// purpose (SPEC §5.2: CloseStream ends it early), and the next request
// opens one that is kept again.
func TestHTTPKeepAlive(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	f.tool("hello", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
		return textResult("hello"), nil
	})
	f.tool("progress", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 2, "half") // streams: the answer is text/event-stream
		return textResult("done"), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok) // opens the connection the first request reuses

	prevClosed := false
	for _, tt := range []struct {
		what    string
		body    string
		chunked bool
		status  int
		closes  bool
	}{
		{"ping", ht.PingBody, false, http.StatusOK, false},
		{"tools/call", ht.CallBody("2", "hello", ""), false, http.StatusOK, false},
		{"tools/call, chunked body", ht.CallBody("3", "hello", ""), true, http.StatusOK, false},
		{"a malformed body", `{"jsonrpc":`, false, http.StatusBadRequest, false},
		{"tools/call answered as a stream", ht.CallBody("4", "progress", `"p"`), false, http.StatusOK, true},
		{"ping after the stream", ht.PingBody, false, http.StatusOK, false},
		{"ping on the new connection", ht.PingBody, false, http.StatusOK, false},
	} {
		var got *httptrace.GotConnInfo
		ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
			GotConn: func(c httptrace.GotConnInfo) { got = &c },
		})
		req := e.NewRequest(ctx, http.MethodPost, ht.Headers(tok, sid), tt.body)
		if tt.chunked {
			req.ContentLength = -1 // sent chunked: read to its end without a length
			req.Body = io.NopCloser(req.Body)
		}
		resp := e.Send(req)
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("%s: read answer: %v", tt.what, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.status || resp.Close != tt.closes {
			t.Fatalf("%s: status %d, Connection: close %v; want %d, %v", tt.what, resp.StatusCode, resp.Close, tt.status, tt.closes)
		}
		if got == nil || got.Reused == prevClosed {
			t.Fatalf("%s: connection %+v; want it reused unless the answer before closed it (%v)", tt.what, got, prevClosed)
		}
		prevClosed = resp.Close
	}
}

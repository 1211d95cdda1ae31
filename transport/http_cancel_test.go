package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// ctxTool registers a tool that hands its context to the test when it
// starts, waits until the context is done, and then returns what finish
// makes of it (a tool error, or a result as if it ignored the
// cancellation). With progress it reports progress first, so its answer is
// an event stream.
func ctxTool(t *testing.T, f *fake, name string, progress bool, finish func(ctx context.Context) (*mcp.CallToolResult, error)) chan context.Context {
	t.Helper()
	started := make(chan context.Context, 16)
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		if progress {
			out.Progress(1, 0, "started")
		}
		started <- ctx
		<-ctx.Done()
		return finish(ctx)
	})
	return started
}

func awaitCtx(t *testing.T, what string, ch chan context.Context) context.Context {
	t.Helper()
	select {
	case ctx := <-ch:
		return ctx
	case <-time.After(ht.HangAfter):
		t.Fatalf("%s: tool never started", what)
	}
	return nil
}

func cancelBody(requestID string) string {
	return `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + requestID + `,"reason":"user"}}`
}

// wantNoResponse requires the answer of a cancelled call: 200 with an
// event stream that carries no JSON-RPC response (SPEC: the receiver of a
// cancellation SHOULD NOT answer), and at most the progress it sent before.
func wantNoResponse(t *testing.T, what string, res *ht.Result, progress int) {
	t.Helper()
	if res.Status != http.StatusOK || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s = %s, Content-Type %q; want 200 text/event-stream", what, res, res.Header.Get("Content-Type"))
	}
	events := ht.SSEEvents(t, res.Body)
	for _, ev := range events {
		if ev.Method != "notifications/progress" {
			t.Fatalf("%s: event %+v; want no response, only progress", what, ev)
		}
	}
	if len(events) != progress {
		t.Fatalf("%s: %d events, want %d progress", what, len(events), progress)
	}
}

// TestHTTPCancelGetsNoResponse: a call cancelled by notifications/cancelled
// gets no JSON-RPC response, whether its tool fails with the context's
// error or ignores it and returns a result, in JSON mode (an event stream
// that ends with no message) and once streaming (the stream ends after its
// progress); never the result "tool failed: context canceled".
func TestHTTPCancelGetsNoResponse(t *testing.T) {
	tests := []struct {
		name     string
		progress bool
		finish   func(ctx context.Context) (*mcp.CallToolResult, error)
	}{
		{"JSON mode, tool fails with ctx.Err", false, func(ctx context.Context) (*mcp.CallToolResult, error) { return nil, ctx.Err() }},
		{"JSON mode, tool ignores the cancel", false, func(context.Context) (*mcp.CallToolResult, error) {
			return textResult("done anyway"), nil
		}},
		{"streaming, tool fails with ctx.Err", true, func(ctx context.Context) (*mcp.CallToolResult, error) { return nil, ctx.Err() }},
		{"streaming, tool ignores the cancel", true, func(context.Context) (*mcp.CallToolResult, error) {
			return textResult("done anyway"), nil
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFake(t)
			_, tok := openMinted(t, f, "T", "A")
			started := ctxTool(t, f, "slow", test.progress, test.finish)
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.Initialize(tok)
			token := ""
			if test.progress {
				token = `"p"`
			}
			call := e.AsyncPost(tok, sid, ht.CallBody(`"c-1"`, "slow", token))
			ctx := awaitCtx(t, test.name, started)
			ht.WantStatus(t, "cancel", e.Post(tok, sid, cancelBody(`"c-1"`)), http.StatusAccepted)
			if ctx.Err() == nil {
				t.Fatal("the call's context is not cancelled once notifications/cancelled was answered")
			}
			progress := 0
			if test.progress {
				progress = 1
			}
			res := call.Await(t, "the cancelled call")
			wantNoResponse(t, "the cancelled call", res, progress)
			if strings.Contains(string(res.Body), "tool failed") {
				t.Fatalf("the cancelled call = %s", res)
			}
			e.WantPing("the session afterwards", tok, sid)
		})
	}
}

// TestHTTPCancelSessionEndedMidCall: a call in flight in JSON mode whose
// session ends under it — DELETE, or the revocation of its owner's only
// credential — gets the session's 404, as a request arriving now would,
// not a result.
func TestHTTPCancelSessionEndedMidCall(t *testing.T) {
	tests := []struct {
		name string
		end  func(t *testing.T, e *mcpEnv, credID, tok, sid string)
	}{
		{"DELETE", func(t *testing.T, e *mcpEnv, _, tok, sid string) {
			ht.WantStatus(t, "DELETE", e.Del(tok, sid), http.StatusNoContent)
		}},
		{"owner revoked", func(t *testing.T, e *mcpEnv, credID, _, _ string) {
			e.f.revoke(credID)
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFake(t)
			credID, tok := openMinted(t, f, "T", "A")
			started := ctxTool(t, f, "slow", false, func(ctx context.Context) (*mcp.CallToolResult, error) { return nil, ctx.Err() })
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.Initialize(tok)
			call := e.AsyncPost(tok, sid, ht.CallBody(`"c-1"`, "slow", ""))
			awaitCtx(t, test.name, started)
			unknown := e.Post(tok, ht.MadeUpSessionID, ht.PingBody)
			test.end(t, e, credID, tok, sid)
			ht.SameAsUnknown(t, "the call whose session ended", call.Await(t, "the call"), unknown)
		})
	}
}

// TestHTTPCancelIDsByValue: request ids are compared by their decoded
// value. "\u0031" and "1" are one id (the second is a duplicate while the
// first is in flight), the number 1 and the string "1" are two, and a
// cancellation names its call in any spelling of the same value.
func TestHTTPCancelIDsByValue(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	started := ctxTool(t, f, "slow", false, func(ctx context.Context) (*mcp.CallToolResult, error) { return nil, ctx.Err() })
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)

	escaped := e.AsyncPost(tok, sid, ht.CallBody(`"\u0031"`, "slow", ""))
	ctxString := awaitCtx(t, `call "\u0031"`, started)
	dup := e.AsyncPost(tok, sid, ht.CallBody(`"1"`, "slow", "")).Await(t, `call "1" while "\u0031" is in flight`)
	if a := dup.RPC(t); a.Error == nil || a.Error.Code != -32600 || string(a.ID) != `"1"` {
		t.Fatalf(`call "1" while "\u0031" is in flight = %s, want the -32600 duplicate-id error with id "1"`, dup)
	}
	number := e.AsyncPost(tok, sid, ht.CallBody(`1`, "slow", ""))
	ctxNumber := awaitCtx(t, "call 1 beside the string one", started)

	ht.WantStatus(t, "cancel 1.0", e.Post(tok, sid, cancelBody(`1e0`)), http.StatusAccepted)
	if ctxString.Err() != nil || ctxNumber.Err() == nil {
		t.Fatalf(`after cancelling 1e0: string call ctx %v, number call ctx %v; want only the number's cancelled`, ctxString.Err(), ctxNumber.Err())
	}
	wantNoResponse(t, "the number call", number.Await(t, "the number call"), 0)
	ht.WantStatus(t, `cancel "\u0031" spelled "1"`, e.Post(tok, sid, cancelBody(`"1"`)), http.StatusAccepted)
	if ctxString.Err() == nil {
		t.Fatal(`cancelling "1" did not cancel the call "\u0031"`)
	}
	wantNoResponse(t, "the string call", escaped.Await(t, "the string call"), 0)
	e.WantPing("the session afterwards", tok, sid)
}

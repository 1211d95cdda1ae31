package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// listenBody is subscriptions/listen with id and filter.
func listenBody(id, filter string) string {
	return modernBody(id, "subscriptions/listen", `"notifications":`+filter)
}

// openListen opens a listen stream and requires 200 text/event-stream.
func openListen(t *testing.T, e *mcpEnv, tok, id, filter string) *ht.Stream {
	t.Helper()
	st, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "subscriptions/listen", ""), listenBody(id, filter)))
	if st == nil {
		t.Fatalf("listen = %s, want 200 text/event-stream", res)
	}
	if st.Resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("listen: X-Accel-Buffering = %q, want no", st.Resp.Header.Get("X-Accel-Buffering"))
	}
	return st
}

// waitEvents waits until st carried n events and returns them.
func waitEvents(t *testing.T, what string, st *ht.Stream, n int) []ht.SSEEvent {
	t.Helper()
	ht.WaitUntil(t, what, func() bool { return len(st.Events()) >= n })
	return st.Events()
}

// TestHTTPModernListen: SPEC §5a.7 — the first event acknowledges the
// honoured subset of the filter; then only what was opted into, each
// tagged with the subscription id (the listen request's id); a resource
// update only if the principal may read it when it goes out; the
// endpoint's shutdown answers the listen request, then closes.
func TestHTTPModernListen(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	f.resource("test://mine", "x")
	f.resource("test://theirs", "y", "U/A")
	e := newMCPEnv(t, f, transport.Options{})
	st := openListen(t, e, tok, `"L1"`, `{"toolsListChanged":true,"resourceSubscriptions":["test://mine","test://theirs","test://none"]}`)
	ev := waitEvents(t, "ack", st, 1)
	const ack = `{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"},"notifications":{"toolsListChanged":true,"resourceSubscriptions":["test://mine"]}}}`
	if ev[0].Data != ack || ev[0].ID != "" {
		t.Fatalf("first event = %+v, want %s without an id", ev[0], ack)
	}
	// Not opted into, unreadable, then one that is: only the last comes,
	// so nothing before it came either.
	e.srv.ListChanged("prompts")
	e.srv.ResourceUpdated("test://theirs")
	e.srv.ResourceUpdated("test://mine")
	e.srv.ListChanged("tools")
	ev = waitEvents(t, "notifications", st, 3)
	want := []string{
		`{"jsonrpc":"2.0","method":"notifications/resources/updated","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"},"uri":"test://mine"}}`,
		`{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}`,
	}
	if len(ev) != 3 || ev[1].Data != want[0] || ev[2].Data != want[1] {
		t.Fatalf("events = %+v, want the ack then %q", ev, want)
	}
	// mine stops being readable: its update is not delivered.
	f.removeResource("test://mine")
	e.srv.ResourceUpdated("test://mine")
	e.srv.ListChanged("tools")
	ev = waitEvents(t, "after removal", st, 4)
	if len(ev) != 4 || ev[3].Data != want[1] {
		t.Fatalf("events = %+v, want only the list change after the removal", ev)
	}
	e.srv.CloseStreams()
	st.WantEnd(t, "listen at shutdown")
	ev = st.Events()
	last := ev[len(ev)-1].Data
	if !strings.HasPrefix(last, `{"jsonrpc":"2.0","id":"L1","result":{"resultType":"complete","_meta":{`) || !strings.Contains(last, `"io.modelcontextprotocol/subscriptionId":"L1"`) {
		t.Fatalf("last event = %s, want the listen request's complete result naming the subscription", last)
	}
	if n := e.srv.ListenStreams(); n != 0 {
		t.Fatalf("ListenStreams() = %d after shutdown, want 0", n)
	}
	res := e.Do(http.MethodPost, modernHeaders(tok, "subscriptions/listen", ""), listenBody("2", `{}`))
	wantRetryLaterWithID(t, "listen while closing", res, http.StatusServiceUnavailable, "1")
}

// TestHTTPModernListenClosedOnRevoke: SPEC §5a.7, §6 — revoking the
// listen stream's credential, or removing it, ends the stream without a
// result, as every stream of the credential ends.
func TestHTTPModernListenClosedOnRevoke(t *testing.T) {
	for _, how := range []string{"revoke", "remove"} {
		t.Run(how, func(t *testing.T) {
			f := newFake(t)
			tok, id := f.provider("T", "A", 0)
			e := newMCPEnv(t, f, transport.Options{})
			st := openListen(t, e, tok, "9", `{"toolsListChanged":true}`)
			waitEvents(t, "ack", st, 1)
			if how == "revoke" {
				f.revoke(id)
			} else {
				f.remove(id)
			}
			st.WantEnd(t, "listen after "+how)
			if ev := st.Events(); len(ev) != 1 {
				t.Fatalf("events = %+v, want only the ack", ev)
			}
			ht.WaitUntil(t, "listener gone", func() bool { return e.srv.ListenStreams() == 0 })
		})
	}
}

// TestHTTPModernListenClosedOnRevokeOneToken: a client grant's tokens share
// a namespace; revoking one closes the listen stream opened with it and
// leaves the other token's stream open (the credential is watched, not
// only the namespace).
func TestHTTPModernListenClosedOnRevokeOneToken(t *testing.T) {
	f := newFake(t)
	tok1, id1 := f.client("g", "read-only", 0)
	tok2, _ := f.client("g", "read-only", 0)
	e := newMCPEnv(t, f, transport.Options{})
	st1 := openListen(t, e, tok1, "1", `{"toolsListChanged":true}`)
	st2 := openListen(t, e, tok2, "2", `{"toolsListChanged":true}`)
	waitEvents(t, "ack 1", st1, 1)
	waitEvents(t, "ack 2", st2, 1)
	f.revoke(id1)
	st1.WantEnd(t, "the revoked token's listen")
	e.srv.ListChanged("tools")
	if ev := waitEvents(t, "the other token's listen", st2, 2); !strings.Contains(ev[1].Data, "notifications/tools/list_changed") {
		t.Fatalf("other stream = %+v, want the list change", ev)
	}
}

// TestHTTPModernListenBounds: SPEC §5a.8 — listen streams are bounded per
// namespace (429) and in all (503); a refused one changes nothing.
func TestHTTPModernListenBounds(t *testing.T) {
	f, tok, other := twoCredentials(t)
	third, _ := f.provider("V", "A", 0)
	e := newMCPEnv(t, f, transport.Options{MaxListenStreamsPerNamespace: 1, MaxListenStreams: 2})
	waitEvents(t, "first", openListen(t, e, tok, "1", `{}`), 1)
	res := e.Do(http.MethodPost, modernHeaders(tok, "subscriptions/listen", ""), listenBody("2", `{}`))
	wantRetryLaterWithID(t, "second of the namespace", res, http.StatusTooManyRequests, "1")
	if a := res.RPC(t); string(a.ID) != "2" {
		t.Fatalf("refusal = %s, want id 2 echoed", res)
	}
	waitEvents(t, "other namespace", openListen(t, e, other, "1", `{}`), 1)
	res = e.Do(http.MethodPost, modernHeaders(third, "subscriptions/listen", ""), listenBody("3", `{}`))
	wantRetryLaterWithID(t, "past the endpoint's bound", res, http.StatusServiceUnavailable, "1")
}

// TestHTTPModernLogLevel: SPEC §5a.4 — no notifications/message without
// _meta logLevel (the answer is plain JSON); with one, the levels at or
// above it on the request's own stream, marked X-Accel-Buffering: no,
// without event ids, then the result.
func TestHTTPModernLogLevel(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	f.tool("log_levels", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		for _, l := range []mcp.LoggingLevel{"debug", "info", "warning", "error"} {
			out.Log(l, "t", string(l))
		}
		return textResult("done"), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	h := modernHeaders(tok, "tools/call", "log_levels")
	res := e.Do(http.MethodPost, h, modernBody("1", "tools/call", `"name":"log_levels","arguments":{}`))
	if ct := res.Header.Get("Content-Type"); ct != "application/json" || strings.Contains(string(res.Body), "notifications/message") {
		t.Fatalf("without logLevel = %s (%s), want the JSON result alone", res, ct)
	}
	body := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"log_levels","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"warning"}}}`
	res = e.Do(http.MethodPost, h, body)
	if res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("with logLevel = %s %v, want an event stream with X-Accel-Buffering: no", res, res.Header)
	}
	ev := ht.ParseSSE(string(res.Body))
	if len(ev) != 3 || !strings.Contains(ev[0].Data, `"level":"warning"`) || !strings.Contains(ev[1].Data, `"level":"error"`) || !strings.Contains(ev[2].Data, `"id":2,"result":{`) {
		t.Fatalf("events = %+v, want warning, error, the result", ev)
	}
	for _, x := range ev {
		if x.ID != "" {
			t.Fatalf("event %+v has an id: the era has no resumption", x)
		}
	}
}

// TestHTTPModernCancellation: SPEC §5a.5 — a modern call's client going
// away cancels it (the opposite of a session's rule), and its credential's
// revocation cancels it whether it answers JSON or streams; a JSON one is
// then answered 401.
func TestHTTPModernCancellation(t *testing.T) {
	f := newFake(t)
	tok, id := f.provider("T", "A", 0)
	b := f.blocking("block", false)
	bp := f.blocking("block_progress", true)
	e := newMCPEnv(t, f, transport.Options{})

	ctx, cancel := context.WithCancel(context.Background())
	p := e.AsyncSend(e.NewRequest(ctx, http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("1", "tools/call", `"name":"block","arguments":{}`)))
	b.WaitStarted(t, "call")
	cancel()
	b.WantCancelled(t, "a modern call whose client went")
	_ = p

	json := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("2", "tools/call", `"name":"block","arguments":{}`)))
	b.WaitStarted(t, "JSON call")
	sse := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block_progress"),
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"block_progress","arguments":{},"_meta":{"progressToken":"p","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	bp.WaitStarted(t, "streaming call")
	f.revoke(id)
	b.WantCancelled(t, "a JSON modern call whose credential was revoked")
	bp.WantCancelled(t, "a streaming modern call whose credential was revoked")
	ht.Want401(t, "the revoked JSON call", json.Await(t, "JSON call"), ht.InvalidToken)
	res := sse.Await(t, "streaming call")
	if ev := ht.ParseSSE(string(res.Body)); len(ev) != 1 || !strings.Contains(ev[0].Data, "notifications/progress") {
		t.Fatalf("revoked stream = %s, want its progress and nothing after", res)
	}
}

// TestHTTPModernRequestBound: SPEC §5a.8 — the modern requests of a
// namespace in flight are bounded: the next gets 429 + Retry-After; another
// namespace is not affected; an open listen stream does not count.
func TestHTTPModernRequestBound(t *testing.T) {
	f, tok, other := twoCredentials(t)
	b := f.blocking("block", false)
	f.tool("whoami", func(_ context.Context, p principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		return textResult(p.Namespace), nil
	})
	e := newMCPEnv(t, f, transport.Options{MaxModernRequestsPerNamespace: 1})
	// An open listen stream is not a request in flight.
	waitEvents(t, "listen", openListen(t, e, tok, "0", `{}`), 1)
	ht.WantStatus(t, "a call beside the listen stream", e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "whoami"), modernBody("9", "tools/call", `"name":"whoami","arguments":{}`)), http.StatusOK)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.AsyncSend(e.NewRequest(ctx, http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("1", "tools/call", `"name":"block","arguments":{}`)))
	b.WaitStarted(t, "first")
	call := modernBody("2", "tools/call", `"name":"whoami","arguments":{}`)
	// Refused before its body is read: no id to echo.
	ht.WantRetryLater(t, "second of the namespace", e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "whoami"), call), http.StatusTooManyRequests, "1")
	ht.WantStatus(t, "another namespace", e.Do(http.MethodPost, modernHeaders(other, "tools/call", "whoami"), call), http.StatusOK)
	cancel()
	b.WantCancelled(t, "first")
}

// wantRetryLaterWithID requires status with Retry-After secs and the
// request's id echoed, as every modern refusal is.
func wantRetryLaterWithID(t *testing.T, what string, res *ht.Result, status int, secs string) {
	t.Helper()
	ht.WantStatus(t, what, res, status)
	if got := res.Header.Get("Retry-After"); got != secs {
		t.Fatalf("%s: Retry-After = %q, want %q", what, got, secs)
	}
	if a := res.RPC(t); len(a.ID) == 0 || a.Error == nil {
		t.Fatalf("%s = %s, want an error echoing the id", what, res)
	}
}

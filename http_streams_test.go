package mcpruntime_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// revocation is a way to end a token: setup returns the token and the call
// that revokes it; sessionEnds says whether its MCP sessions end too (a
// refresh with revokePrevious keeps the grant's namespace live).
type revocation struct {
	name        string
	setup       func(t *testing.T, rt *mcpruntime.Runtime) (tok string, revoke func() error)
	sessionEnds bool
}

func revocations() []revocation {
	ctx := context.Background()
	return []revocation{
		{"release provider session", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ps, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.ReleaseProviderSession(ctx, ps.ID) }
		}, true},
		{"archive thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.Archive(ctx, "T") }
		}, true},
		{"delete thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.DeleteThread(ctx, "T") }
		}, true},
		{"rotate", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }
		}, true},
		{"revoke client", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token, func() error { return rt.RevokeClient(ctx, ct.ClientID) }
		}, true},
		{"refresh client revoking previous", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token, func() error { _, err := rt.RefreshClient(ctx, ct.ClientID, true); return err }
		}, false},
	}
}

// bystander is a session of another thread and another grant, with open
// streams, that no revocation of the test touches.
type bystander struct {
	provTok, provSID string
	provStream       *sseStream
	clientTok, cSID  string
	clientStream     *sseStream
}

func newBystander(t *testing.T, rt *mcpruntime.Runtime, e *mcpEnv) *bystander {
	t.Helper()
	b := &bystander{}
	_, b.provTok = openMinted(t, rt, "U", "A")
	b.provSID = e.initialize(b.provTok)
	b.provStream = e.stream(b.provTok, b.provSID)
	ct, _ := issueClient(t, rt, "bystander", memdb.AccessReadOnly)
	b.clientTok = ct.Token
	b.cSID = e.initialize(b.clientTok)
	b.clientStream = e.stream(b.clientTok, b.cSID)
	return b
}

func (b *bystander) check(t *testing.T, e *mcpEnv) {
	t.Helper()
	if !b.provStream.isOpen() || !b.clientStream.isOpen() {
		t.Fatalf("a bystander's stream ended: provider %v, client %v", !b.provStream.isOpen(), !b.clientStream.isOpen())
	}
	e.wantPing("bystander provider session", b.provTok, b.provSID)
	e.wantPing("bystander client session", b.clientTok, b.cSID)
}

// TestHTTPStreamClosesOnRevoke: the standalone stream opened under a token
// ends once the call that revokes the token returned, for every way of
// revoking one (SPEC §3: within 1 s; the server tells it inside the call,
// see wantEnd); other principals' streams stay open. Keep-alives come every
// 25 s and nothing else is sent: only the revocation can end the stream.
func TestHTTPStreamClosesOnRevoke(t *testing.T) {
	for _, test := range revocations() {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T", "U")
			tok, revoke := test.setup(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{}) // keep-alives every 25 s: they cannot end the stream
			by := newBystander(t, rt, e)
			sid := e.initialize(tok)
			st := e.stream(tok, sid)

			noErr(t, revoke())
			st.wantEnd(t, test.name)
			if test.sessionEnds {
				waitSessionGone(t, rt, test.name, sid)
			} else if !hasRecord(rt, sid) {
				t.Fatalf("%s ended session %s", test.name, sid)
			}
			by.check(t, e)
		})
	}
}

// TestHTTPStreamProgressResponseClosesOnRevoke: a tools/call answered as
// an event stream is a stream opened under the caller's token too: it ends
// once the revocation returned, and the call's context is cancelled.
func TestHTTPStreamProgressResponseClosesOnRevoke(t *testing.T) {
	for _, test := range revocations() {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T", "U")
			tool := registerBlockingTool(t, rt, "block_progress", true)
			tok, revoke := test.setup(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.initialize(tok)
			st, res := e.openSSE(e.newRequest(context.Background(), http.MethodPost, mcpHeaders(tok, sid), callBody("11", "block_progress", `"p"`)))
			if st == nil {
				t.Fatalf("tools/call with progress = %s, want 200 text/event-stream", res)
			}
			tool.waitStarted(t, test.name)
			waitUntil(t, "first progress event", func() bool {
				return slices.ContainsFunc(st.snapshot(), func(l string) bool { return strings.Contains(l, "notifications/progress") })
			})

			noErr(t, revoke())
			st.wantEnd(t, test.name)
			tool.wantCancelled(t, test.name)
		})
	}
}

// TestHTTPStreamDeleteEndsStream: DELETE by the owner ends the session's
// open stream; the id then answers 404 to GET.
func TestHTTPStreamDeleteEndsStream(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(ct.Token)
	st := e.stream(ct.Token, sid)

	wantStatus(t, "DELETE", e.del(ct.Token, sid), http.StatusNoContent)
	st.wantEnd(t, "DELETE")
	if _, res := e.openStream(getHeaders(ct.Token, sid)); res.Status != http.StatusNotFound {
		t.Fatalf("GET after DELETE = %s, want 404", res)
	}
}

// TestHTTPStreamSecondGetConflict: one standalone stream per session: a
// second GET gets 409 while the first is open, and succeeds once it closed.
// Another session of the same token has its own.
func TestHTTPStreamSecondGetConflict(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)
	first := e.stream(tok, sid)

	second, res := e.openStream(getHeaders(tok, sid))
	if second != nil || res.Status != http.StatusConflict {
		t.Fatalf("second GET = %s, want 409", res)
	}
	if a := res.rpc(t); a.Error == nil {
		t.Fatalf("409 body %s, want a JSON-RPC error", res)
	}
	if !first.isOpen() {
		t.Fatal("the first stream ended on the second GET")
	}
	e.wantPing("session with an open stream", tok, sid)
	other := e.initialize(tok)
	e.stream(tok, other)

	first.close()
	waitUntil(t, "GET after the first stream closed", func() bool {
		st, res := e.openStream(getHeaders(tok, sid))
		switch {
		case st != nil:
			return true
		case res.Status != http.StatusConflict:
			t.Fatalf("GET = %s, want 200 or 409", res)
		}
		return false
	})
}

// TestHTTPStreamKeepAlive: an idle stream carries ": keepalive" comments
// every Options.KeepAlive.
func TestHTTPStreamKeepAlive(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{KeepAlive: 50 * time.Millisecond})
	sid := e.initialize(ct.Token)
	st := e.stream(ct.Token, sid)
	if got := st.resp.Header.Get("Content-Type"); got != "text/event-stream" {
		t.Fatalf("stream Content-Type = %q, want text/event-stream", got)
	}
	waitUntil(t, "three keep-alive comments", func() bool {
		n := 0
		for _, l := range st.snapshot() {
			switch l {
			case ": keepalive":
				n++
			case "":
			default:
				t.Fatalf("stream line %q, want only keep-alive comments", l)
			}
		}
		return n >= 3
	})
	if !st.isOpen() {
		t.Fatal("stream ended")
	}
}

// TestHTTPStreamProgress: a call with a progress token whose tool reports
// progress is answered as an event stream: the progress notifications,
// then the result. Without a token the same call is plain JSON.
func TestHTTPStreamProgress(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Name:   "count_to_three",
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcpruntime.ToolResult, error) {
			call.Progress(1, 3, "one")
			call.Progress(2, 3, "two")
			return &mcpruntime.ToolResult{Text: "three"}, nil
		},
	}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)

	type progress struct {
		ProgressToken json.RawMessage `json:"progressToken"`
		Progress      float64         `json:"progress"`
		Total         float64         `json:"total"`
		Message       string          `json:"message"`
	}
	for _, progressToken := range []string{`"p-1"`, `42`} {
		t.Run(progressToken, func(t *testing.T) {
			res := e.post(tok, sid, callBody("21", "count_to_three", progressToken))
			wantStatus(t, "tools/call with a progress token", res, http.StatusOK)
			if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type = %q, want text/event-stream", ct)
			}
			events := sseEvents(t, res.Body)
			if len(events) != 3 {
				t.Fatalf("%d events %s, want 2 progress notifications and the result", len(events), res.Body)
			}
			for i, want := range []progress{
				{json.RawMessage(progressToken), 1, 3, "one"},
				{json.RawMessage(progressToken), 2, 3, "two"},
			} {
				var got progress
				if events[i].Method != "notifications/progress" || len(events[i].ID) != 0 || json.Unmarshal(events[i].Params, &got) != nil ||
					string(got.ProgressToken) != string(want.ProgressToken) || got.Progress != want.Progress || got.Total != want.Total || got.Message != want.Message {
					t.Fatalf("event %d = %+v %s, want notifications/progress %+v", i, events[i], events[i].Params, want)
				}
			}
			last := events[2]
			var r toolResult
			if string(last.ID) != "21" || last.Error != nil || json.Unmarshal(last.Result, &r) != nil || r.IsError || len(r.Content) != 1 || r.Content[0].Text != "three" {
				t.Fatalf("last event = %+v %s, want the result of request 21 with text three", last, last.Result)
			}
		})
	}
	t.Run("no progress token", func(t *testing.T) {
		res := e.post(tok, sid, callBody("22", "count_to_three", ""))
		wantStatus(t, "tools/call without a progress token", res, http.StatusOK)
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type = %q, want application/json", ct)
		}
		var r toolResult
		decodeResult(t, res, &r)
		if r.IsError || len(r.Content) != 1 || r.Content[0].Text != "three" {
			t.Fatalf("tools/call = %s, want text three", res)
		}
	})
}

// TestHTTPStreamCancelInflight: a call in flight has its context cancelled
// by notifications/cancelled for its id, by DELETE of its session, and by
// the revocation of its caller's token.
func TestHTTPStreamCancelInflight(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// cancel cancels the call with id `"c-1"` in flight on sid.
		cancel func(t *testing.T, e *mcpEnv, ps mcpruntime.ProviderSession, tok, sid string)
		// sessionLives: the session is still usable afterwards.
		sessionLives bool
	}{
		{"notifications/cancelled", func(t *testing.T, e *mcpEnv, _ mcpruntime.ProviderSession, tok, sid string) {
			body := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1","reason":"user"}}`
			wantStatus(t, "notifications/cancelled", e.post(tok, sid, body), http.StatusAccepted)
		}, true},
		{"DELETE", func(t *testing.T, e *mcpEnv, _ mcpruntime.ProviderSession, tok, sid string) {
			wantStatus(t, "DELETE", e.del(tok, sid), http.StatusNoContent)
		}, false},
		{"release provider session", func(t *testing.T, e *mcpEnv, ps mcpruntime.ProviderSession, _, _ string) {
			noErr(t, e.rt.ReleaseProviderSession(ctx, ps.ID))
		}, false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			ps, tok := openMinted(t, rt, "T", "A")
			tool := registerBlockingTool(t, rt, "block", false)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.initialize(tok)
			call := e.asyncPost(tok, sid, callBody(`"c-1"`, "block", ""))
			tool.waitStarted(t, test.name)
			e.wantPing("while the call is in flight", tok, sid)

			test.cancel(t, e, ps, tok, sid)
			tool.wantCancelled(t, test.name)
			call.await(t, "the cancelled call")
			if test.sessionLives {
				e.wantPing("after the cancellation", tok, sid)
			} else {
				waitSessionGone(t, rt, test.name, sid)
			}
		})
	}
}

// TestHTTPStreamConcurrentCallsOnOneSession: several tools/call are in
// flight on one session at once, and neither they nor the session's other
// requests wait for each other; each is cancelled on its own.
func TestHTTPStreamConcurrentCallsOnOneSession(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	tool := registerBlockingTool(t, rt, "block", false)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)

	ids := []string{`"c-1"`, `"c-2"`, `"c-3"`}
	var calls []*pendingPost
	for _, id := range ids {
		calls = append(calls, e.asyncPost(tok, sid, callBody(id, "block", "")))
	}
	for range ids {
		tool.waitStarted(t, "three calls in flight at once")
	}
	e.wantPing("while three calls are in flight", tok, sid)

	for i, id := range ids {
		body := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`
		wantStatus(t, "cancel "+id, e.post(tok, sid, body), http.StatusAccepted)
		tool.wantCancelled(t, "call "+id)
		calls[i].await(t, "call "+id)
	}
	e.wantPing("after the calls", tok, sid)
}

// TestHTTPStreamClosesOnExpiry: a credential that expires (no turn within
// its liveness window) closes the streams opened under it, with no request
// and no revoke call to trigger it, and the session, whose namespace has no
// live credential left, ends. The clock is fake, so the credential cannot
// expire while the test sets up, however slow the machine; the liveness
// monitor's timer wakes on real time, a window apart, and reads the clock.
func TestHTTPStreamClosesOnExpiry(t *testing.T) {
	const window = 50 * time.Millisecond
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: window})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	p := assertLive(t, rt, "fresh credential", tok)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{}) // keep-alives every 25 s: they cannot end the stream
	sid := e.initialize(tok)
	st := e.stream(tok, sid)

	clk.Advance(p.Expires.Sub(clk.Now()) - time.Nanosecond)
	e.wantPing("a nanosecond before the expiry", tok, sid)
	if !st.isOpen() {
		t.Fatal("stream ended before its credential expired")
	}
	clk.Advance(time.Nanosecond)
	st.wantEnd(t, "expiry")
	waitSessionGone(t, rt, "expiry", sid)
	want401(t, "request after expiry", e.post(tok, sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`), `Bearer error="invalid_token"`)
}

// TestHTTPStreamCloseStreamsKeepsCalls: the first step of a graceful
// shutdown closes every standalone stream and refuses new sessions, while a
// call in flight runs to its end.
func TestHTTPStreamCloseStreamsKeepsCalls(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Name:   "slow",
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcpruntime.ToolResult, error) {
			started <- struct{}{}
			select {
			case <-release:
				return &mcpruntime.ToolResult{Text: "finished"}, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		},
	}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)
	st := e.stream(tok, sid)
	call := e.asyncPost(tok, sid, callBody(`"s-1"`, "slow", ""))
	<-started

	e.srv.CloseStreams()
	st.wantEnd(t, "CloseStreams")
	if got := e.do(http.MethodPost, mcpHeaders(tok, ""), initBody("2025-11-25")); got.Status != http.StatusServiceUnavailable {
		t.Fatalf("initialize while draining = %d, want 503", got.Status)
	}
	close(release)
	res := call.await(t, "the call in flight")
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), "finished") {
		t.Fatalf("call in flight = %d %s, want 200 with its result", res.Status, res.Body)
	}
}

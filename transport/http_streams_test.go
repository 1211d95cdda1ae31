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
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPStreamDeleteEndsStream: DELETE by the owner ends the session's
// open stream; the id then answers 404 to GET.
func TestHTTPStreamDeleteEndsStream(t *testing.T) {
	f := newFake(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(ct.Token)
	st := e.Stream(ct.Token, sid)

	ht.WantStatus(t, "DELETE", e.Del(ct.Token, sid), http.StatusNoContent)
	st.WantEnd(t, "DELETE")
	if _, res := e.OpenStream(ht.GetHeaders(ct.Token, sid)); res.Status != http.StatusNotFound {
		t.Fatalf("GET after DELETE = %s, want 404", res)
	}
}

// TestHTTPStreamSecondGetConflict: one standalone stream per session: a
// second GET gets 409 while the first is open, and succeeds once it closed.
// Another session of the same token has its own.
func TestHTTPStreamSecondGetConflict(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	first := e.Stream(tok, sid)

	second, res := e.OpenStream(ht.GetHeaders(tok, sid))
	if second != nil || res.Status != http.StatusConflict {
		t.Fatalf("second GET = %s, want 409", res)
	}
	if a := res.RPC(t); a.Error == nil {
		t.Fatalf("409 body %s, want a JSON-RPC error", res)
	}
	if !first.IsOpen() {
		t.Fatal("the first stream ended on the second GET")
	}
	e.WantPing("session with an open stream", tok, sid)
	other := e.Initialize(tok)
	e.Stream(tok, other)

	first.Close()
	ht.WaitUntil(t, "GET after the first stream closed", func() bool {
		st, res := e.OpenStream(ht.GetHeaders(tok, sid))
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
// every Options.KeepAlive, after its priming event (the retry field, the
// stream's event 0 and no data).
func TestHTTPStreamKeepAlive(t *testing.T) {
	f := newFake(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, transport.Options{KeepAlive: 50 * time.Millisecond})
	sid := e.Initialize(ct.Token)
	st := e.Stream(ct.Token, sid)
	if got := st.Resp.Header.Get("Content-Type"); got != "text/event-stream" {
		t.Fatalf("stream Content-Type = %q, want text/event-stream", got)
	}
	ht.WaitUntil(t, "three keep-alive comments", func() bool {
		n := 0
		lines := st.Snapshot()
		for i, l := range lines {
			switch {
			case i < 3:
				if want := []string{"retry: 1000", "id: 1.0", "data:"}[i]; l != want {
					t.Fatalf("stream line %d %q, want %q (the priming event)", i, l, want)
				}
			case l == ": keepalive":
				n++
			case l == "":
			default:
				t.Fatalf("stream line %q, want only keep-alive comments after the priming event", l)
			}
		}
		return n >= 3
	})
	if !st.IsOpen() {
		t.Fatal("stream ended")
	}
}

// TestHTTPStreamProgress: a call with a progress token whose tool reports
// progress is answered as an event stream: the progress notifications,
// then the result. Without a token the same call is plain JSON.
func TestHTTPStreamProgress(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	f.tool("count_to_three", func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 3, "one")
		out.Progress(2, 3, "two")
		return textResult("three"), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)

	type progress struct {
		ProgressToken json.RawMessage `json:"progressToken"`
		Progress      float64         `json:"progress"`
		Total         float64         `json:"total"`
		Message       string          `json:"message"`
	}
	for _, progressToken := range []string{`"p-1"`, `42`} {
		t.Run(progressToken, func(t *testing.T) {
			res := e.Post(tok, sid, ht.CallBody("21", "count_to_three", progressToken))
			ht.WantStatus(t, "tools/call with a progress token", res, http.StatusOK)
			if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type = %q, want text/event-stream", ct)
			}
			events := ht.SSEEvents(t, res.Body)
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
			var r ht.ToolResult
			if string(last.ID) != "21" || last.Error != nil || json.Unmarshal(last.Result, &r) != nil || r.IsError || len(r.Content) != 1 || r.Content[0].Text != "three" {
				t.Fatalf("last event = %+v %s, want the result of request 21 with text three", last, last.Result)
			}
		})
	}
	t.Run("no progress token", func(t *testing.T) {
		res := e.Post(tok, sid, ht.CallBody("22", "count_to_three", ""))
		ht.WantStatus(t, "tools/call without a progress token", res, http.StatusOK)
		if ct := res.Header.Get("Content-Type"); ct != "application/json" {
			t.Fatalf("Content-Type = %q, want application/json", ct)
		}
		var r ht.ToolResult
		ht.DecodeResult(t, res, &r)
		if r.IsError || len(r.Content) != 1 || r.Content[0].Text != "three" {
			t.Fatalf("tools/call = %s, want text three", res)
		}
	})
}

// TestHTTPStreamCancelInflight: a call in flight has its context cancelled
// by notifications/cancelled for its id, by DELETE of its session, and by
// the revocation of its caller's token.
func TestHTTPStreamCancelInflight(t *testing.T) {
	tests := []struct {
		name string
		// cancel cancels the call with id `"c-1"` in flight on sid.
		cancel func(t *testing.T, e *mcpEnv, credID, tok, sid string)
		// sessionLives: the session is still usable afterwards.
		sessionLives bool
	}{
		{"notifications/cancelled", func(t *testing.T, e *mcpEnv, _ string, tok, sid string) {
			body := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"c-1","reason":"user"}}`
			ht.WantStatus(t, "notifications/cancelled", e.Post(tok, sid, body), http.StatusAccepted)
		}, true},
		{"DELETE", func(t *testing.T, e *mcpEnv, _ string, tok, sid string) {
			ht.WantStatus(t, "DELETE", e.Del(tok, sid), http.StatusNoContent)
		}, false},
		{"revocation of the caller's token", func(t *testing.T, e *mcpEnv, credID string, _, _ string) {
			e.f.revoke(credID)
		}, false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFake(t)
			credID, tok := openMinted(t, f, "T", "A")
			tool := f.blocking("block", false)
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.Initialize(tok)
			call := e.AsyncPost(tok, sid, ht.CallBody(`"c-1"`, "block", ""))
			tool.WaitStarted(t, test.name)
			e.WantPing("while the call is in flight", tok, sid)

			test.cancel(t, e, credID, tok, sid)
			tool.WantCancelled(t, test.name)
			call.Await(t, "the cancelled call")
			if test.sessionLives {
				e.WantPing("after the cancellation", tok, sid)
			} else {
				waitSessionGone(t, f, test.name, sid)
			}
		})
	}
}

// TestHTTPStreamConcurrentCallsOnOneSession: several tools/call are in
// flight on one session at once, and neither they nor the session's other
// requests wait for each other; each is cancelled on its own.
func TestHTTPStreamConcurrentCallsOnOneSession(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	tool := f.blocking("block", false)
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)

	ids := []string{`"c-1"`, `"c-2"`, `"c-3"`}
	var calls []*ht.Pending
	for _, id := range ids {
		calls = append(calls, e.AsyncPost(tok, sid, ht.CallBody(id, "block", "")))
	}
	for range ids {
		tool.WaitStarted(t, "three calls in flight at once")
	}
	e.WantPing("while three calls are in flight", tok, sid)

	for i, id := range ids {
		body := `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":` + id + `}}`
		ht.WantStatus(t, "cancel "+id, e.Post(tok, sid, body), http.StatusAccepted)
		tool.WantCancelled(t, "call "+id)
		calls[i].Await(t, "call "+id)
	}
	e.WantPing("after the calls", tok, sid)
}

// TestHTTPStreamCloseStreamsKeepsCalls: the first step of a graceful
// shutdown closes every standalone stream and refuses new sessions, while a
// call in flight runs to its end.
func TestHTTPStreamCloseStreamsKeepsCalls(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	f.tool("slow", func(ctx context.Context, _ principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		started <- struct{}{}
		select {
		case <-release:
			return textResult("finished"), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	call := e.AsyncPost(tok, sid, ht.CallBody(`"s-1"`, "slow", ""))
	<-started

	e.srv.CloseStreams()
	st.WantEnd(t, "CloseStreams")
	if got := e.Do(http.MethodPost, ht.Headers(tok, ""), ht.InitBody("2025-11-25")); got.Status != http.StatusServiceUnavailable {
		t.Fatalf("initialize while draining = %d, want 503", got.Status)
	}
	close(release)
	res := call.Await(t, "the call in flight")
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), "finished") {
		t.Fatalf("call in flight = %d %s, want 200 with its result", res.Status, res.Body)
	}
}

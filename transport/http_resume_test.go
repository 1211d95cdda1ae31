package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// reconnectTool registers a tool that runs first (it may report progress),
// then ends its stream (Output.CloseStream), waits for release (or its
// context) and answers "after reconnect". started tells the test the
// stream was closed.
func reconnectTool(f *fake, name string, first func(out transport.Output)) (started, release chan struct{}) {
	started, release = make(chan struct{}, 1), make(chan struct{})
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		if first != nil {
			first(out)
		}
		out.CloseStream()
		started <- struct{}{}
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult("after reconnect"), nil
	})
	return started, release
}

// wantEvents requires events to have exactly the ids ids, and returns the
// data of the last one.
func wantEvents(t *testing.T, what string, events []ht.SSEEvent, ids ...string) string {
	t.Helper()
	got := make([]string, len(events))
	for i, ev := range events {
		got[i] = ev.ID
	}
	if strings.Join(got, " ") != strings.Join(ids, " ") {
		t.Fatalf("%s: event ids %q, want %q (events %+v)", what, got, ids, events)
	}
	if len(events) == 0 {
		return ""
	}
	return events[len(events)-1].Data
}

func wantResultText(t *testing.T, what, data, id, text string) {
	t.Helper()
	var a ht.Answer
	noErr(t, json.Unmarshal([]byte(data), &a))
	var r ht.ToolResult
	if a.Result != nil {
		noErr(t, json.Unmarshal(a.Result, &r))
	}
	if string(a.ID) != id || len(r.Content) != 1 || r.Content[0].Text != text {
		t.Fatalf("%s = %s, want the result %q of request %s", what, data, text, id)
	}
}

// TestHTTPResumeAfterCloseStream: a handler that ends its stream early
// (the suite's test_reconnection): the POST's answer is an event stream
// that opens with the priming event (retry field, id, empty data) and ends
// without the response; the call goes on, and a GET with the priming
// event's id as Last-Event-ID gets the response — whether the call
// answered before the GET came or after. Once delivered, the session keeps
// nothing of the stream, and the same Last-Event-ID opens a new standalone
// stream instead (nothing left to replay).
func TestHTTPResumeAfterCloseStream(t *testing.T) {
	for _, resultFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("result before the GET: %v", resultFirst), func(t *testing.T) {
			f := newFake(t)
			_, tok := openMinted(t, f, "T", "A")
			started, release := reconnectTool(f, "reconnect", nil)
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.Initialize(tok)
			ns := principal.ProviderNamespace("cred1")

			res := e.Post(tok, sid, ht.CallBody(`7`, "reconnect", ""))
			<-started
			if res.Status != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
				t.Fatalf("POST = %s, %v; want 200 text/event-stream", res, res.Header)
			}
			events := ht.ParseSSE(string(res.Body))
			wantEvents(t, "the POST's stream", events, "1.0")
			if events[0].Data != "" || events[0].Retry != "1000" {
				t.Fatalf("first event %+v, want the priming event: empty data, retry 1000", events[0])
			}

			var st *ht.Stream
			if resultFirst {
				close(release)
				ht.WaitUntil(t, "the response kept", func() bool {
					s, _ := e.srv.State(sid, ns)
					return s.Events == 1
				})
				st = e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
			} else {
				st = e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
				close(release)
			}
			st.WantEnd(t, "the resumed stream, once the response went out")
			wantResultText(t, "the resumed stream's response", wantEvents(t, "the resumed stream", st.Events(), "1.1"), "7", "after reconnect")
			if s, _ := e.srv.State(sid, ns); s != (transport.SessionState{}) {
				t.Fatalf("after the response was delivered the session keeps %+v, want nothing", s)
			}
			again := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
			ht.WaitUntil(t, "a new standalone stream's priming event", func() bool { return len(again.Events()) == 1 })
			if ev := again.Events()[0]; ev.ID != "2.0" || ev.Data != "" {
				t.Fatalf("GET with the delivered stream's Last-Event-ID: first event %+v, want stream 2's priming event", ev)
			}
		})
	}
}

// TestHTTPResumeReplays: a GET with Last-Event-ID gets the events of the
// stream that followed that one, then the rest of the stream as it comes:
// here the last two progress notifications, then the response.
func TestHTTPResumeReplays(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	started, release := reconnectTool(f, "reconnect", func(out transport.Output) {
		for i := range 3 {
			out.Progress(float64(i+1), 3, "")
		}
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	res := e.Post(tok, sid, ht.CallBody(`"r"`, "reconnect", `"tok"`))
	<-started
	wantEvents(t, "the POST's stream", ht.ParseSSE(string(res.Body)), "1.0", "1.1", "1.2", "1.3")

	st := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.1"))
	ht.WaitUntil(t, "the replayed progress", func() bool { return len(st.Events()) == 2 })
	close(release)
	st.WantEnd(t, "the resumed stream")
	events := st.Events()
	wantResultText(t, "the response", wantEvents(t, "the resumed stream", events, "1.2", "1.3", "1.4"), `"r"`, "after reconnect")
}

// TestHTTPResumeDisconnectDoesNotCancel: for a session the client going
// away is no cancellation (2025-11-25: SHOULD NOT): the call goes on after
// the server has seen the connection end, and its client gets the response
// by resuming the stream. Before, the call's context was the request's,
// which net/http cancels when the client goes.
func TestHTTPResumeDisconnectDoesNotCancel(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	running, release := make(chan context.Context, 1), make(chan struct{})
	f.tool("long", func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 2, "half")
		running <- ctx
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult("finished"), nil
	})
	e, gone := newNoticingEnv(t, f)
	sid := e.Initialize(tok)

	post := e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody(`1`, "long", `"p"`))
	st, res := e.OpenSSE(post)
	if st == nil {
		t.Fatalf("POST = %s, want an event stream", res)
	}
	ctx := <-running
	ht.WaitUntil(t, "the progress event", func() bool { return len(st.Events()) == 2 })
	st.Close()
	<-gone // the server saw the client go: net/http cancelled the request's context
	if ctx.Err() != nil {
		t.Fatalf("the call's context is %v once its client disconnected; want it live", context.Cause(ctx))
	}
	close(release)
	resumed := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.1"))
	resumed.WantEnd(t, "the resumed stream")
	wantResultText(t, "the response", wantEvents(t, "the resumed stream", resumed.Events(), "1.2"), "1", "finished")
}

// newNoticingEnv is newMCPEnv behind a handler that tells on gone when a
// request's context ends before the endpoint returned: the server noticed
// its client went.
func newNoticingEnv(t *testing.T, f *fake) (*mcpEnv, <-chan struct{}) {
	t.Helper()
	return newNoticingEnvWith(t, f, transport.Options{})
}

// newNoticingEnvWith is newNoticingEnv with opts.
func newNoticingEnvWith(t *testing.T, f *fake, opts transport.Options) (*mcpEnv, <-chan struct{}) {
	t.Helper()
	inner := newMCPEnv(t, f, opts)
	gone := make(chan struct{}, 16)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		done := make(chan struct{})
		defer close(done)
		go func() {
			select {
			case <-r.Context().Done():
				select {
				case <-done: // the handler returned first: net/http's own cancel after it
				default:
					gone <- struct{}{}
				}
			case <-done:
			}
		}()
		inner.srv.ServeHTTP(w, r)
	})
	return &mcpEnv{Client: ht.New(t, h), f: f, srv: inner.srv}, gone
}

// TestHTTPResumeRefusals (attack): a Last-Event-ID is honoured only on the
// owner's session and only for a stream the session has: another
// namespace naming the owner's session and event, the owner naming a
// stream its session never had or an event its stream has not sent, and
// ids the endpoint never writes, all get the same bytes as an unknown
// session; none of them touches the owner's stream, which then resumes.
func TestHTTPResumeRefusals(t *testing.T) {
	f, tok, other := twoCredentials(t)
	started, release := reconnectTool(f, "reconnect", nil)
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	otherSid := e.Initialize(other)
	e.Post(tok, sid, ht.CallBody(`1`, "reconnect", ""))
	<-started
	close(release)
	ns := principal.ProviderNamespace("cred1")
	ht.WaitUntil(t, "the response kept", func() bool { s, _ := e.srv.State(sid, ns); return s.Events == 1 })

	_, unknown := e.OpenStream(ht.ResumeHeaders(tok, ht.MadeUpSessionID, "1.0"))
	tests := []struct{ name, tok, sid, id string }{
		{"another namespace, the owner's session and event", other, sid, "1.0"},
		{"another namespace's own session, the owner's event id", other, otherSid, "1.0"},
		{"a stream the session never had", tok, sid, "9.0"},
		{"an event the stream has not sent", tok, sid, "1.5"},
		{"no dot", tok, sid, "10"},
		{"empty seq", tok, sid, "1."},
		{"empty stream", tok, sid, ".0"},
		{"stream 0", tok, sid, "0.0"},
		{"leading zero", tok, sid, "01.0"},
		{"three parts", tok, sid, "1.0.0"},
		{"beyond 32 bits", tok, sid, "4294967296.0"},
		{"a sign", tok, sid, "+1.0"},
		{"another server's id", tok, sid, "mcps_0123456789abcdef0123456789abcdef-1"},
	}
	for _, test := range tests {
		st, res := e.OpenStream(ht.ResumeHeaders(test.tok, test.sid, test.id))
		if st != nil {
			st.Close()
			t.Fatalf("%s: GET with Last-Event-ID %q opened a stream, want the unknown session's 404", test.name, test.id)
		}
		ht.SameAsUnknown(t, test.name, res, unknown)
	}
	st := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
	st.WantEnd(t, "the owner's stream")
	wantResultText(t, "the owner's response", wantEvents(t, "the owner's stream", st.Events(), "1.1"), "1", "after reconnect")
}

// TestHTTPResumeBounded: what a session keeps for resumption is bounded by
// ReplayEvents and ReplayBytes, oldest out first and the newest always in;
// what went before it was delivered is counted; a GET replays what is left.
func TestHTTPResumeBounded(t *testing.T) {
	tests := []struct {
		name        string
		opts        transport.Options
		kept        int
		dropped     uint64
		replayedIDs []string
	}{
		// 10 progress events and the response, nothing delivered.
		{"4 events", transport.Options{ReplayEvents: 4}, 4, 7, []string{"1.8", "1.9", "1.10", "1.11"}},
		{"1 byte", transport.Options{ReplayBytes: 1}, 1, 10, []string{"1.11"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFake(t)
			_, tok := openMinted(t, f, "T", "A")
			done := make(chan struct{})
			f.tool("chatty", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
				out.CloseStream()
				for i := range 10 {
					out.Progress(float64(i), 10, "")
				}
				close(done)
				return textResult("said it all"), nil
			})
			e := newMCPEnv(t, f, test.opts)
			sid := e.Initialize(tok)
			e.Post(tok, sid, ht.CallBody(`1`, "chatty", `"p"`))
			<-done
			ns := principal.ProviderNamespace("cred1")
			ht.WaitUntil(t, "the response kept", func() bool {
				s, _ := e.srv.State(sid, ns)
				return s.Events+int(s.Dropped) == 11
			})
			if s, _ := e.srv.State(sid, ns); s.Events != test.kept || s.Dropped != test.dropped {
				t.Fatalf("kept %+v, want %d events, %d dropped", s, test.kept, test.dropped)
			}
			st := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
			st.WantEnd(t, "the resumed stream")
			wantEvents(t, "the resumed stream", st.Events(), test.replayedIDs...)
		})
	}
}

// TestHTTPResumeStreamHoldsNothingOnceDelivered: a streamed call whose
// response went out on its own connection leaves nothing in the session,
// nor does a standalone stream that closed with nothing undelivered.
func TestHTTPResumeStreamHoldsNothingOnceDelivered(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	f.tool("count", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 2, "")
		return textResult("two"), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	ns := principal.ProviderNamespace("cred1")
	res := e.Post(tok, sid, ht.CallBody(`1`, "count", `"p"`))
	wantEvents(t, "the call's stream", ht.ParseSSE(string(res.Body)), "1.0", "1.1", "1.2")
	st := e.Stream(tok, sid)
	st.Close()
	ht.WaitUntil(t, "the standalone stream gone", func() bool {
		s, ok := e.srv.State(sid, ns)
		return ok && s == (transport.SessionState{})
	})
}

// TestHTTPResumeCloseStreamHTTP2: over HTTP/2 a connection cannot be
// taken from net/http, so CloseStream stops writing the stream and the
// stream ends when the request's handler returns — without the response,
// which the client gets by resuming, as over HTTP/1.
func TestHTTPResumeCloseStreamHTTP2(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	started, release := reconnectTool(f, "reconnect", nil)
	inner := newMCPEnv(t, f, transport.Options{})
	ts := httptest.NewUnstartedServer(inner.srv)
	ts.EnableHTTP2 = true
	ts.StartTLS()
	t.Cleanup(ts.Close)
	e := &ht.Client{T: t, TS: ts, URL: ts.URL + "/mcp"}
	sid := e.Initialize(tok)
	if resp := e.Send(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.PingBody)); resp.ProtoMajor != 2 {
		t.Fatalf("the test's connection is %s, want HTTP/2", resp.Proto)
	}

	call := e.AsyncPost(tok, sid, ht.CallBody(`1`, "reconnect", ""))
	<-started
	close(release)
	res := call.Await(t, "the POST")
	if res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("POST = %s, want an event stream", res)
	}
	wantEvents(t, "the POST's stream, ended by its handler", ht.ParseSSE(string(res.Body)), "1.0")
	st := e.StreamWith(ht.ResumeHeaders(tok, sid, "1.0"))
	st.WantEnd(t, "the resumed stream")
	wantResultText(t, "the response", wantEvents(t, "the resumed stream", st.Events(), "1.1"), "1", "after reconnect")
}

// TestHTTPResumeNotBefore20251125: a session negotiated before 2025-11-25
// gets no priming event, and CloseStream does nothing there: the call that
// asks for it is answered as it would be without.
func TestHTTPResumeNotBefore20251125(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	started, release := reconnectTool(f, "reconnect", func(out transport.Output) { out.Progress(1, 2, "") })
	close(release)
	e := newMCPEnv(t, f, transport.Options{})
	res := e.Post(tok, "", ht.InitBody("2025-06-18"))
	sid := res.Header.Get("Mcp-Session-Id")
	h := ht.Headers(tok, sid)
	h.Set("MCP-Protocol-Version", "2025-06-18")
	res = e.Do(http.MethodPost, h, ht.CallBody(`1`, "reconnect", `"p"`))
	<-started
	events := ht.ParseSSE(string(res.Body))
	wantResultText(t, "the response", wantEvents(t, "the stream", events, "1.1", "1.2"), "1", "after reconnect")
	if events[0].Retry != "" || res.Header.Get("Connection") == "close" {
		t.Fatalf("a 2025-06-18 stream: retry %q, Connection %q; want neither", events[0].Retry, res.Header.Get("Connection"))
	}
}

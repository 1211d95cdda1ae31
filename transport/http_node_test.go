package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// countObserver counts the endpoint's refusals, authentication failures
// and forwards by label.
type countObserver struct {
	mu      sync.Mutex // guards the maps
	refused map[string]int
	auth    map[string]int
	forward map[string]int
	methods map[string]int // Request, by method: the requests whose handler returned
}

func newCountObserver() *countObserver {
	return &countObserver{refused: map[string]int{}, auth: map[string]int{}, forward: map[string]int{}, methods: map[string]int{}}
}

func (o *countObserver) Request(_, method string, _ int, _ time.Duration) { o.add(o.methods, method) }
func (o *countObserver) SessionOpened()                                   {}
func (o *countObserver) SessionClosed(string)                             {}
func (o *countObserver) AuthFailure(reason string)                        { o.add(o.auth, reason) }
func (o *countObserver) Refused(bound string)                             { o.add(o.refused, bound) }
func (o *countObserver) Forward(outcome string)                           { o.add(o.forward, outcome) }

func (o *countObserver) add(m map[string]int, k string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	m[k]++
}

// count returns m[k] under the lock.
func (o *countObserver) count(m map[string]int, k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return m[k]
}

// total returns the sum of m's counts.
func (o *countObserver) total(m map[string]int) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

// wantUnavailable requires the answer of a node that does not serve: 503,
// Retry-After, the table's JSON-RPC error without an id.
func wantUnavailable(t *testing.T, what string, res *ht.Result) {
	t.Helper()
	ht.WantStatus(t, what, res, http.StatusServiceUnavailable)
	if got := res.Header.Get("Retry-After"); got != "1" {
		t.Fatalf("%s: Retry-After = %q, want 1", what, got)
	}
	ht.WantErrorWithoutID(t, what, res)
	if a := res.RPC(t); a.Error.Message != "node unavailable" {
		t.Fatalf("%s = %s, want the message \"node unavailable\"", what, res)
	}
}

// TestHTTPUnavailable: while Host.Available says no, every request of
// both eras — whatever its method, good token, bad token or none — is 503
// + Retry-After, after the Origin/Host check and before authentication (no
// 401, no authentication failure counted), each counted as refused by the
// "unavailable" bound; nothing reaches a session, which still answers once
// the node serves again.
func TestHTTPUnavailable(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	var serving atomic.Bool
	serving.Store(true)
	obs := newCountObserver()
	e := newMCPEnvHost(t, f, transport.Options{Observer: obs}, transport.Host{Available: serving.Load})
	sid := e.Initialize(tok)
	serving.Store(false)

	modernGet := ht.GetHeaders(tok, "")
	modernGet.Set("MCP-Protocol-Version", modern)
	requests := []struct {
		name   string
		method string
		h      http.Header
		body   string
	}{
		{"initialize", http.MethodPost, ht.Headers(tok, ""), ht.InitBody(ht.LatestVersion)},
		{"ping on the session", http.MethodPost, ht.Headers(tok, sid), ht.PingBody},
		{"tools/call on the session", http.MethodPost, ht.Headers(tok, sid), whoamiCall},
		{"GET stream", http.MethodGet, ht.GetHeaders(tok, sid), ""},
		{"DELETE", http.MethodDelete, ht.Headers(tok, sid), ""},
		{"unknown session", http.MethodPost, ht.Headers(tok, ht.MadeUpSessionID), ht.PingBody},
		{"bad token", http.MethodPost, ht.Headers("mcprt_bogus", sid), ht.PingBody},
		{"no token", http.MethodPost, ht.Headers("", ""), ht.InitBody(ht.LatestVersion)},
		{"2026-07-28 tools/call", http.MethodPost, modernHeaders(tok, "tools/call", "whoami"), modernBody("7", "tools/call", `"name":"whoami","arguments":{}`)},
		{"2026-07-28 listen", http.MethodPost, modernHeaders(tok, "subscriptions/listen", ""), listenBody("8", `{}`)},
		{"2026-07-28 GET", http.MethodGet, modernGet, ""},
	}
	for _, req := range requests {
		wantUnavailable(t, req.name, e.Do(req.method, req.h, req.body))
	}
	if n := obs.count(obs.refused, "unavailable"); n != len(requests) {
		t.Fatalf("Refused(unavailable) counted %d times, want %d", n, len(requests))
	}
	if n := obs.total(obs.auth); n != 0 {
		t.Fatalf("%d authentication failures counted while unavailable, want 0: nothing was authenticated", n)
	}
	// Step 1 still comes first.
	h := ht.Headers(tok, sid)
	h.Set("Origin", "https://evil.example")
	ht.WantStatus(t, "a foreign Origin while unavailable", e.Do(http.MethodPost, h, ht.PingBody), http.StatusForbidden)

	serving.Store(true)
	e.WantPing("the session once the node serves again", tok, sid)
	if !hasRecord(f, sid) {
		t.Fatal("the session's record went while the node did not serve")
	}
}

// TestHTTPUnavailableAtDispatch: SPEC §5 step 0 — a POST admitted on its
// headers while the node served, whose node stopped serving while its body
// was arriving, is answered 503 once the body is in, whatever it carries,
// and nothing is dispatched: no tool runs, no session starts.
func TestHTTPUnavailableAtDispatch(t *testing.T) {
	bodies := append(ht.DispatchBodies(whoamiCall), ht.DispatchBody{Name: "2026-07-28 tools/call", Body: modernBody("7", "tools/call", `"name":"whoami","arguments":{}`)})
	for _, msg := range bodies {
		t.Run(msg.Name, func(t *testing.T) {
			f := newFake(t)
			_, tok := openMinted(t, f, "T", "A")
			var calls atomic.Int32
			f.tool("whoami", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
				calls.Add(1)
				return textResult("ran"), nil
			})
			var serving atomic.Bool
			serving.Store(true)
			e := newMCPEnvHost(t, f, transport.Options{}, transport.Host{Available: serving.Load})
			sid, h := "", ht.Headers(tok, "")
			if msg.OnSession {
				sid = e.Initialize(tok)
				h = ht.Headers(tok, sid)
			}
			if strings.HasPrefix(msg.Name, "2026") {
				h = modernHeaders(tok, "tools/call", "whoami")
			}
			before := mcpRecords(t, f)
			held := e.HoldPost(h, msg.Body, 1)
			e.waitInFlight("admitted on its headers", transport.InFlight{Requests: 1, BodyBytes: int64(len(msg.Body))})

			serving.Store(false)
			wantUnavailable(t, "the held "+msg.Name+" once its body is in", held.Finish())
			if n := calls.Load(); n != 0 {
				t.Fatalf("the tool ran %d times, want 0", n)
			}
			if got := mcpRecords(t, f); len(got) != len(before) {
				t.Fatalf("sessions %v after, %v before; want the same", got, before)
			}
		})
	}
}

// TestHTTPCloseStreamsUnavailable: the node stops serving and
// CloseStreamsUnavailable ends every stream — the standalone GET stream, a
// call's SSE answer (the call cancelled), a listen stream (no result) —
// and cancels a 2026-07-28 call in flight, answered 503 + Retry-After
// with its id; the MCP session stays, and answers 200 once the node
// serves again.
func TestHTTPCloseStreamsUnavailable(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	streaming := f.blocking("streaming", true)
	modernCall := f.blocking("block", false)
	var serving atomic.Bool
	serving.Store(true)
	e := newMCPEnvHost(t, f, transport.Options{}, transport.Host{Available: serving.Load})
	sid := e.Initialize(tok)

	get := e.Stream(tok, sid)
	post, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody(`"s-1"`, "streaming", `"p"`)))
	if post == nil {
		t.Fatalf("streaming call = %s, want 200 text/event-stream", res)
	}
	streaming.WaitStarted(t, "the streaming call")
	listen := openListen(t, e, tok, `"L1"`, `{"toolsListChanged":true}`)
	waitEvents(t, "listen ack", listen, 1)
	call := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody(`"c-1"`, "tools/call", `"name":"block","arguments":{}`)))
	modernCall.WaitStarted(t, "the 2026-07-28 call")

	serving.Store(false)
	e.srv.CloseStreamsUnavailable()
	get.WantEnd(t, "the GET stream")
	streaming.WantCancelled(t, "the streaming call")
	post.WantEnd(t, "the streaming call's answer")
	listen.WantEnd(t, "the listen stream")
	modernCall.WantCancelled(t, "the 2026-07-28 call")
	wantUnavailableCall(t, "the 2026-07-28 call", call.Await(t, "the 2026-07-28 call"), `"c-1"`)
	wantStreamNoResponse(t, "the cancelled call's stream", post)
	for _, ev := range listen.Events()[1:] {
		t.Fatalf("the listen stream carried %s after its ack, want nothing: it ends without a result", ev.Data)
	}
	ht.WaitUntil(t, "nothing in flight", func() bool {
		return e.srv.ListenStreams() == 0 && e.srv.ModernCallsInFlight() == 0
	})
	if n := e.srv.Sessions(); n != 1 || !hasRecord(f, sid) {
		t.Fatalf("sessions = %d, record %v; want the session kept", n, hasRecord(f, sid))
	}

	serving.Store(true)
	e.WantPing("the session once the node serves again", tok, sid)
	res = e.Post(tok, sid, whoamiCall)
	ht.WantStatus(t, "tools/call on the session once the node serves again", res, http.StatusOK)
	ht.WaitUntil(t, "a GET stream again", func() bool {
		st, res := e.OpenStream(ht.GetHeaders(tok, sid))
		if st != nil {
			return true
		}
		ht.WantStatus(t, "GET", res, http.StatusConflict) // the old one not yet released
		return false
	})
}

// stopAfter is an Host.Available that answers true until armed, then
// true n more times, then false: the node stops serving at a chosen check.
// A request asks it once at admission (front), once at dispatch (recheck),
// then once where a stream or a 2026-07-28 call registers to be ended by
// CloseStreamsUnavailable.
type stopAfter struct {
	armed atomic.Bool
	left  atomic.Int32
}

func (s *stopAfter) available() bool { return !s.armed.Load() || s.left.Add(-1) >= 0 }

func (s *stopAfter) arm(n int32) {
	s.left.Store(n)
	s.armed.Store(true)
}

// gatedEnv is an endpoint whose Available is a stopAfter, and a provider
// token.
func gatedEnv(t *testing.T) (*mcpEnv, string, *stopAfter) {
	t.Helper()
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	gate := &stopAfter{}
	return newMCPEnvHost(t, f, transport.Options{}, transport.Host{Available: gate.available}), tok, gate
}

// wantStreamNoResponse requires that a call's stream, ended, carried its
// one progress notification and no JSON-RPC response: the call was
// cancelled (wantNoResponse, on the stream's bytes).
func wantStreamNoResponse(t *testing.T, what string, st *ht.Stream) {
	t.Helper()
	body := []byte(strings.Join(st.Snapshot(), "\n"))
	wantNoResponse(t, what, &ht.Result{Status: st.Resp.StatusCode, Header: st.Resp.Header, Body: body}, 1)
}

// wantUnavailableCall requires the answer of a 2026-07-28 call the node's
// unavailability cancelled: 503 + Retry-After, its id, "node unavailable".
func wantUnavailableCall(t *testing.T, what string, res *ht.Result, id string) {
	t.Helper()
	wantRetryLaterWithID(t, what, res, http.StatusServiceUnavailable, "1")
	if a := res.RPC(t); string(a.ID) != id || a.Error.Message != "node unavailable" {
		t.Fatalf("%s = %s, want id %s and \"node unavailable\"", what, res, id)
	}
}

// TestHTTPUnavailableAfterRegistration: a node that stops serving after a
// stream or call passed its checks but before it registered where
// CloseStreamsUnavailable finds it — so CloseStreamsUnavailable may have
// run without seeing it — ends it by itself: a GET stream is not opened
// (503), a 2025 call that starts streaming is cancelled and its stream
// ends with no response, a 2026-07-28 call is answered 503 with its id.
func TestHTTPUnavailableAfterRegistration(t *testing.T) {
	t.Run("GET stream", func(t *testing.T) {
		e, tok, gate := gatedEnv(t)
		sid := e.Initialize(tok)
		gate.arm(1) // admission
		st, res := e.OpenStream(ht.GetHeaders(tok, sid))
		if st != nil {
			t.Fatal("GET opened a stream on a node that stopped serving")
		}
		wantUnavailable(t, "GET", res)
	})
	t.Run("2025 streaming call", func(t *testing.T) {
		e, tok, gate := gatedEnv(t)
		b := e.f.blocking("streaming", true)
		sid := e.Initialize(tok)
		gate.arm(2) // admission, dispatch
		post, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody(`"s-1"`, "streaming", `"p"`)))
		if post == nil {
			t.Fatalf("streaming call = %s, want 200 text/event-stream", res)
		}
		b.WaitStarted(t, "the streaming call")
		b.WantCancelled(t, "the streaming call")
		post.WantEnd(t, "the streaming call's answer")
		wantStreamNoResponse(t, "the cancelled call's stream", post)
	})
	t.Run("2026-07-28 call", func(t *testing.T) {
		e, tok, gate := gatedEnv(t)
		b := e.f.blocking("block", false)
		gate.arm(2) // admission, dispatch
		call := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody(`"c-1"`, "tools/call", `"name":"block","arguments":{}`)))
		b.WaitStarted(t, "the call")
		b.WantCancelled(t, "the call")
		wantUnavailableCall(t, "the 2026-07-28 call", call.Await(t, "the call"), `"c-1"`)
	})
}

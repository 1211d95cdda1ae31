package transport_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPModernCallEndsAtExpiry: SPEC §5a.5 — a 2026-07-28 call in flight
// ends when its credential expires, as when it is revoked: the tool's
// context is cancelled and the JSON answer is the 401 a request arriving
// now would get. Not a nanosecond before: the expiry is on the endpoint's
// clock.
func TestHTTPModernCallEndsAtExpiry(t *testing.T) {
	const window = 20 * time.Millisecond
	f := newFake(t)
	tok, _ := f.provider("T", "A", window)
	b := f.blocking("block", false)
	e := newMCPEnv(t, f, transport.Options{})

	call := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("7", "tools/call", `"name":"block","arguments":{}`)))
	b.WaitStarted(t, "call")
	f.clock.Advance(window - time.Nanosecond)
	// A call of its own, answered while the first is in flight, proves the
	// credential still authenticates; the first is still running after it.
	ht.WantStatus(t, "a nanosecond before the expiry", e.Do(http.MethodPost, modernHeaders(tok, "server/discover", ""), modernBody("8", "server/discover", "")), http.StatusOK)
	if n := e.srv.ModernCallsInFlight(); n != 1 {
		t.Fatalf("calls in flight a nanosecond before the expiry = %d, want 1", n)
	}
	f.clock.Advance(time.Nanosecond)
	b.WantCancelled(t, "a modern call whose credential expired")
	ht.Want401(t, "the expired call", call.Await(t, "call"), ht.InvalidToken)
	ht.WaitUntil(t, "no call in flight", func() bool { return e.srv.ModernCallsInFlight() == 0 })
}

// TestHTTPModernCallEndsOnClose: closing the endpoint cancels the
// 2026-07-28 calls in flight (no session ends them) and answers each 503
// with its id; a request after Close is cancelled before its tool runs.
func TestHTTPModernCallEndsOnClose(t *testing.T) {
	f := newFake(t)
	tok, _ := f.provider("T", "A", 0)
	b := f.blocking("block", false)
	e := newMCPEnv(t, f, transport.Options{})

	call := e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody(`"c-1"`, "tools/call", `"name":"block","arguments":{}`)))
	b.WaitStarted(t, "call")
	e.srv.Close()
	b.WantCancelled(t, "a modern call when the endpoint closed")
	res := call.Await(t, "call")
	ht.WantStatus(t, "the call the endpoint closed under", res, http.StatusServiceUnavailable)
	if body := string(res.Body); !strings.Contains(body, `"id":"c-1"`) || !strings.Contains(body, "shutting down") {
		t.Fatalf("closed call = %s, want its id and the reason", body)
	}
	if n := e.srv.ModernCallsInFlight(); n != 0 {
		t.Fatalf("calls in flight after Close = %d, want 0", n)
	}
}

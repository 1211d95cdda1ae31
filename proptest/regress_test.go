package proptest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
)

// Plain regression tests for the minimal cases the machines found. Each is
// named for what broke.

func newRegressRuntime(t *testing.T) (*mcpruntime.Runtime, *actortest.Clock, *providertest.Inproc) {
	t.Helper()
	clock := actortest.NewClock(testStart)
	in := &providertest.Inproc{}
	rt, err := mcpruntime.New(mcpruntime.Config{
		Drivers:          map[string]driver.Factory{driver.InprocKind: in.Factory()},
		CredentialWindow: testWindow,
		ClientTokenTTL:   testClientTTL,
		Now:              clock.Now,
		Logger:           slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return rt, clock, in
}

// TestFailedOpenKeepsPairCredential: a live credential of (T, I) that no
// provider session holds (here: just rotated) must survive an open of
// (T, I) whose driver fails — SPEC §3 "open fails: revoke the credential
// only if this open minted it" — and the failed open must not choose T's
// current instance ("set ... by the first provider session opened on it").
// Revoking the old credential ("replaced") or choosing the current
// instance before the driver is asked would leave the pair with no live
// credential after a failed open; and a failed open is answered when its
// driver fails, not at the open timeout.
func TestFailedOpenKeepsPairCredential(t *testing.T) {
	ctx := context.Background()
	rt, _, in := newRegressRuntime(t)
	if err := rt.RegisterInstance(ctx, "a", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	rotated, err := rt.Rotate(ctx, "T", "a")
	if err != nil {
		t.Fatalf("Rotate(T, a) = %v", err)
	}
	tok := rotated.Authorization[len("Bearer "):]

	in.FailNextOpen("a", errInjected)
	if _, err := rt.OpenProviderSession(ctx, "T", "a"); !actortest.OpenFailed(err, errInjected) {
		t.Fatalf("OpenProviderSession(T, a) with a failing driver = %v, want %v", err, errInjected)
	}
	if _, err := rt.Authenticate(tok); err != nil {
		t.Fatalf("after the failed open, the rotated credential %s: Authenticate = %v, want live", rotated.ID, err)
	}
	th, err := rt.Thread(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if th.Instance != "" {
		t.Fatalf("after the failed open, Thread(T).Instance = %q, want \"\" (no session was opened)", th.Instance)
	}

	// A successful open replaces the unheld credential and chooses a.
	ps, err := rt.OpenProviderSession(ctx, "T", "a")
	if err != nil {
		t.Fatalf("OpenProviderSession(T, a) = %v", err)
	}
	if ps.Reused || ps.CredentialID == rotated.ID {
		t.Fatalf("OpenProviderSession(T, a) = %+v, want a new credential", ps)
	}
	var ae *mcpruntime.AuthError
	if _, err := rt.Authenticate(tok); !errors.As(err, &ae) || ae.Reason != mcpruntime.AuthRevoked {
		t.Fatalf("after the successful open, the rotated credential: Authenticate = %v, want revoked", err)
	}
	if th, err := rt.Thread(ctx, "T"); err != nil || th.Instance != "a" {
		t.Fatalf("after the successful open, Thread(T) = %+v, %v; want instance a", th, err)
	}
}

// TestReopenAfterExpiryRebindsAttachedSession: once (T, I)'s credential has
// expired, re-opening the pair re-binds the provider session still attached
// to T to a new credential (same session id, new token handed to the
// driver) instead of starting a second session for the pair next to it.
// The runtime as first committed opened a second session and left the
// first one attached to T, holding a credential that could never
// authenticate again.
func TestReopenAfterExpiryRebindsAttachedSession(t *testing.T) {
	ctx := context.Background()
	rt, clock, in := newRegressRuntime(t)
	if err := rt.RegisterInstance(ctx, "a", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	first, err := rt.OpenProviderSession(ctx, "T", "a")
	if err != nil {
		t.Fatalf("OpenProviderSession(T, a) = %v", err)
	}
	clock.Advance(testWindow + time.Minute)
	var ae *mcpruntime.AuthError
	if _, err := rt.Authenticate(first.Authorization[len("Bearer "):]); !errors.As(err, &ae) || ae.Reason != mcpruntime.AuthExpired {
		t.Fatalf("after the window, the first credential: Authenticate = %v, want expired", err)
	}

	again, err := rt.OpenProviderSession(ctx, "T", "a")
	if err != nil {
		t.Fatalf("re-open of (T, a) = %v", err)
	}
	if again.ID != first.ID || again.Reused || again.Authorization == "" || again.CredentialID == first.CredentialID {
		t.Fatalf("re-open of (T, a) = %+v, want session %s re-bound to a new credential", again, first.ID)
	}
	if _, err := rt.Authenticate(again.Authorization[len("Bearer "):]); err != nil {
		t.Fatalf("the re-bound credential: Authenticate = %v, want live", err)
	}
	sessions := in.Sessions("a")
	if len(sessions) != 1 {
		t.Fatalf("driver sessions of a: %d, want 1", len(sessions))
	}
	if got := sessions[0].Authorizations(); len(got) != 2 || got[1] != again.Authorization {
		t.Fatalf("driver session %s got Authorizations %q, want the first and then %q", sessions[0].ID, got, again.Authorization)
	}
}

// TestConcurrentRevokeClientIsUnknownNotDeadLetter: of two RevokeClient
// calls racing on one grant, one revokes it and the other must answer
// ErrUnknownClient, as it would in either sequential order — never the
// actor system's raw "request *client.Revoke to client/<id>: future: dead
// letter", nor "future: timeout" after the whole ActorTimeout (5 s). The
// concurrent machine found this race: a revoke that looks the grant's
// actor up, then asks it, while the winner stops that actor in between.
// RevokeClient (clients.go) claims the grant before it asks, and its ask
// (actors.go's call helper) answers a stopped grant actor as
// ErrUnknownClient.
func TestConcurrentRevokeClientIsUnknownNotDeadLetter(t *testing.T) {
	ctx := context.Background()
	rt, _, _ := newRegressRuntime(t)
	for i := range 200 {
		ct, err := rt.IssueClient(ctx, fmt.Sprintf("client %d", i), readWrite)
		if err != nil {
			t.Fatalf("IssueClient: %v", err)
		}
		var errs [2]error
		var wg sync.WaitGroup
		start := make(chan struct{})
		for j := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[j] = rt.RevokeClient(ctx, ct.ClientID)
			}()
		}
		close(start)
		wg.Wait()
		ok, unknown := 0, 0
		for _, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, mcpruntime.ErrUnknownClient):
				unknown++
			}
		}
		if ok != 1 || unknown != 1 {
			t.Fatalf("round %d: two racing RevokeClient(%s) = %v, %v; want one success and one ErrUnknownClient", i, ct.ClientID, errs[0], errs[1])
		}
	}
}

// TestCallRacingDeleteIsNotFoundNotBusy: a tools/call racing a DELETE of
// its session must be answered as if it came before the DELETE (200) or
// after it (404: "the id answers 404 forever after", SPEC §5), never 503
// "session busy". The concurrent machine found this race: the call passes
// the owner check, the DELETE ends the session, and the call's begin finds
// it gone; GET and DELETE meet the same race. The call is handlePost's
// (transport/handlers.go) and transport/call.go's, its session's calls
// table in actors/session/calls.go.
func TestCallRacingDeleteIsNotFoundNotBusy(t *testing.T) {
	ctx := context.Background()
	rt, _, _ := newRegressRuntime(t)
	srv, err := rt.MCPHandler(mcpruntime.MCPOptions{MaxSessionsPerNamespace: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	h := &httpMachine{url: hs.URL + "/mcp", client: &http.Client{Transport: tr}}
	ct, err := rt.IssueClient(ctx, "racer", readWrite)
	if err != nil {
		t.Fatal(err)
	}
	who := caller{token: ct.Token}
	for i := range 300 {
		r := h.do(http.MethodPost, who, "", initializeBody(1))
		sid := r.header.Get("Mcp-Session-Id")
		if r.err != nil || r.status != http.StatusOK || sid == "" {
			t.Fatalf("initialize = %d %s %v", r.status, r.body, r.err)
		}
		var call, del result
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() {
			defer wg.Done()
			<-start
			call = h.do(http.MethodPost, who, sid, callBody(2, "thread_read", map[string]string{"threadId": "none"}))
		}()
		go func() { defer wg.Done(); <-start; del = h.do(http.MethodDelete, who, sid, nil) }()
		close(start)
		wg.Wait()
		if call.err != nil || del.err != nil {
			t.Fatalf("round %d: %v, %v", i, call.err, del.err)
		}
		if del.status != http.StatusNoContent {
			t.Fatalf("round %d: DELETE = %d %s, want 204", i, del.status, del.body)
		}
		if call.status != http.StatusOK && call.status != http.StatusNotFound {
			t.Fatalf("round %d: tools/call racing DELETE = %d %s, want 200 (before) or 404 (after)", i, call.status, call.body)
		}
	}
}

// TestOpenRacingRotateReusesTheRebindingSession: (T, I) has an open
// provider session attached to T. A Rotate(T, I) and an
// OpenProviderSession(T, I) at the same time must behave as one of the two
// sequential orders, and in both the open reuses that session (rotate
// first: the session was re-bound to the rotated credential, which the
// open re-attaches). The open never mints a third credential and starts
// a second driver session for the pair, revoking the credential the
// rotate just handed to the first session (a race the concurrent machine
// found): between the rotate's commit of the new credential and
// the holding session's re-bind, that credential is live and no session
// holds it yet. The open and the rotation are in actors/thread/open.go,
// as flights of kind open and rotate; the instance actor decides reuse
// and attach.
func TestOpenRacingRotateReusesTheRebindingSession(t *testing.T) {
	ctx := context.Background()
	rt, _, _ := newRegressRuntime(t)
	if err := rt.RegisterInstance(ctx, "a", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		t.Fatal(err)
	}
	for i := range 300 {
		th := fmt.Sprintf("T%d", i)
		if _, err := rt.CreateThread(ctx, th, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
		first, err := rt.OpenProviderSession(ctx, th, "a")
		if err != nil {
			t.Fatal(err)
		}
		var rotErr, openErr error
		var again mcpruntime.ProviderSession
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; _, rotErr = rt.Rotate(ctx, th, "a") }()
		go func() { defer wg.Done(); <-start; again, openErr = rt.OpenProviderSession(ctx, th, "a") }()
		close(start)
		wg.Wait()
		if rotErr != nil && !errors.Is(rotErr, mcpruntime.ErrBusy) {
			t.Fatalf("round %d: Rotate = %v", i, rotErr)
		}
		if openErr != nil {
			t.Fatalf("round %d: OpenProviderSession = %v", i, openErr)
		}
		if !again.Reused || again.ID != first.ID {
			t.Fatalf("round %d: OpenProviderSession racing Rotate = %+v, want a reuse of session %s (Rotate: %v)", i, again, first.ID, rotErr)
		}
	}
}

// TestListenDeadAfterDispatchIs401: a subscriptions/listen whose
// credential dies after the dispatch check (SPEC §5 order 7) but before
// its stream starts must be answered as a request arriving then is, 401,
// never an empty 200. The concurrent machine found a listen racing
// RevokeClient answered "200" with no body and no Content-Type (its batch:
// "RevokeClient(cl_…) → ok; subscriptions/listen … → 200 [] (ended
// true)"): in transport/modern_listen.go the listen registers its watches,
// reads the credential again (`if s.deadSince(p) != "" { return }`) and
// returns without writing, so net/http answers 200 with nothing — an
// answer Streamable HTTP does not allow (a request's answer is
// application/json or text/event-stream) and unlike a JSON call that loses
// its credential before it answered (SPEC §5a.5: 401). A revocation cannot
// be put in that window from outside; an expiry can, on a clock that moves
// one microsecond each time the runtime reads it: the token is made to
// expire k readings after the request arrives, for every k in turn, so
// that in some round the dispatch check sees it live and the listen's
// second look sees it dead. The promise checked in every round: 401, or a
// stream that starts with its acknowledgement.
func TestListenDeadAfterDispatchIs401(t *testing.T) {
	ctx := context.Background()
	clock := &steppingClock{now: testStart}
	rt, err := mcpruntime.New(mcpruntime.Config{ClientTokenTTL: time.Hour, Now: clock.Now, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(ep)
	defer hs.Close()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	h := &httpMachine{url: hs.URL + "/mcp", client: &http.Client{Transport: tr}}
	ack := ackFrame("1", listenFilter{tools: true})
	for k := range 40 {
		ct, err := rt.IssueClient(ctx, "listener", readOnly)
		if err != nil {
			t.Fatal(err)
		}
		p, err := rt.Authenticate(ct.Token)
		if err != nil {
			t.Fatal(err)
		}
		clock.set(p.Expires.Add(-time.Duration(k) * time.Microsecond))
		s, err := h.openListen(caller{token: ct.Token}, "", "1", listenFilter{tools: true})
		if err != nil {
			t.Fatal(err)
		}
		switch s.status {
		case http.StatusUnauthorized:
		case http.StatusOK:
			if !s.waitEnd(time.Now().Add(waitTimeout)) { // a hang detector: the expiry ends it
				t.Fatalf("round %d: the stream of an expired token is still open after %v", k, waitTimeout)
			}
			if fr := s.snapshot(); s.header.Get("Content-Type") != "text/event-stream" || len(fr) == 0 || fr[0] != ack {
				t.Fatalf("round %d: a listen whose token expired under it = 200 (Content-Type %q) %q, want 401 or a stream that starts with its acknowledgement", k, s.header.Get("Content-Type"), fr)
			}
		default:
			t.Fatalf("round %d: a listen whose token expired under it = %d %s, want 401 or 200", k, s.status, s.body)
		}
	}
}

// steppingClock moves one microsecond each time it is read.
type steppingClock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Microsecond)
	return c.now
}

func (c *steppingClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

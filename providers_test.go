package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestOpenMintsThenReuses: the first open of (T, I) mints a credential and
// hands it to the driver; a second open returns the same session and
// credential, minting nothing and showing no token.
func TestOpenMintsThenReuses(t *testing.T) {
	ctx := context.Background()
	const endpoint = "http://127.0.0.1:9999/mcp"
	caps := []string{"thread.read", "thread.post"}
	rt := quietRuntime(t, mcpruntime.Config{Endpoint: endpoint})
	noErr(t, rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Capabilities: caps}))
	createThreads(t, rt, "T")

	first, tok := openMinted(t, rt, "T", "A")
	if first.Endpoint != endpoint || !slices.Equal(first.Capabilities, caps) {
		t.Fatalf("first open = %+v, want endpoint %q and capabilities %q", first, endpoint, caps)
	}
	drv := inprocOf(rt).Session(first.ID)
	if drv == nil {
		t.Fatalf("driver never saw session %s", first.ID)
	}
	wantBinding := []driver.Binding{{
		Thread: "T", Instance: "A", CredentialID: first.CredentialID, Endpoint: endpoint,
		Authorization: first.Authorization, Capabilities: caps,
	}}
	if diff := cmp.Diff(wantBinding, drv.Bindings()); diff != "" {
		t.Fatalf("driver bindings (-want +got):\n%s", diff)
	}
	p := assertLive(t, rt, "minted token", tok)
	want := mcpruntime.Principal{
		Kind: memdb.KindProvider, Namespace: "cred:" + first.CredentialID, CredentialID: first.CredentialID,
		Thread: "T", Instance: "A", Capabilities: caps, Expires: p.Expires,
	}
	if diff := cmp.Diff(want, p); diff != "" {
		t.Fatalf("principal (-want +got):\n%s", diff)
	}

	again, err := rt.OpenProviderSession(ctx, "T", "A")
	noErr(t, err)
	if again.ID != first.ID || again.CredentialID != first.CredentialID || !again.Reused || again.Authorization != "" {
		t.Fatalf("second open = %+v, want session %s / credential %s reused without a token", again, first.ID, first.CredentialID)
	}
	if n := len(inprocOf(rt).Sessions("A")); n != 1 {
		t.Fatalf("driver opened %d sessions, want 1", n)
	}
	if got := drv.Authorizations(); len(got) != 1 {
		t.Fatalf("driver got %d Authorization values after reuse, want 1", len(got))
	}
	assertLive(t, rt, "token after reuse", tok)
	if got := liveCredentials(t, rt, time.Now(), "T", "A"); !slices.Equal(got, []string{first.CredentialID}) {
		t.Fatalf("live credentials of (T, A) = %q, want [%s]", got, first.CredentialID)
	}
}

// TestConcurrentOpensMintOnce: opens of one pair that overlap share one
// session and one credential, and the token is shown exactly once.
func TestConcurrentOpensMintOnce(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")

	const n = 8
	res := make([]mcpruntime.ProviderSession, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { res[i], errs[i] = rt.OpenProviderSession(ctx, "T", "A") })
	}
	wg.Wait()
	shown := 0
	for i := range n {
		noErr(t, errs[i])
		if res[i].ID != res[0].ID || res[i].CredentialID != res[0].CredentialID {
			t.Fatalf("open %d = %+v, open 0 = %+v: want the same session and credential", i, res[i], res[0])
		}
		if res[i].Authorization != "" {
			shown++
			assertLive(t, rt, "shown token", bearer(t, res[i].Authorization))
		}
	}
	if shown != 1 {
		t.Fatalf("token shown %d times, want once", shown)
	}
	if got := len(inprocOf(rt).Sessions("A")); got != 1 {
		t.Fatalf("driver opened %d sessions, want 1", got)
	}
}

// TestPairOperationsLeaveOtherInstanceAlone is SPEC §6.4: opening,
// rotating, releasing or losing (T, B) never changes (T, A)'s credential.
func TestPairOperationsLeaveOtherInstanceAlone(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		op   func(t *testing.T, rt *mcpruntime.Runtime)
	}{
		{"open", func(t *testing.T, rt *mcpruntime.Runtime) { openMinted(t, rt, "T", "B") }},
		{"open twice", func(t *testing.T, rt *mcpruntime.Runtime) {
			openMinted(t, rt, "T", "B")
			_, err := rt.OpenProviderSession(ctx, "T", "B")
			noErr(t, err)
		}},
		{"rotate", func(t *testing.T, rt *mcpruntime.Runtime) {
			openMinted(t, rt, "T", "B")
			_, err := rt.Rotate(ctx, "T", "B")
			noErr(t, err)
		}},
		{"release", func(t *testing.T, rt *mcpruntime.Runtime) {
			ps, _ := openMinted(t, rt, "T", "B")
			noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
		}},
		{"driver death", func(t *testing.T, rt *mcpruntime.Runtime) {
			ps, tok := openMinted(t, rt, "T", "B")
			inprocOf(rt).Session(ps.ID).Kill(nil)
			waitDead(t, rt, "B after kill", tok)
		}},
		{"failed open", func(t *testing.T, rt *mcpruntime.Runtime) { // any error: see TestFailedOpensAnswered
			inprocOf(rt).FailNextOpen("B", errors.New("boom"))
			if _, err := rt.OpenProviderSession(ctx, "T", "B"); err == nil {
				t.Fatal("open of B succeeded, want the injected failure")
			}
		}},
		{"switch", func(t *testing.T, rt *mcpruntime.Runtime) {
			_, err := rt.SwitchProvider(ctx, "T", "B")
			noErr(t, err)
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{OpenTimeout: 2 * time.Second})
			registerInproc(t, rt, "A", "B")
			createThreads(t, rt, "T")
			a, tokA := openMinted(t, rt, "T", "A")
			before := assertLive(t, rt, "A before", tokA)
			recBefore := credentialOf(t, rt, "T", a.CredentialID)

			test.op(t, rt)

			after := assertLive(t, rt, "A after "+test.name, tokA)
			if diff := cmp.Diff(before, after); diff != "" {
				t.Fatalf("A's principal changed (-before +after):\n%s", diff)
			}
			recAfter := credentialOf(t, rt, "T", a.CredentialID)
			if diff := cmp.Diff(recBefore, recAfter); diff != "" {
				t.Fatalf("A's credential record changed (-before +after):\n%s", diff)
			}
			if inprocOf(rt).Session(a.ID).Closed() {
				t.Fatalf("A's provider session was closed")
			}
		})
	}
}

// TestRotate: a rotation mints a new credential for the pair, revokes only
// its previous one, and the attached session is re-bound with the new token.
func TestRotate(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T", "U")
	a, tokA := openMinted(t, rt, "T", "A")
	_, tokB := openMinted(t, rt, "T", "B")
	_, tokUA := openMinted(t, rt, "U", "A")

	cred, err := rt.Rotate(ctx, "T", "A")
	noErr(t, err)
	if cred.ID == a.CredentialID {
		t.Fatalf("Rotate returned the old credential id %s", cred.ID)
	}
	tokNew := bearer(t, cred.Authorization)
	assertReason(t, rt, "old A token", tokA, mcpruntime.AuthRevoked)
	p := assertLive(t, rt, "rotated A token", tokNew)
	if p.Thread != "T" || p.Instance != "A" || p.CredentialID != cred.ID || p.Namespace != "cred:"+cred.ID {
		t.Fatalf("rotated principal = %+v", p)
	}
	assertLive(t, rt, "(T, B) after rotating (T, A)", tokB)
	assertLive(t, rt, "(U, A) after rotating (T, A)", tokUA)

	drv := inprocOf(rt).Session(a.ID)
	if got, want := drv.Authorizations(), []string{a.Authorization, cred.Authorization}; !slices.Equal(got, want) {
		t.Fatalf("driver Authorizations = %q, want %q", got, want)
	}
	if got := drv.Attached(); !slices.Equal(got, []string{"T"}) {
		t.Fatalf("driver attached = %q, want [T]", got)
	}

	// The pair's session now serves the new credential: a re-open returns it.
	again, err := rt.OpenProviderSession(ctx, "T", "A")
	noErr(t, err)
	if again.ID != a.ID || again.CredentialID != cred.ID || !again.Reused || again.Authorization != "" {
		t.Fatalf("open after rotate = %+v, want session %s with credential %s, reused", again, a.ID, cred.ID)
	}
	// And releasing the session revokes the credential it now holds.
	noErr(t, rt.ReleaseProviderSession(ctx, a.ID))
	assertReason(t, rt, "rotated token after release", tokNew, mcpruntime.AuthRevoked)
	assertLive(t, rt, "(T, B) after release of (T, A)", tokB)
}

// TestRotateRevokesOnceTheAgentHoldsTheNew: while the driver hands the
// new credential to the running agent (its Attach), the old token still
// authenticates — an agent mid-turn keeps working — and once Rotate
// returned it is revoked (SPEC §3.2).
func TestRotateRevokesOnceTheAgentHoldsTheNew(t *testing.T) {
	ctx := context.Background()
	var rt *mcpruntime.Runtime
	var oldTok string
	var during []string // the old token's auth reason at each Attach with a new token
	var mu sync.Mutex
	inproc := &providertest.Inproc{}
	rt = quietRuntime(t, mcpruntime.Config{Drivers: map[string]driver.Factory{"gated": func(instance string, raw json.RawMessage) (driver.Driver, error) {
		inner, err := inproc.Factory()(instance, raw)
		if err != nil {
			return nil, err
		}
		return &providertest.Gated{Inner: inner, Attaching: func(b driver.Binding) {
			if b.Authorization == "" {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			during = append(during, authReason(t, rt, oldTok))
		}}, nil
	}}})
	noErr(t, rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: "gated"}))
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	mu.Lock()
	oldTok = tok
	mu.Unlock()

	cred, err := rt.Rotate(ctx, "T", "A")
	noErr(t, err)
	mu.Lock()
	got := slices.Clone(during)
	mu.Unlock()
	if !slices.Equal(got, []string{""}) {
		t.Fatalf("old token's auth reason during the Attach of the new one = %q, want [\"\"] (still live)", got)
	}
	assertReason(t, rt, "old token once Rotate returned", tok, mcpruntime.AuthRevoked)
	assertLive(t, rt, "new token", bearer(t, cred.Authorization))
}

// TestRotateWithoutSession: rotating a pair with no provider session mints
// a credential all the same.
func TestRotateWithoutSession(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	cred, err := rt.Rotate(context.Background(), "T", "A")
	noErr(t, err)
	p := assertLive(t, rt, "rotated token", bearer(t, cred.Authorization))
	if p.Thread != "T" || p.Instance != "A" {
		t.Fatalf("principal = %+v, want (T, A)", p)
	}
	if n := len(inprocOf(rt).Sessions("A")); n != 0 {
		t.Fatalf("rotate opened %d driver sessions, want 0", n)
	}
}

// TestReleaseRevokes: releasing a provider session revokes its credential
// and closes the driver session; a later open mints anew.
func TestReleaseRevokes(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "A")

	noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
	assertReason(t, rt, "after release", tok, mcpruntime.AuthRevoked)
	// The driver is closed after the release returns: wait for it.
	waitUntil(t, "driver session closed", inprocOf(rt).Session(ps.ID).Closed)
	if _, err := rt.ProviderSession(ps.ID); !errors.Is(err, mcpruntime.ErrUnknownProviderSession) {
		t.Fatalf("provider session after release: %v, want ErrUnknownProviderSession", err)
	}
	ps2, tok2 := openMinted(t, rt, "T", "A")
	if ps2.ID == ps.ID || ps2.CredentialID == ps.CredentialID {
		t.Fatalf("open after release = %+v, want a new session and credential", ps2)
	}
	assertLive(t, rt, "after re-open", tok2)
	assertDead(t, rt, "released token after re-open", tok)
}

// TestDriverDeathReleases: a session whose driver reports its death is
// released: its credential is revoked, and a re-open mints a fresh one.
func TestDriverDeathReleases(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "A")
	_, tokB := openMinted(t, rt, "T", "B")

	drv := inprocOf(rt).Session(ps.ID)
	drv.Kill(errors.New("process exited"))
	waitDead(t, rt, "A after its driver died", tok)
	assertReason(t, rt, "A after its driver died", tok, mcpruntime.AuthRevoked)
	waitUntil(t, "driver session closed", drv.Closed)
	assertLive(t, rt, "B after A died", tokB)

	ps2, tok2 := openMinted(t, rt, "T", "A")
	if ps2.ID == ps.ID || ps2.CredentialID == ps.CredentialID {
		t.Fatalf("open after death = %+v, want a new session and credential", ps2)
	}
	assertLive(t, rt, "re-opened A", tok2)
	assertDead(t, rt, "dead session's token after re-open", tok)
}

// TestOpenFailure: a failed open returns the driver's error and leaves no
// live credential for the pair; another instance's credential stays live.
func TestOpenFailure(t *testing.T) {
	ctx := context.Background()
	// A short OpenTimeout: a failed open that is never answered fails the
	// test in seconds instead of hanging for the default 30 s.
	rt := quietRuntime(t, mcpruntime.Config{OpenTimeout: 2 * time.Second})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	_, tokA := openMinted(t, rt, "T", "A")

	boom := errors.New("boom")
	inprocOf(rt).FailNextOpen("B", boom)
	ps, err := rt.OpenProviderSession(ctx, "T", "B")
	if !actortest.OpenFailed(err, boom) {
		t.Fatalf("OpenProviderSession = %+v, %v; want the driver's error", ps, err)
	}
	if got := liveCredentials(t, rt, time.Now(), "T", "B"); len(got) != 0 {
		t.Fatalf("live credentials of (T, B) after a failed open: %q", got)
	}
	if n := len(inprocOf(rt).Sessions("B")); n != 0 {
		t.Fatalf("driver has %d sessions of B after a failed open", n)
	}
	assertLive(t, rt, "A after B's open failed", tokA)

	// The failure was one-shot: the next open works and mints.
	_, tokB := openMinted(t, rt, "T", "B")
	assertLive(t, rt, "B after a successful open", tokB)
	assertLive(t, rt, "A after B's open succeeded", tokA)
}

// TestOpenFailureKeepsPairsCredential: SPEC §3 "open fails: revoke the
// credential only if this open minted it". A live credential the pair had
// before the failed open (here from a rotation) must survive it.
func TestOpenFailureKeepsPairsCredential(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{OpenTimeout: 2 * time.Second})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	cred, err := rt.Rotate(ctx, "T", "A")
	noErr(t, err)
	tok := bearer(t, cred.Authorization)

	inprocOf(rt).FailNextOpen("A", errors.New("boom"))
	if _, err := rt.OpenProviderSession(ctx, "T", "A"); err == nil {
		t.Fatal("open succeeded, want the injected failure")
	}
	if reason := authReason(t, rt, tok); reason != "" {
		rec := credentialOf(t, rt, "T", cred.ID)
		t.Fatalf("(T, A) credential minted before the failed open: %s (recorded reason %q), want live", reason, rec.RevokeReason)
	}
}

// TestFailedOpensAnswered: every failed open is answered with the driver's
// error, promptly. Repeated because the reply races the failed session's
// actor stopping.
func TestFailedOpensAnswered(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{OpenTimeout: 2 * time.Second})
	registerInproc(t, rt, "A")
	for i := range 20 {
		id := fmt.Sprintf("T%d", i)
		createThreads(t, rt, id)
		boom := fmt.Errorf("boom %d", i)
		inprocOf(rt).FailNextOpen("A", boom)
		if _, err := rt.OpenProviderSession(ctx, id, "A"); !actortest.OpenFailed(err, boom) {
			t.Fatalf("failed open %d = %v, want the driver's error %q", i, err, boom)
		}
	}
}

// TestOpenFailureLeavesNoCurrentInstance: the current instance is set by the
// first provider session opened on a thread (SPEC §3); an open that failed
// opened nothing.
func TestOpenFailureLeavesNoCurrentInstance(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{OpenTimeout: 2 * time.Second})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	inprocOf(rt).FailNextOpen("A", errors.New("boom"))
	if _, err := rt.OpenProviderSession(ctx, "T", "A"); err == nil {
		t.Fatal("open succeeded, want the injected failure")
	}
	if got := threadOf(t, rt, "T").Instance; got != "" {
		t.Fatalf("current instance after a failed first open = %q, want none", got)
	}
}

// TestDetachRevokesNothing: a plain detach is a handoff. The credential
// stays live, and a re-open re-attaches the same session without a token.
func TestDetachRevokesNothing(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "A")
	drv := inprocOf(rt).Session(ps.ID)

	noErr(t, rt.Detach(ctx, "T"))
	assertLive(t, rt, "after detach", tok)
	// The driver is told after Detach returns: wait for it.
	waitUntil(t, "driver session detached", func() bool { return len(drv.Attached()) == 0 })
	if drv.Closed() {
		t.Fatal("detach closed the driver session")
	}

	again, err := rt.OpenProviderSession(ctx, "T", "A")
	noErr(t, err)
	if again.ID != ps.ID || again.CredentialID != ps.CredentialID || !again.Reused || again.Authorization != "" {
		t.Fatalf("open after detach = %+v, want session %s / credential %s re-attached without a token", again, ps.ID, ps.CredentialID)
	}
	if got := drv.Attached(); !slices.Equal(got, []string{"T"}) {
		t.Fatalf("driver attached after re-open = %q, want [T]", got)
	}
	bs := drv.Bindings()
	if last := bs[len(bs)-1]; last.Thread != "T" || last.CredentialID != ps.CredentialID || last.Authorization != "" {
		t.Fatalf("re-attach binding = %+v, want T with credential %s and no token", last, ps.CredentialID)
	}
	if n := len(inprocOf(rt).Sessions("A")); n != 1 {
		t.Fatalf("driver opened %d sessions, want 1", n)
	}
	assertLive(t, rt, "after re-attach", tok)
}

// TestArchiveAndDeleteRevokeEverything: archive and delete of T revoke every
// credential of T across instances — attached, detached, or whose session is
// gone — and touch nothing of another thread.
func TestArchiveAndDeleteRevokeEverything(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name  string
		op    func(*mcpruntime.Runtime) error
		check func(t *testing.T, rt *mcpruntime.Runtime)
	}{
		{
			name: "archive",
			op:   func(rt *mcpruntime.Runtime) error { return rt.Archive(ctx, "T") },
			check: func(t *testing.T, rt *mcpruntime.Runtime) {
				th := threadOf(t, rt, "T")
				if th.Status != "archived" || th.Run != nil {
					t.Fatalf("archived thread = %+v, want status archived and no run", th)
				}
			},
		},
		{
			name: "delete",
			op:   func(rt *mcpruntime.Runtime) error { return rt.DeleteThread(ctx, "T") },
			check: func(t *testing.T, rt *mcpruntime.Runtime) {
				if _, err := rt.Thread(ctx, "T"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
					t.Fatalf("Thread(T) after delete = %v, want ErrUnknownThread", err)
				}
				ths, err := rt.Threads(ctx)
				noErr(t, err)
				if len(ths) != 1 || ths[0].ID != "U" {
					t.Fatalf("Threads after delete = %+v, want only U", ths)
				}
				if err := rt.DeleteThread(ctx, "T"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
					t.Fatalf("second delete = %v, want ErrUnknownThread", err)
				}
			},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A", "B", "C", "D")
			registerMulti(t, rt, "M")
			createThreads(t, rt, "T", "U")

			tokens := map[string]string{}
			// (T, A): attached session, with an active run.
			a, tok := openMinted(t, rt, "T", "A")
			tokens["(T, A) attached"] = tok
			_, err := rt.StartRun(ctx, "T", "A")
			noErr(t, err)
			// (T, B): its session died; the pair was then rotated, so its live
			// credential has no provider session at all.
			b, tok := openMinted(t, rt, "T", "B")
			inprocOf(rt).Session(b.ID).Kill(nil)
			waitDead(t, rt, "(T, B) after kill", tok)
			cred, err := rt.Rotate(ctx, "T", "B")
			noErr(t, err)
			tokens["(T, B) no session"] = bearer(t, cred.Authorization)
			// (T, C): rotated, never opened.
			cred, err = rt.Rotate(ctx, "T", "C")
			noErr(t, err)
			tokens["(T, C) never opened"] = bearer(t, cred.Authorization)
			// (T, M): on a session shared with U.
			m, tok := openMinted(t, rt, "T", "M")
			tokens["(T, M) shared session"] = tok
			// (T, D): released session; a later rotation.
			d, _ := openMinted(t, rt, "T", "D")
			noErr(t, rt.ReleaseProviderSession(ctx, d.ID))
			cred, err = rt.Rotate(ctx, "T", "D")
			noErr(t, err)
			tokens["(T, D) released session"] = bearer(t, cred.Authorization)

			_, tokUA := openMinted(t, rt, "U", "A")
			_, tokUM := openMinted(t, rt, "U", "M")
			for what, tok := range tokens {
				assertLive(t, rt, what+" before", tok)
			}

			noErr(t, test.op(rt))

			for what, tok := range tokens {
				assertDead(t, rt, what+" after "+test.name, tok)
			}
			if got := liveCredentials(t, rt, time.Now(), "T", ""); len(got) != 0 {
				t.Fatalf("live credentials of T after %s: %q", test.name, got)
			}
			assertLive(t, rt, "(U, A)", tokUA)
			assertLive(t, rt, "(U, M)", tokUM)
			// The drivers are told after the call returns: wait for them.
			waitUntil(t, "A's session detached from T", func() bool {
				return len(inprocOf(rt).Session(a.ID).Attached()) == 0
			})
			shared := inprocOf(rt).Session(m.ID)
			waitUntil(t, "shared session detached from T", func() bool {
				return slices.Equal(shared.Attached(), []string{"U"})
			})
			if shared.Closed() {
				t.Fatal("shared session closed, want it open for U")
			}
			test.check(t, rt)
		})
	}
}

// TestArchivedThreadIsReadOnly: an archived thread refuses every change
// with ErrArchivedThread and can still be read.
func TestArchivedThreadIsReadOnly(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	_, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	p := assertLive(t, rt, "caller", tok)
	msg, err := rt.Post(ctx, p, "", "before archive")
	noErr(t, err)
	noErr(t, rt.Archive(ctx, "T"))

	calls := []struct {
		name string
		call func() error
	}{
		{"OpenProviderSession", func() error { _, err := rt.OpenProviderSession(ctx, "T", "A"); return err }},
		{"OpenProviderSession other instance", func() error { _, err := rt.OpenProviderSession(ctx, "T", "B"); return err }},
		{"StartRun", func() error { _, err := rt.StartRun(ctx, "T", "A"); return err }},
		{"SwitchProvider", func() error { _, err := rt.SwitchProvider(ctx, "T", "B"); return err }},
		{"Rotate", func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, mcpruntime.ErrArchivedThread) {
				t.Fatalf("%s on an archived thread = %v, want ErrArchivedThread", c.name, err)
			}
		})
	}
	th := threadOf(t, rt, "T")
	if th.Status != "archived" || th.Instance != "A" || th.Run != nil {
		t.Fatalf("archived thread = %+v, want status archived, instance A, no run", th)
	}
	if diff := cmp.Diff([]mcpruntime.Message{msg}, th.Messages); diff != "" {
		t.Fatalf("archived thread messages (-want +got):\n%s", diff)
	}
	if got := liveCredentials(t, rt, time.Now(), "T", ""); len(got) != 0 {
		t.Fatalf("refused calls left live credentials %q", got)
	}
	if n := len(inprocOf(rt).Sessions("B")); n != 0 {
		t.Fatalf("refused open started %d driver sessions of B", n)
	}
}

// TestDeleteThenRecreate: a deleted thread's id can be used again; the new
// thread starts empty and the old tokens stay dead.
func TestDeleteThenRecreate(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	old, tokOld := openMinted(t, rt, "T", "A")
	_, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	p := assertLive(t, rt, "old", tokOld)
	_, err = rt.Post(ctx, p, "", "old message")
	noErr(t, err)

	noErr(t, rt.DeleteThread(ctx, "T"))
	th, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{})
	noErr(t, err)
	if th.ID != "T" || th.Status != "active" || th.Instance != "" || th.Run != nil || len(th.Messages) != 0 {
		t.Fatalf("re-created thread = %+v, want a fresh active thread", th)
	}
	assertDead(t, rt, "old token after re-create", tokOld)
	if _, err := rt.Post(ctx, p, "", "from the old credential"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("Post with the old credential = %v, want ErrNotLive", err)
	}

	ps, tokNew := openMinted(t, rt, "T", "A")
	if ps.CredentialID == old.CredentialID || ps.ID == old.ID {
		t.Fatalf("open on re-created thread = %+v, want a new session and credential", ps)
	}
	assertLive(t, rt, "new token", tokNew)
	assertDead(t, rt, "old token after re-open", tokOld)
	if got := threadOf(t, rt, "T").Messages; len(got) != 0 {
		t.Fatalf("re-created thread has messages %+v", got)
	}
}

// TestTurnStartRefreshesLiveness: a credential expires when its liveness
// window passes with no turn start; StartRun (and Touch) refresh every live
// credential of the thread, and an expired one stays expired.
func TestTurnStartRefreshesLiveness(t *testing.T) {
	ctx := context.Background()
	const window = time.Hour
	tests := []struct {
		name    string
		refresh func(rt *mcpruntime.Runtime) error // nil: no turn
	}{
		{"StartRun", func(rt *mcpruntime.Runtime) error { _, err := rt.StartRun(ctx, "T", "A"); return err }},
		{"Touch", func(rt *mcpruntime.Runtime) error { return rt.Touch(ctx, "T") }},
		{"no turn", nil},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			clk := newFakeClock()
			rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: window})
			registerInproc(t, rt, "A", "B")
			createThreads(t, rt, "T", "U")
			_, tokA := openMinted(t, rt, "T", "A")
			_, tokB := openMinted(t, rt, "T", "B") // not current: refreshed all the same
			_, tokU := openMinted(t, rt, "U", "A") // another thread: not refreshed
			if p := assertLive(t, rt, "A at mint", tokA); !p.Expires.Equal(clk.Now().Add(window)) {
				t.Fatalf("Expires at mint = %v, want %v", p.Expires, clk.Now().Add(window))
			}

			clk.Advance(50 * time.Minute)
			if test.refresh != nil {
				noErr(t, test.refresh(rt))
				if p := assertLive(t, rt, "A at refresh", tokA); !p.Expires.Equal(clk.Now().Add(window)) {
					t.Fatalf("Expires after refresh = %v, want %v", p.Expires, clk.Now().Add(window))
				}
			}
			clk.Advance(50 * time.Minute)
			assertReason(t, rt, "U, not refreshed", tokU, mcpruntime.AuthExpired)
			if test.refresh == nil {
				assertReason(t, rt, "A without a turn", tokA, mcpruntime.AuthExpired)
				assertReason(t, rt, "B without a turn", tokB, mcpruntime.AuthExpired)
				// A later turn does not revive an expired credential.
				_, err := rt.StartRun(ctx, "T", "A")
				noErr(t, err)
				assertReason(t, rt, "A after a late turn", tokA, mcpruntime.AuthExpired)
				return
			}
			assertLive(t, rt, "A 50 min after the refresh", tokA)
			assertLive(t, rt, "B 50 min after the refresh", tokB)
			clk.Advance(10 * time.Minute) // exactly one window after the refresh
			assertReason(t, rt, "A one window after the refresh", tokA, mcpruntime.AuthExpired)
			assertReason(t, rt, "B one window after the refresh", tokB, mcpruntime.AuthExpired)
		})
	}
}

// TestCredentialWindow: the default window is 24 h, a configured one is
// honoured, and NoExpiry never expires.
func TestCredentialWindow(t *testing.T) {
	tests := []struct {
		name   string
		window time.Duration
		live   time.Duration // still live this long after the mint; dead 1 ns later (0: never dead)
	}{
		{"default", 0, 24 * time.Hour},
		{"configured", 2 * time.Hour, 2 * time.Hour},
		{"NoExpiry", mcpruntime.NoExpiry, 0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			clk := newFakeClock()
			rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: test.window})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			_, tok := openMinted(t, rt, "T", "A")
			if test.live == 0 {
				if p := assertLive(t, rt, "at mint", tok); !p.Expires.IsZero() {
					t.Fatalf("Expires = %v, want zero (never)", p.Expires)
				}
				clk.Advance(100 * 365 * 24 * time.Hour)
				assertLive(t, rt, "a century later", tok)
				return
			}
			clk.Advance(test.live - time.Nanosecond)
			assertLive(t, rt, "just inside the window", tok)
			clk.Advance(time.Nanosecond)
			assertReason(t, rt, "at the window's end", tok, mcpruntime.AuthExpired)
		})
	}
}

// TestThreadRuns: the current instance and the single active run (SPEC §3).
func TestThreadRuns(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	th, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{Instance: "A"})
	noErr(t, err)
	if th.Instance != "A" {
		t.Fatalf("created with instance A: %+v", th)
	}

	if _, err := rt.StartRun(ctx, "T", "B"); !errors.Is(err, mcpruntime.ErrNotCurrentInstance) {
		t.Fatalf("StartRun(B) while A is current = %v, want ErrNotCurrentInstance", err)
	}
	run, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	if got := threadOf(t, rt, "T").Run; got == nil || got.ID != run || got.Instance != "A" {
		t.Fatalf("run after StartRun = %+v, want %s of A", got, run)
	}
	if _, err := rt.StartRun(ctx, "T", "A"); !errors.Is(err, mcpruntime.ErrRunActive) {
		t.Fatalf("second StartRun = %v, want ErrRunActive", err)
	}
	if err := rt.EndRun(ctx, "T", "run_other"); !errors.Is(err, mcpruntime.ErrNoRun) {
		t.Fatalf("EndRun of another run = %v, want ErrNoRun", err)
	}
	// Switching to the current instance keeps the run.
	res, err := rt.SwitchProvider(ctx, "T", "A")
	noErr(t, err)
	if res.EndedRun != "" || threadOf(t, rt, "T").Run == nil {
		t.Fatalf("switch to the current instance = %+v, ended the run", res)
	}
	// Switching away ends it.
	res, err = rt.SwitchProvider(ctx, "T", "B")
	noErr(t, err)
	if res != (mcpruntime.SwitchResult{Previous: "A", EndedRun: run}) {
		t.Fatalf("switch A→B = %+v, want previous A and ended run %s", res, run)
	}
	if th := threadOf(t, rt, "T"); th.Instance != "B" || th.Run != nil {
		t.Fatalf("after switch = %+v, want current B and no run", th)
	}
	run2, err := rt.StartRun(ctx, "T", "B")
	noErr(t, err)
	noErr(t, rt.EndRun(ctx, "T", run2))
	if err := rt.EndRun(ctx, "T", ""); !errors.Is(err, mcpruntime.ErrNoRun) {
		t.Fatalf("EndRun with no run = %v, want ErrNoRun", err)
	}

	// The first session opened on a thread without an instance sets it; later
	// opens do not change it.
	createThreads(t, rt, "U")
	openMinted(t, rt, "U", "B")
	openMinted(t, rt, "U", "A")
	if got := threadOf(t, rt, "U").Instance; got != "B" {
		t.Fatalf("current instance of U = %q, want B (first opened)", got)
	}
}

// TestMultiThreadDriver: one session of a multi-thread driver serves two
// threads with distinct credentials; releasing it, or its death, revokes both.
func TestMultiThreadDriver(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		end  func(t *testing.T, rt *mcpruntime.Runtime, id string, toks ...string)
	}{
		{"release", func(t *testing.T, rt *mcpruntime.Runtime, id string, toks ...string) {
			noErr(t, rt.ReleaseProviderSession(ctx, id))
		}},
		{"driver death", func(t *testing.T, rt *mcpruntime.Runtime, id string, toks ...string) {
			inprocOf(rt).Session(id).Kill(nil)
			for i, tok := range toks {
				waitDead(t, rt, fmt.Sprintf("token %d", i), tok)
			}
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerMulti(t, rt, "M")
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T", "U")
			_, tokTA := openMinted(t, rt, "T", "A")
			pt, tokT := openMinted(t, rt, "T", "M")
			pu, tokU := openMinted(t, rt, "U", "M")
			if pt.ID != pu.ID {
				t.Fatalf("sessions %s and %s, want one shared session", pt.ID, pu.ID)
			}
			if pt.CredentialID == pu.CredentialID {
				t.Fatalf("T and U share credential %s", pt.CredentialID)
			}
			if n := len(inprocOf(rt).Sessions("M")); n != 1 {
				t.Fatalf("driver opened %d sessions of M, want 1", n)
			}
			drv := inprocOf(rt).Session(pt.ID)
			if got := drv.Attached(); !slices.Equal(got, []string{"T", "U"}) {
				t.Fatalf("attached = %q, want [T U]", got)
			}
			if got, want := drv.Authorizations(), []string{pt.Authorization, pu.Authorization}; !slices.Equal(got, want) {
				t.Fatalf("driver Authorizations = %q, want %q", got, want)
			}
			pT := assertLive(t, rt, "T", tokT)
			pU := assertLive(t, rt, "U", tokU)
			if pT.Thread != "T" || pU.Thread != "U" || pT.Namespace == pU.Namespace {
				t.Fatalf("principals %+v and %+v, want distinct per thread", pT, pU)
			}

			test.end(t, rt, pt.ID, tokT, tokU)
			assertReason(t, rt, "T's credential", tokT, mcpruntime.AuthRevoked)
			assertReason(t, rt, "U's credential", tokU, mcpruntime.AuthRevoked)
			assertLive(t, rt, "(T, A), another instance", tokTA)
			waitUntil(t, "shared driver session closed", drv.Closed)
		})
	}
}

// TestCloseRevokesEverything: Close revokes every provider credential and
// client token, closes every driver session, and every method afterwards
// returns ErrClosed.
func TestCloseRevokesEverything(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T", "U")
	a, tokA := openMinted(t, rt, "T", "A")
	_, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	p := assertLive(t, rt, "A", tokA)
	b, tokB := openMinted(t, rt, "U", "B")
	noErr(t, rt.Detach(ctx, "U"))
	cred, err := rt.Rotate(ctx, "T", "B")
	noErr(t, err)
	tokRot := bearer(t, cred.Authorization)
	ro, err := rt.IssueClient(ctx, "viewer", "read-only")
	noErr(t, err)
	rw, err := rt.IssueClient(ctx, "editor", "read-write")
	noErr(t, err)
	rwNext, err := rt.RefreshClient(ctx, rw.ClientID, false)
	noErr(t, err)

	noErr(t, rt.Close())
	for what, tok := range map[string]string{
		"(T, A)": tokA, "(U, B) detached": tokB, "(T, B) rotated": tokRot,
		"read-only client": ro.Token, "read-write client": rw.Token, "refreshed client": rwNext,
	} {
		assertDead(t, rt, what+" after Close", tok)
	}
	for _, id := range []string{a.ID, b.ID} {
		if !inprocOf(rt).Session(id).Closed() {
			t.Fatalf("driver session %s not closed by Close", id)
		}
	}
	noErr(t, rt.Close()) // again: nothing to do

	calls := []struct {
		name string
		call func() error
	}{
		{"RegisterInstance", func() error {
			return rt.RegisterInstance(ctx, "C", mcpruntime.InstanceSpec{Driver: driver.InprocKind})
		}},
		{"CreateThread", func() error { _, err := rt.CreateThread(ctx, "V", mcpruntime.ThreadOptions{}); return err }},
		{"Thread", func() error { _, err := rt.Thread(ctx, "T"); return err }},
		{"Threads", func() error { _, err := rt.Threads(ctx); return err }},
		{"OpenProviderSession", func() error { _, err := rt.OpenProviderSession(ctx, "T", "A"); return err }},
		{"ReleaseProviderSession", func() error { return rt.ReleaseProviderSession(ctx, a.ID) }},
		{"SwitchProvider", func() error { _, err := rt.SwitchProvider(ctx, "T", "B"); return err }},
		{"Rotate", func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }},
		{"StartRun", func() error { _, err := rt.StartRun(ctx, "U", "B"); return err }},
		{"EndRun", func() error { return rt.EndRun(ctx, "T", "") }},
		{"Touch", func() error { return rt.Touch(ctx, "T") }},
		{"Detach", func() error { return rt.Detach(ctx, "T") }},
		{"Archive", func() error { return rt.Archive(ctx, "T") }},
		{"DeleteThread", func() error { return rt.DeleteThread(ctx, "T") }},
		{"IssueClient", func() error { _, err := rt.IssueClient(ctx, "x", "read-only"); return err }},
		{"RefreshClient", func() error { _, err := rt.RefreshClient(ctx, rw.ClientID, false); return err }},
		{"RevokeClient", func() error { return rt.RevokeClient(ctx, rw.ClientID) }},
		{"Post", func() error { _, err := rt.Post(ctx, p, "", "after close"); return err }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, mcpruntime.ErrClosed) {
				t.Fatalf("%s after Close = %v, want ErrClosed", c.name, err)
			}
		})
	}
}

// TestMCPHandlerRacingCloseClosesItsEndpoint: a Close that lands while
// MCPHandler builds its endpoint — after the runtime was found open, before
// the endpoint is registered for Close to close — does not see it. The
// call answers ErrClosed and must close that endpoint itself, or its
// liveness monitor (a hook on the store) and its idle sweep (a timer that
// re-arms itself) outlive the runtime.
func TestMCPHandlerRacingCloseClosesItsEndpoint(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	var built *mcpruntime.MCPEndpoint
	restore := mcpruntime.OnEndpointBuilt(func(ep *mcpruntime.MCPEndpoint) {
		built = ep
		noErr(t, rt.Close()) // in the window
	})
	defer restore()
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{IdleTimeout: time.Minute})
	if !errors.Is(err, mcpruntime.ErrClosed) || ep != nil {
		t.Fatalf("MCPHandler racing Close = %v, %v; want nil, ErrClosed", ep, err)
	}
	if built == nil {
		t.Fatal("MCPHandler built no endpoint: the test missed the window")
	}
	if !mcpruntime.EndpointClosed(built) {
		t.Error("the endpoint MCPHandler built and did not return was left open")
	}
}

// TestReopenAfterExpiryRebindsSession: when the pair's session is still
// attached but its credential expired, a re-open mints a new credential and
// hands it to that same session instead of starting a second process that
// would leave the first one serving the thread with a dead token.
func TestReopenAfterExpiryRebindsSession(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: time.Hour})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "A")

	clk.Advance(2 * time.Hour)
	assertReason(t, rt, "expired credential", tok, mcpruntime.AuthExpired)

	again, err := rt.OpenProviderSession(ctx, "T", "A")
	noErr(t, err)
	if again.ID != ps.ID || again.Reused || again.Authorization == "" || again.CredentialID == ps.CredentialID {
		t.Fatalf("re-open after expiry = %+v, want session %s with a new credential and its token", again, ps.ID)
	}
	assertLive(t, rt, "new credential", bearer(t, again.Authorization))
	assertReason(t, rt, "old credential", tok, mcpruntime.AuthExpired)
	got := inprocOf(rt).Session(ps.ID).Authorizations()
	if len(got) != 2 || got[1] != again.Authorization {
		t.Fatalf("session %s was given %q, want the new Authorization last", ps.ID, got)
	}
	if n := len(inprocOf(rt).Sessions("A")); n != 1 {
		t.Fatalf("instance A has %d driver sessions, want 1", n)
	}
	// The session's record now holds the new credential, so releasing it
	// revokes that one.
	noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
	assertReason(t, rt, "new credential after release", bearer(t, again.Authorization), mcpruntime.AuthRevoked)
}

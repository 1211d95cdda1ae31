package mcpruntime_test

import (
	"context"
	"errors"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

func assertLive(t *testing.T, rt *mcpruntime.Runtime, what, tok string) mcpruntime.Principal {
	t.Helper()
	p, err := rt.Authenticate(tok)
	if err != nil {
		t.Fatalf("%s: Authenticate = %v, want live", what, err)
	}
	return p
}

func assertDead(t *testing.T, rt *mcpruntime.Runtime, what, tok string) {
	t.Helper()
	if _, err := rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
		t.Fatalf("%s: Authenticate = %v, want ErrUnauthenticated", what, err)
	}
}

// TestProviderSwitchRegression is the story the runtime exists for: a
// thread moves from provider A to B and back, and neither loses its
// credential. It fails if opening B revokes A.
func TestProviderSwitchRegression(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t, mcpruntime.Config{})
	for _, id := range []string{"codex-a", "codex-b"} {
		if err := rt.RegisterInstance(ctx, id, mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{})
	noErr(t, err)

	// Open A.
	a, err := rt.OpenProviderSession(ctx, "T", "codex-a")
	noErr(t, err)
	if a.Authorization == "" || a.Reused {
		t.Fatalf("first open of A = %+v, want a minted credential", a)
	}
	drvA := inprocOf(rt).Session(a.ID)
	if drvA == nil {
		t.Fatalf("driver never saw session %s", a.ID)
	}
	if got := drvA.Authorizations(); len(got) != 1 || got[0] != a.Authorization {
		t.Fatalf("driver A got %q, want [%q]", got, a.Authorization)
	}
	tokA := bearer(t, a.Authorization)
	pA := assertLive(t, rt, "A after open", tokA)
	if pA.Thread != "T" || pA.Instance != "codex-a" || pA.Namespace != "cred:"+a.CredentialID {
		t.Fatalf("A principal = %+v", pA)
	}

	// Switch to B and open it: A's credential stays live.
	_, err = rt.SwitchProvider(ctx, "T", "codex-b")
	noErr(t, err)
	b, err := rt.OpenProviderSession(ctx, "T", "codex-b")
	noErr(t, err)
	tokB := bearer(t, b.Authorization)
	assertLive(t, rt, "B after open", tokB)
	assertLive(t, rt, "A after opening B", tokA)
	if b.CredentialID == a.CredentialID {
		t.Fatalf("A and B share credential %s", a.CredentialID)
	}

	// Back to A: the same session and credential, nothing minted.
	_, err = rt.SwitchProvider(ctx, "T", "codex-a")
	noErr(t, err)
	a2, err := rt.OpenProviderSession(ctx, "T", "codex-a")
	noErr(t, err)
	if a2.ID != a.ID || a2.CredentialID != a.CredentialID || !a2.Reused || a2.Authorization != "" {
		t.Fatalf("re-open of A = %+v, want reuse of session %s / credential %s without a token", a2, a.ID, a.CredentialID)
	}
	assertLive(t, rt, "A after switching back", tokA)
	assertLive(t, rt, "B after switching back", tokB)

	// Closing B leaves A live.
	if err := rt.ReleaseProviderSession(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	assertDead(t, rt, "B after release", tokB)
	assertLive(t, rt, "A after releasing B", tokA)
	if !inprocOf(rt).Session(b.ID).Closed() {
		t.Fatalf("driver session of B not closed")
	}

	// Re-opening B mints a new credential.
	b2, err := rt.OpenProviderSession(ctx, "T", "codex-b")
	noErr(t, err)
	if b2.Reused || b2.Authorization == "" || b2.CredentialID == b.CredentialID || b2.ID == b.ID {
		t.Fatalf("re-open of B = %+v, want a new session with a new credential", b2)
	}
	tokB2 := bearer(t, b2.Authorization)
	assertLive(t, rt, "B2", tokB2)
	assertLive(t, rt, "A after re-opening B", tokA)

	// Deleting T revokes both.
	if err := rt.DeleteThread(ctx, "T"); err != nil {
		t.Fatal(err)
	}
	assertDead(t, rt, "A after delete", tokA)
	assertDead(t, rt, "B2 after delete", tokB2)
	if _, err := rt.Thread(ctx, "T"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
		t.Fatalf("Thread after delete = %v, want ErrUnknownThread", err)
	}
}

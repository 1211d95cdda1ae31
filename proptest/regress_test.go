package proptest

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// Plain regression tests for the minimal cases the machines found. Each is
// named for what broke.

func newRegressRuntime(t *testing.T) (*mcpruntime.Runtime, *fakeClock) {
	t.Helper()
	clock := &fakeClock{now: testStart}
	rt, err := mcpruntime.New(mcpruntime.Config{
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
	return rt, clock
}

// TestFailedOpenKeepsPairCredential: a live credential of (T, I) that no
// provider session holds (here: just rotated) must survive an open of
// (T, I) whose driver fails — SPEC §3 "open fails: revoke the credential
// only if this open minted it" — and the failed open must not choose T's
// current instance ("set ... by the first provider session opened on it").
// The runtime as first committed (2b0c029) revoked the old credential
// ("replaced") and chose the current instance before the driver was asked,
// so a failed open left the pair with no live credential; it also answered
// a failed open only after the open timeout, because the failed session
// actor stopped itself before its failure reached the instance actor.
func TestFailedOpenKeepsPairCredential(t *testing.T) {
	ctx := context.Background()
	rt, _ := newRegressRuntime(t)
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

	rt.Inproc().FailNextOpen("a", errInjected)
	if _, err := rt.OpenProviderSession(ctx, "T", "a"); !errors.Is(err, errInjected) {
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
	rt, clock := newRegressRuntime(t)
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
	sessions := rt.Inproc().Sessions("a")
	if len(sessions) != 1 {
		t.Fatalf("driver sessions of a: %d, want 1", len(sessions))
	}
	if got := sessions[0].Authorizations(); len(got) != 2 || got[1] != again.Authorization {
		t.Fatalf("driver session %s got Authorizations %q, want the first and then %q", sessions[0].ID, got, again.Authorization)
	}
}

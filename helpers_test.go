package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/memdb"
)

// fakeClock is a Config.Now that moves only when a test advances it: the
// one fake clock of the tests (actortest's).
type fakeClock = actortest.Clock

func newFakeClock() *fakeClock {
	return actortest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// quietRuntime is newRuntime with the runtime's logs discarded.
func quietRuntime(t *testing.T, cfg mcpruntime.Config) *mcpruntime.Runtime {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return newRuntime(t, cfg)
}

// registerInproc registers in-process provider instances.
func registerInproc(t *testing.T, rt *mcpruntime.Runtime, ids ...string) {
	t.Helper()
	for _, id := range ids {
		noErr(t, rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{Driver: provider.InprocKind}))
	}
}

// registerMulti registers an in-process instance whose one session serves
// every thread.
func registerMulti(t *testing.T, rt *mcpruntime.Runtime, id string) {
	t.Helper()
	noErr(t, rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{
		Driver: provider.InprocKind, Config: json.RawMessage(`{"multiThread":true}`),
	}))
}

func createThreads(t *testing.T, rt *mcpruntime.Runtime, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{})
		noErr(t, err)
	}
}

// openMinted opens a provider session for (thread, instance), requires that
// it minted a credential, and returns the session and its raw token.
func openMinted(t *testing.T, rt *mcpruntime.Runtime, thread, instance string) (mcpruntime.ProviderSession, string) {
	t.Helper()
	ps, err := rt.OpenProviderSession(context.Background(), thread, instance)
	if err != nil {
		t.Fatalf("OpenProviderSession(%s, %s) = %v", thread, instance, err)
	}
	if ps.Reused || ps.Authorization == "" {
		t.Fatalf("OpenProviderSession(%s, %s) = %+v, want a minted credential", thread, instance, ps)
	}
	return ps, bearer(t, ps.Authorization)
}

// authReason returns "" when tok authenticates, else the AuthError reason.
func authReason(t *testing.T, rt *mcpruntime.Runtime, tok string) string {
	t.Helper()
	_, err := rt.Authenticate(tok)
	if err == nil {
		return ""
	}
	var ae *mcpruntime.AuthError
	if !errors.As(err, &ae) || !errors.Is(err, mcpruntime.ErrUnauthenticated) {
		t.Fatalf("Authenticate = %v (%T), want an *AuthError matching ErrUnauthenticated", err, err)
	}
	return ae.Reason
}

func assertReason(t *testing.T, rt *mcpruntime.Runtime, what, tok, want string) {
	t.Helper()
	if got := authReason(t, rt, tok); got != want {
		t.Fatalf("%s: Authenticate reason = %q, want %q", what, got, want)
	}
}

// waitUntil polls cond until it holds, for at most hangAfter: for asynchronous
// effects such as a driver reporting a session's death.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, hangAfter)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitDead(t *testing.T, rt *mcpruntime.Runtime, what, tok string) {
	t.Helper()
	waitUntil(t, what+": token revoked", func() bool {
		_, err := rt.Authenticate(tok)
		return errors.Is(err, mcpruntime.ErrUnauthenticated)
	})
}

// liveCredentials returns the ids of the live credentials of (thread,
// instance) at the runtime's current time; instance "" means all instances.
func liveCredentials(t *testing.T, rt *mcpruntime.Runtime, now time.Time, thread, instance string) []string {
	t.Helper()
	var out []string
	for _, c := range rt.Credentials(thread) {
		live := c.State == memdb.StateLive && (c.Expires.IsZero() || now.Before(c.Expires))
		if live && (instance == "" || c.Instance == instance) {
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out
}

// credentialOf returns the credential id of thread (the runtime's view).
func credentialOf(t *testing.T, rt *mcpruntime.Runtime, thread, id string) mcpruntime.CredentialInfo {
	t.Helper()
	for _, c := range rt.Credentials(thread) {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("thread %s has no credential %s", thread, id)
	return mcpruntime.CredentialInfo{}
}

func threadOf(t *testing.T, rt *mcpruntime.Runtime, id string) mcpruntime.Thread {
	t.Helper()
	th, err := rt.Thread(context.Background(), id)
	if err != nil {
		t.Fatalf("Thread(%s) = %v", id, err)
	}
	return th
}

// newRuntime starts a runtime closed when the test ends. Unless cfg names
// a driver "inproc" of its own, the in-process driver is the test double
// (providertest.Inproc), which inprocOf returns.
func newRuntime(t *testing.T, cfg mcpruntime.Config) *mcpruntime.Runtime {
	t.Helper()
	in := &providertest.Inproc{}
	if _, ok := cfg.Drivers[provider.InprocKind]; !ok {
		cfg.Drivers = maps.Clone(cfg.Drivers)
		if cfg.Drivers == nil {
			cfg.Drivers = map[string]provider.Factory{}
		}
		cfg.Drivers[provider.InprocKind] = in.Factory()
	}
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	inprocs.Store(rt, in)
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		inprocs.Delete(rt)
	})
	return rt
}

// inprocs holds the in-process driver of each runtime newRuntime started.
var inprocs sync.Map // *mcpruntime.Runtime → *providertest.Inproc

// inprocOf returns the in-process driver of rt, a runtime newRuntime
// started: what its sessions were given, and the knobs that make them fail.
func inprocOf(rt *mcpruntime.Runtime) *providertest.Inproc {
	in, _ := inprocs.Load(rt)
	return in.(*providertest.Inproc)
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func bearer(t *testing.T, authz string) string {
	t.Helper()
	const p = "Bearer "
	if len(authz) <= len(p) || authz[:len(p)] != p {
		t.Fatalf("Authorization %q is not a bearer value", authz)
	}
	return authz[len(p):]
}

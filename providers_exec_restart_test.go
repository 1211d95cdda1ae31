package mcpruntime_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/agenthost/mcpruntime"
)

// TestExecProviderSwitchStoryAcrossRestart is the provider-switch story
// on a state file, told across a restart (SPEC §3.8): A and B run on
// thread T as real agent processes, B owns a run and posts; the runtime
// closes and a new one starts on the file. The thread is there with B's
// message and B as its instance, both old credentials are dead, and no run
// is active; A → B → A then goes as on a fresh runtime — each open mints
// its own credential for a new process, switching back reuses, a mutation
// needs the caller's instance to own the active run, releasing one revokes
// only its own, and deleting the thread revokes both.
func TestExecProviderSwitchStoryAcrossRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	dirA, dirB := t.TempDir(), t.TempDir()

	e := newExecEnv(t, mcpruntime.Config{StateFile: path})
	e.registerAgent("agent-a", dirA)
	e.registerAgent("agent-b", dirB)
	createThreads(t, e.rt, "T")
	a, tokA := openMinted(t, e.rt, "T", "agent-a")
	pidA := e.pid(a.ID)
	_, err := e.rt.SwitchProvider(ctx, "T", "agent-b")
	noErr(t, err)
	b, tokB := openMinted(t, e.rt, "T", "agent-b")
	pidB := e.pid(b.ID)
	e.waitCalls("before the restart", map[string]string{a.ID: "agent-a", b.ID: "agent-b"})
	_, err = e.rt.StartRun(ctx, "T", "agent-b")
	noErr(t, err)
	_, err = e.rt.Post(ctx, assertLive(t, e.rt, "B before the restart", tokB), "T", "from B, before")
	noErr(t, err)
	noErr(t, e.rt.Close())
	wantReaped(t, "A after Close", pidA)
	wantReaped(t, "B after Close", pidB)

	// The next process, on the same file. The host registers its instances
	// again, as it does at every start: the same spec is no error.
	e = newExecEnv(t, mcpruntime.Config{StateFile: path})
	e.registerAgent("agent-a", dirA)
	e.registerAgent("agent-b", dirB)
	th, err := e.rt.Thread(ctx, "T")
	noErr(t, err)
	if th.Instance != "agent-b" || th.Run != nil || len(th.Messages) != 1 || th.Messages[0].Text != "from B, before" {
		t.Fatalf("T after the restart = instance %q, run %+v, messages %+v; want agent-b, no run, B's one message", th.Instance, th.Run, th.Messages)
	}
	assertDead(t, e.rt, "A's credential of before the restart", tokA)
	assertDead(t, e.rt, "B's credential of before the restart", tokB)

	// B again: a new session, credential and process.
	b2, tokB2 := openMinted(t, e.rt, "T", "agent-b")
	if b2.ID == b.ID || b2.CredentialID == b.CredentialID {
		t.Fatalf("B after the restart = %+v, want a new session and credential (old %s / %s)", b2, b.ID, b.CredentialID)
	}
	pB := assertLive(t, e.rt, "B after the restart", tokB2)
	if _, err := e.rt.Post(ctx, pB, "T", "no run"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("B posts with no active run: %v, want ErrNotLive", err)
	}
	runB, err := e.rt.StartRun(ctx, "T", "agent-b")
	noErr(t, err)

	// Switch to A and open it: A's own credential, which cannot mutate
	// while B owns the run.
	noErr(t, e.rt.EndRun(ctx, "T", runB))
	_, err = e.rt.SwitchProvider(ctx, "T", "agent-a")
	noErr(t, err)
	a2, tokA2 := openMinted(t, e.rt, "T", "agent-a")
	if a2.CredentialID == b2.CredentialID || a2.CredentialID == a.CredentialID {
		t.Fatalf("A after the restart = %+v shares a credential with B %s or old A %s", a2, b2.CredentialID, a.CredentialID)
	}
	e.waitCalls("A and B after the restart", map[string]string{a2.ID: "agent-a", b2.ID: "agent-b"})
	pA := assertLive(t, e.rt, "A after the restart", tokA2)
	runA, err := e.rt.StartRun(ctx, "T", "agent-a")
	noErr(t, err)
	if _, err := e.rt.Post(ctx, pB, "T", "not B's run"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("B posts while A owns the run: %v, want ErrNotLive", err)
	}
	_, err = e.rt.Post(ctx, pA, "T", "from A, after")
	noErr(t, err)

	// Back to B: reused, no new process; A keeps its credential.
	noErr(t, e.rt.EndRun(ctx, "T", runA))
	_, err = e.rt.SwitchProvider(ctx, "T", "agent-b")
	noErr(t, err)
	b3, err := e.rt.OpenProviderSession(ctx, "T", "agent-b")
	noErr(t, err)
	if b3.ID != b2.ID || !b3.Reused {
		t.Fatalf("re-open of B = %+v, want session %s reused", b3, b2.ID)
	}
	assertLive(t, e.rt, "A after switching back to B", tokA2)

	// Release A: only A's credential is revoked; delete: both.
	noErr(t, e.rt.ReleaseProviderSession(ctx, a2.ID))
	assertDead(t, e.rt, "A after its release", tokA2)
	assertLive(t, e.rt, "B after A's release", tokB2)
	noErr(t, e.rt.DeleteThread(ctx, "T"))
	assertDead(t, e.rt, "B after the delete", tokB2)
}

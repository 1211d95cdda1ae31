package cluster

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agenthost/mcpruntime"
)

// TestRuntimeCreateOnLaggingNodeIsThreadExists: creating a thread another
// node created first, on a node whose replica has not applied that create
// yet, is ErrThreadExists, as on a node that has. The machine found it
// with two nodes creating one id at once: the loser's write is refused
// (the row exists in etcd), but its replica had not applied the winner's
// row, so it answered ErrUnknownThread. Here the loser's applier is
// stalled, which makes the lag certain.
func TestRuntimeCreateOnLaggingNodeIsThreadExists(t *testing.T) {
	nodes := startMachineNodes(t, startEtcd(t), 2, machineFence, func() int { return -1 })
	ctx := context.Background()
	nodes[1].rep.StallApplier()
	defer nodes[1].rep.Resume()
	if _, err := nodes[0].rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatalf("CreateThread(t1) on n1: %v", err)
	}
	if _, err := nodes[1].rt.Thread(ctx, "t1"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
		t.Fatalf("Thread(t1) on the stalled n2 = %v, want ErrUnknownThread (not applied)", err)
	}
	if _, err := nodes[1].rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); !errors.Is(err, mcpruntime.ErrThreadExists) {
		t.Fatalf("CreateThread(t1) on n2, behind n1's create = %v, want ErrThreadExists", err)
	}
	if got := nodes[1].rt.Stats().Threads; got != 0 {
		t.Fatalf("n2 holds %d thread actors after losing the create, want 0", got)
	}
}

// TestRuntimePostOnLaggingHomeChecksTheCallerInEtcd: a post is checked
// against the caller's own thread, which another node writes; on a home
// whose replica is behind that write, the check may pass on its stale
// copy, but the commit is conditioned on the row's revision, so the post
// is refused and writes nothing (SPEC §4.4 across nodes). Here the
// caller's run ended on its home (a thread write that waits for no other
// node) while the target's home's applier was stalled. The machine found
// the case as a cross-home post refused as stale; that the refusal is an
// ErrInternal (memdb.ErrStale inside), not a retry, is reported, not
// settled here.
func TestRuntimePostOnLaggingHomeChecksTheCallerInEtcd(t *testing.T) {
	nodes := startMachineNodes(t, startEtcd(t), 2, machineFence, func() int { return -1 })
	ctx := context.Background()
	target, callerHome := nodes[0], nodes[1]
	if _, err := target.rt.CreateThread(ctx, "t2", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := callerHome.rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, err := callerHome.rt.OpenProviderSession(ctx, "t1", "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := callerHome.rt.StartRun(ctx, "t1", "a"); err != nil {
		t.Fatal(err)
	}
	caller, err := target.rt.Authenticate(strings.TrimPrefix(ps.Authorization, "Bearer "))
	if err != nil {
		t.Fatalf("Authenticate on n1: %v", err)
	}
	target.rep.StallApplier()
	if err := callerHome.rt.EndRun(ctx, "t1", ""); err != nil {
		t.Fatalf("EndRun(t1) on n2: %v", err)
	}
	if th, err := target.rt.Thread(ctx, "t1"); err != nil || th.Run == nil {
		t.Fatalf("t1 on the stalled n1 = %+v, %v; want its stale copy, run still active", th, err)
	}
	if msg, err := target.rt.Post(ctx, caller, "t2", "after the run ended"); err == nil {
		t.Fatalf("Post(t2) on n1 by t1's caller after t1's run ended on n2 = %+v, want refused", msg)
	}
	target.rep.Resume()
	waitFor(t, "n1 serving again", target.rep.Serving)
	th, err := callerHome.rt.Thread(ctx, "t2")
	if err != nil || len(th.Messages) != 0 {
		t.Fatalf("t2 on n2 = %+v, %v; want no message", th, err)
	}
}

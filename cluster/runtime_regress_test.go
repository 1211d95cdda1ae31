package cluster

import (
	"context"
	"errors"
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

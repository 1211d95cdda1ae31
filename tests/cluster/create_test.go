package cluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/agenthost/mcpruntime"
)

// TestRuntimeConcurrentCreateOneWins: the same thread created on two
// nodes at once is created once; the other node's CreateThread answers
// ErrThreadExists (as when it comes second), never another error. Seen
// first across processes: two `runtime serve --etcd --demo` starting
// together, the loser's write conflicting ("a row changed since it was
// read") and CreateThread answering ErrUnknownThread.
func TestRuntimeConcurrentCreateOneWins(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{})
	ctx := context.Background()
	for i := range 20 {
		id := fmt.Sprintf("t%d", i)
		errs := make([]error, len(nodes))
		var wg sync.WaitGroup
		for j, n := range nodes {
			wg.Go(func() { _, errs[j] = n.rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}) })
		}
		wg.Wait()
		created := 0
		for j, err := range errs {
			switch {
			case err == nil:
				created++
			case !errors.Is(err, mcpruntime.ErrThreadExists):
				t.Fatalf("CreateThread(%s) on %s: %v, want nil or ErrThreadExists", id, nodes[j].id, err)
			}
		}
		if created != 1 {
			t.Fatalf("CreateThread(%s) on both nodes at once: created on %d, want 1 (errors %v)", id, created, errs)
		}
	}
}

package cluster

import (
	"slices"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/replica"
)

// BenchmarkRevoke measures Revoke on three nodes with the default fence
// (F = 500 ms): all healthy, and with one node paused, for which every
// revoke waits out the bound F(1+ρ)+margin (the node is paused afresh for
// each revoke, and resumed and serving again between them). It reports the
// median and the maximum besides ns/op; `make cluster-bench` runs it. No
// threshold is asserted.
func BenchmarkRevoke(b *testing.B) {
	endpoint := startEtcd(b)
	for _, bc := range []struct {
		name  string
		pause bool
	}{{"healthy", false}, {"one-paused", true}} {
		b.Run(bc.name, func(b *testing.B) {
			c := startCluster(b, endpoint, 3, replica.Config{})
			defer c.stop()
			waitServing(b, c.nodes...)
			ids := make([]string, b.N)
			var last int64
			for i := range ids {
				row, _, rev := mint(b, c.nodes[0], "bench")
				ids[i], last = row.ID, rev
			}
			for _, n := range c.nodes {
				waitFor(b, n.ID()+" applied the mints", func() bool { return n.Applied() >= last })
			}
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for _, id := range ids {
				// A node paused past its lease TTL is no longer listed, and
				// nobody waits for it: pause it afresh for each revoke.
				if bc.pause {
					b.StopTimer()
					c.nodes[2].Pause()
					b.StartTimer()
				}
				start := time.Now()
				res := revoke(b, c.nodes[0], id)
				took = append(took, time.Since(start))
				if bc.pause != (len(res.Waited) == 1) {
					b.Fatalf("revoke %s: %+v", id, res)
				}
				if bc.pause {
					b.StopTimer()
					c.nodes[2].Resume()
					waitServing(b, c.nodes[2])
					b.StartTimer()
				}
			}
			b.StopTimer()
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)-1].Microseconds())/1000, "max-ms")
		})
	}
}

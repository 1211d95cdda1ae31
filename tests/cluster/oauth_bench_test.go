package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// BenchmarkClusterOAuth measures OAuth on three runtime nodes in this
// process on one embedded etcd (SPEC §5d.9), one request at a time:
// a refresh through the grant's home and through another node (which
// sends it to the home), and a whole sign-in whose page, form and code
// exchange are on three different nodes (consent page, pairing code,
// form, exchange). It reports the p50 and p99 latency; `make
// cluster-bench` runs it. No threshold is asserted. A grant is refreshed
// at most 30 times, then another signs in (untimed): every refresh leaves
// one more live access token, and a grant's write on several nodes
// compares each of its rows in one etcd transaction, whose operations
// etcd bounds (128 by default).
func BenchmarkClusterOAuth(b *testing.B) {
	nodes := startRuntimes(b, startEtcd(b), 3, withOAuth(mcpruntime.Config{Logger: quiet}))
	base := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(b, base(0), "bench")
	report := func(b *testing.B, took []time.Duration) {
		slices.Sort(took)
		b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
	}
	for _, bc := range []struct {
		name string
		via  int
	}{{"refresh-home", 0}, {"refresh-forwarded", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			signIn := func() oauthTokens {
				return signInAt(b, client, base(0), base(0), base(0), pairingCode(b, nodes[0].rt, memdb.AccessReadOnly), "bench")
			}
			toks := signIn()
			took := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for i := range b.N {
				if i%30 == 29 {
					b.StopTimer()
					toks = signIn()
					b.StartTimer()
				}
				t0 := time.Now()
				next, err := tokensOf(redeemRefresh(base(bc.via), client, toks.refresh))
				if err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(t0))
				toks = next
			}
			b.StopTimer()
			report(b, took)
		})
	}
	b.Run("sign-in-across-nodes", func(b *testing.B) {
		took := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := range b.N {
			t0 := time.Now()
			signInAt(b, client, base(0), base(1), base(2), pairingCode(b, nodes[2].rt, memdb.AccessReadOnly), fmt.Sprintf("s%d", i))
			took = append(took, time.Since(t0))
		}
		b.StopTimer()
		report(b, took)
	})
}

package cluster

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// defaultChecks is how many cases the rapid property runs when neither
// -rapid.checks nor RAPID_CHECKS says otherwise: each case starts three
// nodes and a paused node makes every revoke wait the fence bound, so
// rapid's own default (100) would take minutes. Hunt with more, e.g.
// -rapid.checks=200.
const defaultChecks = "12"

// TestMain sets the default check count, and fails the package if any
// goroutine outlives its tests: every node, client and etcd a test starts
// must be closed.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !explicit && !env {
		if err := flag.Set("rapid.checks", defaultChecks); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

package proptest

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/durable"
)

// defaultChecks is how many cases each rapid property runs when neither
// -rapid.checks nor RAPID_CHECKS says otherwise: rapid's own default (100)
// is a thin search, and this many keeps `go test -race ./proptest/` around
// 20 s on two cores. Hunt with more, e.g. -rapid.checks=1000.
const defaultChecks = "300"

// TestMain sets the default check count, and fails the package if any
// goroutine outlives its tests — every runtime an iteration starts must be
// closed, and Close must leave nothing behind — or if any write of the
// durable machines was synced inside an actor's Receive (SPEC §5d.7).
func TestMain(m *testing.M) {
	var inActor actortest.InActor
	durable.TestHookCommit = inActor.Hook
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "rapid.checks" })
	if _, env := os.LookupEnv("RAPID_CHECKS"); !explicit && !env {
		if err := flag.Set("rapid.checks", defaultChecks); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(inActor.Main(m))
}

package cluster

import (
	"flag"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/replica"
)

// defaultChecks is how many cases the rapid property runs when neither
// -rapid.checks nor RAPID_CHECKS says otherwise: each case starts three
// nodes and a paused node makes every revoke wait the fence bound, so
// rapid's own default (100) would take minutes. Hunt with more, e.g.
// -rapid.checks=200.
const defaultChecks = "12"

// TestMain sets the default check count, fails the package if any
// goroutine outlives its tests — every node, client and etcd a test starts
// must be closed — and fails it if any commit to etcd ran inside an actor's
// Receive (SPEC §5d.7: an actor's write is committed off the actor).
func TestMain(m *testing.M) {
	replica.TestHookCommit = inActor.Hook
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

// inActor notes a commit to etcd made inside an actor's Receive.
var inActor actortest.InActor

// commitInActor is the stack of the first commit made in an actor, or "".
func commitInActor() string { return inActor.Stack() }

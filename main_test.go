package mcpruntime_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/durable"
)

// TestMain fails the package if any goroutine outlives its tests — every
// Runtime a test starts must be closed, and Close must leave nothing
// behind — or if any write to a state file was synced inside an actor's
// Receive (SPEC §3.8, §5d.7: an actor's write commits off the actor).
func TestMain(m *testing.M) {
	var inActor actortest.InActor
	durable.TestHookCommit = inActor.Hook
	goleak.VerifyTestMain(inActor.Main(m))
}

package mcpruntime_test

import (
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestProcessRegistryResized: a runtime's actor system has the small
// registry (protoactor's default of 32 768 maps costs an idle session
// 425 B at 10 000 sessions), and the processes the system registered before the
// resize are still found in it.
func TestProcessRegistryResized(t *testing.T) {
	rt, err := mcpruntime.New(mcpruntime.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	if got, want := mcpruntime.RegistryBuckets(rt), mcpruntime.RegistryBucketsWanted; got != want {
		t.Errorf("registry buckets = %d, want %d", got, want)
	}
	for _, name := range []string{"eventstream", "deadletter"} {
		if !mcpruntime.Registered(rt, name) {
			t.Errorf("process %q not in the resized registry", name)
		}
	}
}

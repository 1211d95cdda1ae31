package mcpruntime_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: every
// Runtime a test starts must be closed, and Close must leave nothing behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

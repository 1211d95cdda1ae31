package transport_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: every
// runtime and endpoint a test starts must be closed, and every stream and
// watcher must end with its session.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

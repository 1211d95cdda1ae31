package admin_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any goroutine outlives its tests: every
// runtime, endpoint and test server a test starts must be closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

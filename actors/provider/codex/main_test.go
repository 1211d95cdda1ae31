package codex_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// session's reader and watcher must be gone once its app-server is.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

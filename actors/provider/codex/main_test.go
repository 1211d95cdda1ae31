package codex_test

import (
	"testing"

	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
)

// TestMain fails the package if a test leaves a goroutine behind (every
// session's reader and watcher must be gone once its app-server is) or an
// app-server of its own running: every CODEX_HOME is under the run's
// directory.
func TestMain(m *testing.M) {
	drivertest.Main(m, drivertest.Agents{Kind: "codex", Name: "app-servers", HomeVar: "CODEX_HOME"})
}

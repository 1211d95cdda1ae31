package claude_test

import (
	"testing"

	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
)

// TestMain fails the package if a test leaves a goroutine behind (every
// session's reader and watcher must be gone once its process is) or a
// Claude Code of its own running: every CLAUDE_CONFIG_DIR is under the
// run's directory.
func TestMain(m *testing.M) {
	drivertest.Main(m, drivertest.Agents{Kind: "claude", Name: "claude processes", HomeVar: "CLAUDE_CONFIG_DIR"})
}

package cluster

import (
	"net/http"
	"testing"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/clienttest"
)

// TestRuntimeForwardsToTheHome: a 2026-07-28 request with a token whose
// thread lives on n1, sent to n2's MCP endpoint, is forwarded to n1 over
// the internal listener (which requires the cluster secret) and answered
// 200 as n1 would, not refused by n1's internal listener.
func TestRuntimeForwardsToTheHome(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{})
	_, tok := mintOn(t, nodes[0], "t1", "codex")
	for _, n := range nodes {
		status, body, err := clienttest.PostModern(n.mcpURL, tok, "tools/list", "", nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("tools/list on %s of a token of n1's thread: %d %s (%v), want 200", n.id, status, body, err)
		}
	}
}

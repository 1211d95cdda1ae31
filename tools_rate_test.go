package mcpruntime_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestToolRatePerNamespace (SPEC §4.6): a tool's RatePerNamespace is a
// bucket per principal: one that spent it is refused rate_limited, with
// the seconds until the next call fits, while another principal is served;
// the bucket refills at the rate; other tools are not limited by it.
func TestToolRatePerNamespace(t *testing.T) {
	clock := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clock.Now})
	calls := 0
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool: mcp.Tool{Name: "deploy"}, Access: mcpruntime.AccessAct, RatePerNamespace: 0.5, BurstPerNamespace: 2,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			calls++
			return textResult("deployed", nil), nil
		},
	}))
	a, b := clientOf(t, rt, memdb.AccessReadOnly), clientOf(t, rt, memdb.AccessReadOnly)
	for range 2 {
		wantRefusal(t, "a call within the burst", toolsCall(t, rt, a, "deploy", `{}`), "")
	}
	res := toolsCall(t, rt, a, "deploy", `{}`)
	wantRefusal(t, "a third call", res, mcpruntime.CodeRateLimited)
	if got := toolsStructured(t, "rate_limited", res)["retryAfter"]; got != float64(2) {
		t.Errorf("retryAfter = %v, want 2 (one call every 2 s)", got)
	}
	wantRefusal(t, "another principal", toolsCall(t, rt, b, "deploy", `{}`), "")
	wantRefusal(t, "another tool", toolsCall(t, rt, a, "runtime_capabilities", `{}`), "")
	clock.Advance(2 * time.Second)
	wantRefusal(t, "a call once the bucket refilled one", toolsCall(t, rt, a, "deploy", `{}`), "")
	wantRefusal(t, "and only one", toolsCall(t, rt, a, "deploy", `{}`), mcpruntime.CodeRateLimited)
	if calls != 4 {
		t.Errorf("the handler ran %d times, want 4: a refused call never reaches it", calls)
	}
}

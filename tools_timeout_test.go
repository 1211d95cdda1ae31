package mcpruntime_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestToolTimeout (SPEC §4.6): a tool's Timeout, or Config.ToolTimeout
// when it has none, cancels its handler's ctx; a handler that then fails
// answers the isError result "timeout"; one that still returns a result
// has it answered; a negative Timeout has no bound; the caller's own
// cancellation is still a cancellation, not a timeout. It runs in a
// synctest bubble: the bounds, and the test's own, are timers on the
// bubble's clock, which moves only once everything waits, so a 20 ms
// bound comes before the test's 10 s one in every run, however busy the
// machine, and a bound that never comes is the 10 s one firing.
func TestToolTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		drainDeadLetterThrottle(t)
		ctx := context.Background()
		rt := quietRuntime(t, mcpruntime.Config{ToolTimeout: time.Hour})
		p := clientOf(t, rt, memdb.AccessReadOnly)
		// stop ends the handlers that wait once the test is over, so a
		// bound that never comes fails the test instead of hanging it.
		stop := make(chan struct{})
		waits := func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-stop:
				return nil, errors.New("never cancelled")
			}
		}
		deadlines := map[string]time.Duration{}
		seeDeadline := func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			deadlines[call.Name] = -1
			if dl, ok := ctx.Deadline(); ok {
				deadlines[call.Name] = time.Until(dl)
			}
			return textResult("ok", nil), nil
		}
		for _, tl := range []mcpruntime.Tool{
			{Tool: mcp.Tool{Name: "waits"}, Access: mcpruntime.AccessRead, Timeout: 20 * time.Millisecond, Handler: waits},
			{Tool: mcp.Tool{Name: "late_result"}, Access: mcpruntime.AccessRead, Timeout: 20 * time.Millisecond,
				Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
					select {
					case <-ctx.Done():
						return textResult("finished anyway", nil), nil
					case <-stop:
						return nil, errors.New("never cancelled")
					}
				}},
			{Tool: mcp.Tool{Name: "default_bound"}, Access: mcpruntime.AccessRead, Handler: seeDeadline},
			{Tool: mcp.Tool{Name: "own_bound"}, Access: mcpruntime.AccessRead, Timeout: time.Minute, Handler: seeDeadline},
			{Tool: mcp.Tool{Name: "unbounded"}, Access: mcpruntime.AccessRead, Timeout: -1, Handler: seeDeadline},
			{Tool: mcp.Tool{Name: "waits_unbounded"}, Access: mcpruntime.AccessRead, Timeout: -1, Handler: waits},
		} {
			noErr(t, rt.RegisterTool(tl))
		}
		// A bound that never comes: stop ends the waits 10 s on, and the
		// calls then fail as "never cancelled".
		hang := time.AfterFunc(10*time.Second, func() { close(stop) })
		defer hang.Stop()
		wantRefusal(t, "waits", toolsCall(t, rt, p, "waits", `{}`), mcpruntime.CodeTimeout)
		if res := toolsCall(t, rt, p, "late_result", `{}`); res.IsError || resultText(res) != "finished anyway" {
			t.Errorf("late_result = %+v, want its own result", res)
		}
		for _, name := range []string{"default_bound", "own_bound", "unbounded"} {
			wantRefusal(t, name, toolsCall(t, rt, p, name, `{}`), "")
		}
		if d := deadlines["default_bound"]; d <= time.Minute || d > time.Hour {
			t.Errorf("default_bound's deadline in %v, want Config.ToolTimeout's hour", d)
		}
		if d := deadlines["own_bound"]; d <= 0 || d > time.Minute {
			t.Errorf("own_bound's deadline in %v, want its own minute", d)
		}
		if d := deadlines["unbounded"]; d != -1 {
			t.Errorf("unbounded's handler has a deadline in %v", d)
		}
		cctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(10*time.Millisecond, cancel)
		if res, err := rt.CallTool(cctx, p, "waits_unbounded", nil, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("a cancelled call = %+v, %v; want context.Canceled", res, err)
		}
	})
}

package mcpruntime_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestInteropGoSDKModern: the official go-sdk v1.8.0 client, with its
// default version (2026-07-28) and pinned to it, speaks the stateless era
// end to end (SPEC §5a): server/discover instead of initialize (no
// session is created), tools/list, a tools/call, a tool that asks the
// client (input_required, answered by the client's elicitation handler and
// retried with the sealed requestState), and a tool-list change delivered
// on its subscriptions/listen stream. v1.8.0 cannot be pinned strictly: on
// a discover error that is not a 2026 one it falls back to initialize, so
// Sessions() staying 0 is what proves it did not.
func TestInteropGoSDKModern(t *testing.T) {
	for _, version := range []string{"", "2026-07-28"} {
		t.Run("version="+version, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			_, _, tok := liveOn(t, rt, "T", "A")
			noErr(t, registerDeleteBranch(rt))
			ts, srv := interopServer(t, rt)

			changed := make(chan struct{}, 8)
			asked := 0
			cs := sdkConnectVersion(t, ts, tok, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked++
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"ok": true}}, nil
				},
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
					changed <- struct{}{}
				},
			}, version)
			t.Cleanup(func() { cs.Close() })
			if got := cs.InitializeResult().ProtocolVersion; got != "" && got != "2026-07-28" {
				t.Errorf("protocol version = %q, want 2026-07-28", got)
			}
			if n := srv.Sessions(); n != 0 || cs.ID() != "" {
				t.Fatalf("Sessions() = %d, id %q after connect: the client fell back to a session", n, cs.ID())
			}

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			list, err := cs.ListTools(ctx, nil)
			if err != nil {
				t.Fatalf("ListTools: %v", err)
			}
			if !slices.ContainsFunc(list.Tools, func(tl *mcp.Tool) bool { return tl.Name == "delete_branch" }) {
				t.Fatalf("ListTools = %+v, want delete_branch", list.Tools)
			}
			res := sdkCall(t, cs, &mcp.CallToolParams{Name: "runtime_capabilities"})
			if res.IsError || sdkStructured(t, "runtime_capabilities", res)["threadId"] != "T" {
				t.Fatalf("runtime_capabilities = %+v, want thread T", res)
			}
			res = sdkCall(t, cs, &mcp.CallToolParams{Name: "delete_branch", Arguments: map[string]any{"branch": "main"}})
			if got := sdkText(res); got != "deleted main" || asked != 1 {
				t.Fatalf("delete_branch = %q after %d asks, want deleted main after 1", got, asked)
			}

			noErr(t, rt.RegisterTool(mcpruntime.Tool{
				Tool: mcp.Tool{Name: "host_new", Description: "new"}, Access: mcpruntime.AccessRead,
				Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) { return nil, nil },
			}))
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatal("no notifications/tools/list_changed on the listen stream")
			}
			if n := srv.Sessions(); n != 0 {
				t.Fatalf("Sessions() = %d at the end, want 0", n)
			}
		})
	}
}

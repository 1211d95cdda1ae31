package mcpruntime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// TestTypedInputs (SPEC §5b.6): Elicitation, Sampling and Roots answer
// each kind as its own type; Sampling answers one shape whichever shape
// the client's answer came in (a 2025 session's single block, a
// 2026-07-28 client's list), and none for an answer of another kind.
func TestTypedInputs(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "typed"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			var out string
			if s, ok := call.Sampling("k"); ok {
				out += fmt.Sprintf("sampling model=%s role=%s blocks=%d", s.Model, s.Role, len(s.Content))
				for _, c := range s.Content {
					if tc, ok := c.(*mcp.TextContent); ok {
						out += " text=" + tc.Text
					}
				}
			}
			if e, ok := call.Elicitation("k"); ok {
				out += "elicitation " + e.Action
			}
			if r, ok := call.Roots("k"); ok {
				out += fmt.Sprintf("roots %d", len(r.Roots))
			}
			if out == "" {
				out = "none"
			}
			return textResult(out, nil), nil
		}}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	for _, tc := range []struct {
		name   string
		era    transport.Era
		answer mcp.InputResponse
		want   string
	}{
		{"2025 sampling, one block", transport.EraSession, &mcp.CreateMessageResult{Model: "m", Role: "assistant", Content: &mcp.TextContent{Text: "hi"}}, "sampling model=m role=assistant blocks=1 text=hi"},
		{"2026 sampling, a list", transport.EraModern, &mcp.CreateMessageWithToolsResult{Model: "m", Role: "assistant", Content: []mcp.Content{&mcp.TextContent{Text: "hi"}}}, "sampling model=m role=assistant blocks=1 text=hi"},
		{"elicitation", transport.EraSession, &mcp.ElicitResult{Action: "accept"}, "elicitation accept"},
		{"roots", transport.EraModern, &mcp.ListRootsResult{Roots: []*mcp.Root{{URI: "file:///a"}}}, "roots 1"},
	} {
		res := serve(t, b, serveReq{caller: p, era: tc.era, method: "tools/call", params: `{"name":"typed","arguments":{}}`,
			inputs: mcp.InputResponseMap{"k": tc.answer}})
		if got := resultText(res.Result.(*mcp.CallToolResult)); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	res := serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"typed","arguments":{}}`})
	if got := resultText(res.Result.(*mcp.CallToolResult)); got != "none" {
		t.Errorf("a first round: %q, want none", got)
	}
}

package mcpruntime

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/mcphttp"
)

// The backend's methods for the endpoint as it is until the issue 13
// transport lands (mcphttp.LegacyBackend): tools only, a result of one text
// block. They go with that transport. TODO(issue 13 merge): remove.

var _ mcphttp.LegacyBackend = (*mcpBackend)(nil)

func (b *mcpBackend) Tools() []mcphttp.ToolDescriptor {
	tools := b.r.Tools()
	out := make([]mcphttp.ToolDescriptor, len(tools))
	for i, t := range tools {
		out[i] = mcphttp.ToolDescriptor{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}

func (b *mcpBackend) CallTool(ctx context.Context, p Principal, name string, args json.RawMessage, progress mcphttp.ProgressFunc) (*mcphttp.ToolResult, error) {
	res, err := b.r.CallTool(ctx, p, name, args, progress)
	if err != nil {
		return nil, err
	}
	return legacyResult(res), nil
}

// legacyResult is what the old transport can say of a result: its first
// text block, its structured content, whether it failed.
func legacyResult(res *mcp.CallToolResult) *mcphttp.ToolResult {
	return &mcphttp.ToolResult{Text: textOf(res), StructuredContent: res.StructuredContent, IsError: res.IsError}
}

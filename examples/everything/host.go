package main

import (
	"context"
	"errors"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime"
)

// reportIn and reportOut are the report tool's input and its structured
// result, whose schema is listed as the tool's outputSchema.
type (
	reportIn struct {
		Text string `json:"text" jsonschema:"the text to count"`
	}
	reportOut struct {
		Words int    `json:"words" jsonschema:"how many words the text has"`
		First string `json:"first" jsonschema:"its first word"`
	}
)

// registerHostTools registers two tools beside the suite's fixtures, as an
// embedder's own tools look to a client (the client matrix, SPEC §5b.24):
// report answers structured content under an outputSchema; deploy is an
// act tool, with a side effect and callable by every principal the
// endpoint admits.
func registerHostTools(rt *mcpruntime.Runtime) error {
	report := mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "report", Description: "Counts the words of a text (structured result)"},
		Access: mcpruntime.AccessRead,
	}, func(_ context.Context, _ *mcpruntime.ToolCall, in reportIn) (*mcp.CallToolResult, reportOut, error) {
		words := strings.Fields(in.Text)
		out := reportOut{Words: len(words)}
		if len(words) > 0 {
			out.First = words[0]
		}
		return nil, out, nil
	})
	deploy := rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "deploy", Description: "Deploys main (an act tool: a side effect, any principal)"},
		Access: mcpruntime.AccessAct,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return text("deployed main"), nil
		},
	})
	return errors.Join(report, deploy)
}

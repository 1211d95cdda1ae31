package servers

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/mark3labs/mcp-go/mcp"
	"github.com/mark3labs/mcp-go/server"
)

// mcpGoServer is mcp-go's Streamable HTTP server in stateful mode.
type mcpGoServer struct {
	peer
	handler http.Handler
}

func newMCPGo(opts Options) *mcpGoServer {
	srv := server.NewMCPServer("mcpgo-bench", "1", server.WithToolCapabilities(false))
	if opts.Tool == CapabilitiesTool {
		srv.AddTool(mcp.NewTool(CapabilitiesTool, mcp.WithDescription(capabilitiesDescription)), mcpGoCapabilities)
	} else {
		srv.AddTool(mcp.NewTool(EchoTool,
			mcp.WithDescription(echoDescription),
			mcp.WithString("text", mcp.Required()),
		), mcpGoEcho)
	}
	h := server.NewStreamableHTTPServer(srv,
		server.WithStateful(true),
		server.WithStreamableHTTPLogger(opts.Logger),
	)
	s := &mcpGoServer{}
	s.handler = s.mount(h)
	return s
}

func mcpGoEcho(_ context.Context, req mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	text, err := req.RequireString("text")
	if err != nil {
		return mcp.NewToolResultError(err.Error()), nil
	}
	return mcp.NewToolResultText(text), nil
}

// mcpGoCapabilities is the stand-in runtime_capabilities: its JSON,
// encoded once, as structuredContent and as the text block.
func mcpGoCapabilities(context.Context, mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	b, err := json.Marshal(capabilities())
	if err != nil {
		return nil, err
	}
	return mcp.NewToolResultStructured(json.RawMessage(b), string(b)), nil
}

func (s *mcpGoServer) Handler() http.Handler { return s.handler }

func (s *mcpGoServer) Close() error { return nil }

package servers

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// goSDKServer is the official SDK serving both protocol eras the only way
// v1.8.0 can: its stateful Streamable HTTP handler (default options:
// event-stream replies, sessions kept until DELETE) for 2025 requests, and
// a stateless one (StreamableHTTPOptions{Stateless: true}, otherwise the
// same defaults) for 2026-07-28 requests, which the stateful handler
// refuses with -32022 ("only supported on stateless HTTP servers"). Both
// serve the same mcp.Server. The request's MCP-Protocol-Version header
// picks the handler (modernHeader), after the bearer check.
type goSDKServer struct {
	peer
	handler http.Handler
}

func newGoSDK(opts Options) *goSDKServer {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gosdk-bench", Version: "1"}, nil)
	if opts.Tool == CapabilitiesTool {
		mcp.AddTool(srv, &mcp.Tool{Name: CapabilitiesTool, Description: capabilitiesDescription}, goSDKCapabilities)
	} else {
		mcp.AddTool(srv, &mcp.Tool{Name: EchoTool, Description: echoDescription}, goSDKEcho)
	}
	get := func(*http.Request) *mcp.Server { return srv }
	stateful := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Logger: opts.Logger})
	stateless := mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{Logger: opts.Logger, Stateless: true})
	s := &goSDKServer{}
	s.handler = s.mount(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if modernHeader(r.Header) {
			stateless.ServeHTTP(w, r)
			return
		}
		stateful.ServeHTTP(w, r)
	}))
	return s
}

func goSDKEcho(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}}}, nil, nil
}

// goSDKCapabilities is the stand-in runtime_capabilities: the SDK puts the
// typed result in structuredContent and its JSON in a text block.
func goSDKCapabilities(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, standInCapabilities, error) {
	return nil, capabilities(), nil
}

func (s *goSDKServer) Handler() http.Handler { return s.handler }

func (s *goSDKServer) Close() error { return nil }

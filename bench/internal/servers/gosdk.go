package servers

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// goSDKServer is the official SDK's stateful Streamable HTTP handler with
// its default options (event-stream replies, sessions kept until DELETE).
type goSDKServer struct {
	peer
	handler http.Handler
}

func newGoSDK(opts Options) *goSDKServer {
	srv := mcp.NewServer(&mcp.Implementation{Name: "gosdk-bench", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "echo", Description: echoDescription}, goSDKEcho)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Logger: opts.Logger,
	})
	s := &goSDKServer{}
	s.handler = s.mount(h)
	return s
}

func goSDKEcho(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}}}, nil, nil
}

func (s *goSDKServer) Handler() http.Handler { return s.handler }

func (s *goSDKServer) Close() error { return nil }

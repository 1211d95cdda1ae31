package mcpruntime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// The handlers of an existing go-sdk server, written against go-sdk's
// types only.
type sdkSumIn struct {
	A int `json:"a" jsonschema:"the first addend"`
	B int `json:"b" jsonschema:"the second addend"`
}
type sdkSumOut struct {
	Sum int    `json:"sum"`
	Who string `json:"who"`
}

func sdkSum(_ context.Context, req *mcp.CallToolRequest, in sdkSumIn) (*mcp.CallToolResult, sdkSumOut, error) {
	who := ""
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		who = fmt.Sprint(req.Extra.TokenInfo.Extra["kind"])
	}
	return nil, sdkSumOut{Sum: in.A + in.B, Who: who}, nil
}

func sdkGreeting(_ context.Context, req *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
	return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Hello, " + req.Params.Arguments["name"]}}}}, nil
}

func sdkNote(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	if !strings.HasSuffix(req.Params.URI, "/1") {
		return nil, mcp.ResourceNotFoundError(req.Params.URI)
	}
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "note one"}}}, nil
}

// TestSDKAdapters (SPEC §5b.23): go-sdk tool, prompt and resource
// handlers — the same functions a go-sdk server registers — register on
// the runtime unchanged and answer a go-sdk client in a 2025 session and
// a 2026-07-28 request alike; go-sdk's ResourceNotFoundError is the
// runtime's not-found; the handler sees who calls, never a token.
func TestSDKAdapters(t *testing.T) {
	// The same handlers on the go-sdk's own server: they are unchanged.
	srv := mcp.NewServer(&mcp.Implementation{Name: "sdk", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "sum"}, sdkSum)
	srv.AddPrompt(&mcp.Prompt{Name: "greeting"}, sdkGreeting)
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: "test://notes/{id}", Name: "note"}, sdkNote)

	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, mcpruntime.AddSDKTool(rt, mcpruntime.Tool{Tool: mcp.Tool{Name: "sum"}, Access: mcpruntime.AccessRead}, sdkSum))
	noErr(t, rt.RegisterPrompt(mcpruntime.Prompt{Prompt: mcp.Prompt{Name: "greeting", Arguments: []*mcp.PromptArgument{{Name: "name"}}},
		Access: mcpruntime.AccessRead, Handler: mcpruntime.SDKPromptHandler(sdkGreeting)}))
	noErr(t, rt.RegisterResourceTemplate(mcpruntime.ResourceTemplate{ResourceTemplate: mcp.ResourceTemplate{URITemplate: "test://notes/{id}", Name: "note"},
		Access: mcpruntime.AccessRead, Handler: mcpruntime.SDKResourceHandler(sdkNote)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "raw"}, Access: mcpruntime.AccessRead,
		Handler: mcpruntime.SDKToolHandler(func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			x := mcpruntime.ExchangeOf(ctx)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s %s exchange=%v", req.Params.Name, req.Params.Arguments, x != nil)}}}, nil
		})}))
	ct, p := issueClient(t, rt, "sdk", memdb.AccessReadOnly)
	if mcpruntime.ExchangeOf(context.Background()) != nil {
		t.Error("ExchangeOf outside a call is not nil")
	}

	ts, _ := interopServer(t, rt)
	cs := sdkConnectClient(t, ts, ct.Token, mcp.NewClient(&mcp.Implementation{Name: "sdk-client", Version: "1"}, nil))
	defer cs.Close()
	res := sdkCall(t, cs, &mcp.CallToolParams{Name: "sum", Arguments: map[string]any{"a": 2, "b": 3}})
	if got := fmt.Sprint(res.StructuredContent); res.IsError || got != "map[sum:5 who:client]" {
		t.Errorf("sum = %v (isError %v), want sum 5 for a client", got, res.IsError)
	}
	if got := sdkText(sdkCall(t, cs, &mcp.CallToolParams{Name: "raw", Arguments: map[string]any{"x": 1}})); got != `raw {"x":1} exchange=true` {
		t.Errorf("raw = %q", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pr, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greeting", Arguments: map[string]string{"name": "Ada"}})
	if err != nil || pr.Messages[0].Content.(*mcp.TextContent).Text != "Hello, Ada" {
		t.Errorf("greeting = %+v, %v", pr, err)
	}
	rr, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://notes/1"})
	if err != nil || rr.Contents[0].Text != "note one" {
		t.Errorf("read test://notes/1 = %+v, %v", rr, err)
	}
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://notes/2"}); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Errorf("read test://notes/2 = %v, want not found", err)
	}

	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	modern := serve(t, b, serveReq{caller: p, era: transport.EraModern, method: "tools/call", params: `{"name":"sum","arguments":{"a":4,"b":5}}`})
	if got := fmt.Sprint(modern.Result.(*mcp.CallToolResult).StructuredContent); got != "{9 client}" && got != "map[sum:9 who:client]" {
		t.Errorf("2026-07-28 sum = %v", got)
	}
	gone := readRes(t, b, p, transport.EraModern, "test://notes/2")
	if gone.Err == nil || gone.Err.Code != -32602 {
		t.Errorf("2026-07-28 read of a missing note = %+v, want -32602", gone)
	}
}

package mcpruntime_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// askName is a handler written once for both eras: it asks for a name
// (state "asked") until it has one.
func askName(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
	if ans, ok := call.Input("user_name"); ok && call.State() == "asked" {
		if e, ok := ans.(*mcp.ElicitResult); ok && e.Action == "accept" {
			return textResult("Hello, "+e.Content["name"].(string)+"!", nil), nil
		}
	}
	return mcpruntime.InputRequired(mcp.InputRequestMap{
		"user_name": &mcp.ElicitParams{Message: "What is your name?", RequestedSchema: map[string]any{
			"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}},
	}, "asked"), nil
}

// TestServeInputRequired (SPEC §5b.6): one handler, both eras. The first
// round answers the input requests and the handler's state; the next round,
// given the answers and the state, completes. Both eras get the same
// requests from Serve; the endpoint carries them (asks in a 2025 session,
// input_required in 2026).
func TestServeInputRequired(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_ask"}, Access: mcpruntime.AccessRead, Handler: askName}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	caps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}
	for _, era := range []transport.Era{transport.EraSession, transport.EraModern} {
		req := serveReq{caller: p, era: era, caps: caps, method: "tools/call", params: `{"name":"host_ask","arguments":{}}`}
		res := serve(t, b, req)
		e, ok := res.InputRequests["user_name"].(*mcp.ElicitParams)
		if !ok || e.Message != "What is your name?" || res.State != "asked" {
			t.Fatalf("era %d round 1 = %+v, want an elicitation and state asked", era, res)
		}
		req.inputs = mcp.InputResponseMap{"user_name": &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Alice"}}}
		req.state = res.State
		done := resultOf[*mcp.CallToolResult](t, "round 2", serve(t, b, req))
		if resultText(done) != "Hello, Alice!" {
			t.Errorf("era %d round 2 = %q", era, resultText(done))
		}
		// Answers without the state of a round that asked: asked again.
		req.state = ""
		if res := serve(t, b, req); len(res.InputRequests) != 1 {
			t.Errorf("era %d answers without state = %+v, want asked again", era, res)
		}
	}
}

// TestServeCapabilityNotDeclared (SPEC §5b.6): a handler that asks what
// the client did not declare never reaches the client: in a 2025 session
// a tools/call is an isError result and other requests -32602; in 2026
// -32021 naming the capability in data.requiredCapabilities.
func TestServeCapabilityNotDeclared(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	sample := func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
		return mcpruntime.InputRequired(mcp.InputRequestMap{"q": &mcp.CreateMessageParams{MaxTokens: 10, Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "?"}}}}}, ""), nil
	}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_sample"}, Access: mcpruntime.AccessRead, Handler: sample}))
	noErr(t, rt.RegisterPrompt(mcpruntime.Prompt{Prompt: mcp.Prompt{Name: "host_roots"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"r": &mcp.ListRootsParams{}}}, nil
		}}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	elicitOnly := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{}}

	res := resultOf[*mcp.CallToolResult](t, "2025 tools/call", serve(t, b, serveReq{caller: p, caps: elicitOnly, method: "tools/call", params: `{"name":"host_sample"}`}))
	if !res.IsError || resultText(res) == "" {
		t.Errorf("2025 undeclared sampling = %+v, want an isError result", res)
	}
	err := wantRPCError(t, "2026 tools/call", serve(t, b, serveReq{caller: p, era: transport.EraModern, caps: elicitOnly, method: "tools/call", params: `{"name":"host_sample"}`}), -32021)
	if diff := cmp.Diff(map[string]any{"requiredCapabilities": map[string]any{"sampling": map[string]any{}}}, wire(t, err.Data)); diff != "" {
		t.Errorf("2026 data (-want +got):\n%s", diff)
	}
	wantRPCError(t, "2025 prompts/get", serve(t, b, serveReq{caller: p, method: "prompts/get", params: `{"name":"host_roots"}`}), -32602)
	err = wantRPCError(t, "2026 prompts/get", serve(t, b, serveReq{caller: p, era: transport.EraModern, method: "prompts/get", params: `{"name":"host_roots"}`}), -32021)
	if _, ok := wire(t, err.Data)["requiredCapabilities"].(map[string]any)["roots"]; !ok {
		t.Errorf("2026 roots data = %v", wire(t, err.Data))
	}
	// Declared: asked.
	withSampling := &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}}
	if res := serve(t, b, serveReq{caller: p, caps: withSampling, method: "tools/call", params: `{"name":"host_sample"}`}); len(res.InputRequests) != 1 {
		t.Errorf("declared sampling = %+v, want the request", res)
	}
	roots := &mcp.ClientCapabilities{RootsV2: &mcp.RootCapabilities{}}
	if res := serve(t, b, serveReq{caller: p, caps: roots, method: "prompts/get", params: `{"name":"host_roots"}`}); len(res.InputRequests) != 1 {
		t.Errorf("declared roots = %+v, want the request", res)
	}
	// URL-mode elicitation needs elicitation.url.
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_url"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return mcpruntime.InputRequired(mcp.InputRequestMap{"u": &mcp.ElicitParams{Mode: "url", URL: "https://example.com/auth", ElicitationID: "e1", Message: "sign in"}}, ""), nil
		}}))
	if res := resultOf[*mcp.CallToolResult](t, "url mode", serve(t, b, serveReq{caller: p, caps: elicitOnly, method: "tools/call", params: `{"name":"host_url"}`})); !res.IsError {
		t.Errorf("url elicitation with form only = %+v, want isError", res)
	}
	urlCaps := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
	if res := serve(t, b, serveReq{caller: p, caps: urlCaps, method: "tools/call", params: `{"name":"host_url"}`}); len(res.InputRequests) != 1 {
		t.Errorf("url elicitation declared = %+v, want the request", res)
	}
}

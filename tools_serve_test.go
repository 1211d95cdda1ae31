package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// schema2020 is the conformance suite's 2020-12 schema (conformance/SCENARIOS.md §2).
const schema2020 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
	`"$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},` +
	`"properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},` +
	`"contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},` +
	`"allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],` +
	`"if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},` +
	`"then":{"required":["phone"]},"else":{"required":["email"]},"additionalProperties":false}`

// TestServeToolsList (SPEC §5b.4): tools/list pages through every tool in
// name order with opaque cursors; a cursor no tools/list returned is
// -32602; schemas are listed as registered, the 2020-12 one verbatim;
// the read classes carry readOnlyHint unless the host set annotations.
func TestServeToolsList(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "json_schema_2020_12_tool", Description: "d", InputSchema: json.RawMessage(schema2020)}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_annotated", Annotations: &mcp.ToolAnnotations{Title: "mine"}}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{ListPageSize: 2})
	p := clientOf(t, rt, memdb.AccessReadOnly)

	var names []string
	listed := map[string]map[string]any{}
	cursor, pages := "", 0
	for {
		params := "{}"
		if cursor != "" {
			params = fmt.Sprintf(`{"cursor":%q}`, cursor)
		}
		res := resultOf[*mcp.ListToolsResult](t, "tools/list", serve(t, b, serveReq{caller: p, method: "tools/list", params: params}))
		if len(res.Tools) > 2 {
			t.Fatalf("page of %d tools, want at most 2", len(res.Tools))
		}
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
			listed[tl.Name] = wire(t, tl)
		}
		pages++
		if cursor = res.NextCursor; cursor == "" {
			break
		}
		if strings.Contains(cursor, names[len(names)-1]) {
			t.Errorf("cursor %q shows the name it continues after", cursor)
		}
	}
	want := []string{"host_annotated", "json_schema_2020_12_tool", "runtime_capabilities", "thread_list", "thread_post", "thread_read"}
	if diff := cmp.Diff(want, names); diff != "" || pages != 3 {
		t.Errorf("tools/list pages = %d, names (-want +got):\n%s", pages, diff)
	}
	var schema map[string]any
	noErr(t, json.Unmarshal([]byte(schema2020), &schema))
	if diff := cmp.Diff(schema, listed["json_schema_2020_12_tool"]["inputSchema"]); diff != "" {
		t.Errorf("2020-12 schema as listed (-registered +listed):\n%s", diff)
	}
	for name, wantHint := range map[string]any{"thread_read": true, "host_annotated": false} {
		if a, _ := listed[name]["annotations"].(map[string]any); a["readOnlyHint"] != wantHint {
			t.Errorf("%s annotations = %v, want readOnlyHint %v", name, listed[name]["annotations"], wantHint)
		}
	}
	if _, ok := listed["thread_post"]["annotations"]; ok {
		t.Errorf("thread_post (mutate) annotations = %v, want none", listed["thread_post"]["annotations"])
	}
	if listed["thread_read"]["title"] != "Read a thread" {
		t.Errorf("thread_read title = %v", listed["thread_read"]["title"])
	}

	for _, bad := range []string{`{"cursor":"nope"}`, `{"cursor":"t1.!!"}`, `{"cursor":7}`, `{"cursor":"p1.eA"}`} {
		wantRPCError(t, "tools/list "+bad, serve(t, b, serveReq{caller: p, method: "tools/list", params: bad}), -32602)
	}
}

// TestServeToolCallContent: a result's content blocks — text, image,
// audio, resource link, embedded resource — and structuredContent reach the
// wire as the handler made them.
func TestServeToolCallContent(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	png := []byte{0x89, 'P', 'N', 'G'}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_mixed"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "hi"},
				&mcp.ImageContent{Data: png, MIMEType: "image/png"},
				&mcp.AudioContent{Data: png, MIMEType: "audio/wav"},
				&mcp.ResourceLink{URI: "test://link", Name: "link"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://e", MIMEType: "text/plain", Text: "e"}},
			}, StructuredContent: map[string]int{"n": 1}}, nil
		}}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	res := resultOf[*mcp.CallToolResult](t, "tools/call", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"host_mixed"}`}))
	w := wire(t, res)
	var types []string
	for _, c := range w["content"].([]any) {
		types = append(types, c.(map[string]any)["type"].(string))
	}
	if diff := cmp.Diff([]string{"text", "image", "audio", "resource_link", "resource"}, types); diff != "" {
		t.Errorf("content types (-want +got):\n%s", diff)
	}
	if w["content"].([]any)[1].(map[string]any)["data"] != "iVBORw==" || w["structuredContent"].(map[string]any)["n"] != float64(1) {
		t.Errorf("result = %v", w)
	}

	// Unknown tool: -32602, not a result. A nil result: content [], not null.
	wantRPCError(t, "unknown tool", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"no_such"}`}), -32602)
	wantRPCError(t, "no name", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"arguments":{}}`}), -32602)
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_nil"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) { return nil, nil }}))
	res = resultOf[*mcp.CallToolResult](t, "host_nil", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"host_nil"}`}))
	if c, ok := wire(t, res)["content"].([]any); !ok || len(c) != 0 {
		t.Errorf("nil result content = %v, want []", wire(t, res)["content"])
	}
	// Refusals stay results (SPEC §4.3).
	res = resultOf[*mcp.CallToolResult](t, "thread_post by read-only", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"thread_post","arguments":{"text":"x","threadId":"T"}}`}))
	wantRefusal(t, "thread_post by a read-only grant", res, mcpruntime.CodeCapabilityDenied)
}

type greetIn struct {
	Name  string `json:"name" jsonschema:"who to greet"`
	Times int    `json:"times,omitempty"`
}

type greetOut struct {
	Greeting string `json:"greeting"`
}

// TestAddToolTyped: AddTool infers both schemas from Go types, decodes
// the arguments into In, sets structuredContent from Out with a text block
// of its JSON, and the input schema refuses what In does not allow.
func TestAddToolTyped(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, mcpruntime.AddTool(rt, mcpruntime.Tool{Tool: mcp.Tool{Name: "greet", Description: "greets"}, Access: mcpruntime.AccessRead},
		func(_ context.Context, _ *mcpruntime.ToolCall, in greetIn) (*mcp.CallToolResult, greetOut, error) {
			return nil, greetOut{Greeting: strings.Repeat("hello "+in.Name+" ", max(in.Times, 1))}, nil
		}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	list := resultOf[*mcp.ListToolsResult](t, "tools/list", serve(t, b, serveReq{caller: p, method: "tools/list"}))
	var greet map[string]any
	for _, tl := range list.Tools {
		if tl.Name == "greet" {
			greet = wire(t, tl)
		}
	}
	in, _ := greet["inputSchema"].(map[string]any)
	out, _ := greet["outputSchema"].(map[string]any)
	if in["type"] != "object" || in["properties"].(map[string]any)["name"].(map[string]any)["description"] != "who to greet" ||
		fmt.Sprint(in["required"]) != "[name]" || out["properties"].(map[string]any)["greeting"] == nil {
		t.Errorf("greet schemas: input %v, output %v", in, out)
	}
	res := resultOf[*mcp.CallToolResult](t, "greet", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"greet","arguments":{"name":"Ada","times":2}}`}))
	if res.IsError || res.StructuredContent != (greetOut{Greeting: "hello Ada hello Ada "}) || resultText(res) != `{"greeting":"hello Ada hello Ada "}` {
		t.Errorf("greet = %+v (text %q)", res, resultText(res))
	}
	res = resultOf[*mcp.CallToolResult](t, "greet without name", serve(t, b, serveReq{caller: p, method: "tools/call", params: `{"name":"greet","arguments":{"times":2}}`}))
	// greet's output schema needs "greeting": the refusal's code is in its
	// text, and no structured content breaks the schema (SPEC §4.3).
	if !res.IsError || res.StructuredContent != nil || !strings.HasPrefix(resultText(res), mcpruntime.CodeInvalidArguments+": ") {
		t.Errorf("greet without name = %+v (text %q), want an invalid_arguments refusal without structured content", res, resultText(res))
	}
}

// TestToolOutputSchema: a structured result that does not match the
// tool's output schema is a tool error, never sent as it is.
func TestToolOutputSchema(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	give := map[string]any{"n": "not a number"}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_out",
		OutputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer"}},"required":["n"]}`)}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{StructuredContent: give}, nil
		}}))
	p := clientOf(t, rt, memdb.AccessReadOnly)
	if res := toolsCall(t, rt, p, "host_out", ""); !res.IsError || res.StructuredContent != nil || !strings.Contains(resultText(res), "output schema") {
		t.Errorf("mismatching result = %+v, want an isError result without it", res)
	}
	give = map[string]any{"n": 3}
	if res := toolsCall(t, rt, p, "host_out", ""); res.IsError {
		t.Errorf("matching result = %+v, want it as it is", res)
	}
	err := rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_badout", OutputSchema: json.RawMessage(`{"type":"frob"}`)}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)})
	if !errors.Is(err, mcpruntime.ErrInvalidTool) {
		t.Errorf("RegisterTool with a bad output schema = %v, want ErrInvalidTool", err)
	}
}

// TestToolListChanged (SPEC §5b.7): registering and removing a tool after
// start tells every endpoint; removing a tool that is not there does not.
func TestToolListChanged(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	f := &recFeed{}
	mcpruntime.AddChangeFeed(rt, f)
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_x"}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}))
	if !rt.RemoveTool("host_x") || rt.RemoveTool("host_x") {
		t.Error("RemoveTool = false for a registered tool, or true for a removed one")
	}
	_ = rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "thread_read"}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}) // refused: taken
	if changed, _ := f.take(); !cmp.Equal(changed, []string{"tools", "tools"}) {
		t.Errorf("list changes = %v, want [tools tools]", changed)
	}
	p := clientOf(t, rt, memdb.AccessReadOnly)
	if _, err := rt.CallTool(context.Background(), p, "host_x", nil, nil); !errors.Is(err, mcpruntime.ErrUnknownTool) {
		t.Errorf("call of a removed tool = %v, want ErrUnknownTool", err)
	}
}

// TestServeOutput: a handler's Progress, Log and CloseStream reach the
// request's Output.
func TestServeOutput(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_talk"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			call.Progress(1, 2, "half")
			call.Log("info", "host", "working")
			call.CloseStream()
			call.Progress(2, 2, "done")
			return nil, nil
		}}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	out := &recOutput{}
	serve(t, b, serveReq{caller: clientOf(t, rt, memdb.AccessReadOnly), method: "tools/call", params: `{"name":"host_talk"}`, out: out})
	if !cmp.Equal(out.progress, []float64{1, 2}) || !cmp.Equal(out.logs, []string{`info:"working"`}) || out.closed != 1 {
		t.Errorf("output: progress %v, logs %v, closed %d", out.progress, out.logs, out.closed)
	}
}

// TestServeCancelled: Dispatch returns once its context is done, whatever the
// handler does with it, with an answer the endpoint does not send.
func TestServeCancelled(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	started := make(chan struct{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_wait"}, Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			close(started)
			<-ctx.Done()
			return textResult("too late", nil), nil
		}}))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan transport.Response, 1)
	go func() {
		done <- transport.Dispatch(ctx, b, "tools/call", json.RawMessage(`{"name":"host_wait"}`), &transport.Request{
			Caller: clientOf(t, rt, memdb.AccessReadOnly), Era: transport.EraSession, ClientCapabilities: &mcp.ClientCapabilities{}, Out: &recOutput{}})
	}()
	<-started
	cancel()
	if res := <-done; res.Result != nil || res.Err == nil {
		t.Errorf("cancelled Dispatch = %+v, want no result", res)
	}
}

// TestBackendCapabilities (SPEC §5b.10): every feature is declared.
func TestBackendCapabilities(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	got := wire(t, mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{}).Capabilities())
	want := map[string]any{"completions": map[string]any{}, "logging": map[string]any{}, "prompts": map[string]any{"listChanged": true},
		"resources": map[string]any{"listChanged": true, "subscribe": true}, "tools": map[string]any{"listChanged": true}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("capabilities (-want +got):\n%s", diff)
	}
}

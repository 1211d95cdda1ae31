package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/memdb"
)

// toolsOKHandler answers "ok" and counts its calls.
func toolsOKHandler(calls *atomic.Int32) mcpruntime.ToolHandler {
	return func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
		if calls != nil {
			calls.Add(1)
		}
		return textResult("ok", map[string]string{"ok": "yes"}), nil
	}
}

// toolsCall calls a tool with rt.CallTool and fails the test on an error.
func toolsCall(t *testing.T, rt *mcpruntime.Runtime, caller mcpruntime.Principal, name, args string) *mcp.CallToolResult {
	t.Helper()
	var raw json.RawMessage
	if args != "" {
		raw = json.RawMessage(args)
	}
	res, err := rt.CallTool(context.Background(), caller, name, raw, nil)
	if err != nil {
		t.Fatalf("CallTool(%s, %s) = %v", name, args, err)
	}
	if res == nil {
		t.Fatalf("CallTool(%s, %s) = nil result", name, args)
	}
	return res
}

// refusalCode returns the structuredContent code of an isError result, ""
// for a success.
func refusalCode(t *testing.T, what string, res *mcp.CallToolResult) string {
	t.Helper()
	if !res.IsError {
		return ""
	}
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: structuredContent %#v does not marshal: %v", what, res.StructuredContent, err)
	}
	var sc struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal(b, &sc); err != nil || sc.Code == "" {
		t.Fatalf("%s: isError result without a code: %s (text %q)", what, b, resultText(res))
	}
	return sc.Code
}

// textResult is a result of one text block and structured content.
func textResult(text string, sc any) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: sc}
}

// resultText is the text of a result's first text block.
func resultText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

func wantRefusal(t *testing.T, what string, res *mcp.CallToolResult, code string) {
	t.Helper()
	if got := refusalCode(t, what, res); got != code {
		t.Errorf("%s: code %q (text %q), want %q", what, got, resultText(res), code)
	}
	if code != "" && !strings.HasPrefix(resultText(res), code+": ") {
		t.Errorf("%s: text %q does not begin with its code %q", what, resultText(res), code+": ")
	}
}

// toolsStructured round-trips a result's structuredContent through JSON, as a
// client sees it.
func toolsStructured(t *testing.T, what string, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	b, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatalf("%s: marshal structuredContent: %v", what, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s: structuredContent %s is not an object: %v", what, b, err)
	}
	return m
}

func registeredNames(rt *mcpruntime.Runtime) []string {
	var out []string
	for _, ti := range rt.Tools() {
		out = append(out, ti.Name)
	}
	return out
}

// TestRegisterToolRejects: malformed tools are refused with ErrInvalidTool
// and leave the registry as it was.
func TestRegisterToolRejects(t *testing.T) {
	good := func(name string) mcpruntime.Tool {
		return mcpruntime.Tool{Tool: mcp.Tool{Name: name}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}
	}
	with := func(name string, f func(*mcpruntime.Tool)) mcpruntime.Tool {
		tool := good(name)
		f(&tool)
		return tool
	}
	tests := []struct {
		name string
		tool mcpruntime.Tool
	}{
		{"no access class", with("t_noaccess", func(tl *mcpruntime.Tool) { tl.Access = "" })},
		{"unknown access class", with("t_write", func(tl *mcpruntime.Tool) { tl.Access = "write" })},
		{"access class in other case", with("t_READ", func(tl *mcpruntime.Tool) { tl.Access = "Read" })},
		{"empty name", good("")},
		{"name with a space", good("has space")},
		{"name with a slash", good("a/b")},
		{"name with a colon", good("ns:tool")},
		{"non-ASCII name", good("tööl")},
		{"name of 129 characters", good(strings.Repeat("a", 129))},
		{"nil handler", with("t_nohandler", func(tl *mcpruntime.Tool) { tl.Handler = nil })},
		{"schema not JSON", with("t_notjson", func(tl *mcpruntime.Tool) { tl.InputSchema = json.RawMessage(`{"type":`) })},
		{"schema an array", with("t_array", func(tl *mcpruntime.Tool) { tl.InputSchema = json.RawMessage(`[]`) })},
		{"schema a string", with("t_string", func(tl *mcpruntime.Tool) { tl.InputSchema = json.RawMessage(`"object"`) })},
		{"schema true", with("t_true", func(tl *mcpruntime.Tool) { tl.InputSchema = json.RawMessage(`true`) })},
		{"schema of a non-object type", with("t_strtype", func(tl *mcpruntime.Tool) { tl.InputSchema = json.RawMessage(`{"type":"string"}`) })},
		{"schema with an unknown type", with("t_badtype", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"x":{"type":"frobnicate"}}}`)
		})},
		{"schema with an ill-typed keyword", with("t_badkw", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","minProperties":"two"}`)
		})},
		{"schema with a bad pattern", with("t_badre", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"x":{"type":"string","pattern":"("}}}`)
		})},
		{"schema with a dangling local $ref", with("t_dangling", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"x":{"$ref":"#/$defs/missing"}}}`)
		})},
		// x-mcp-header markings that break MCP 2026-07-28's rules (SPEC §5a.9).
		{"x-mcp-header empty", with("t_xh_empty", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"r":{"type":"string","x-mcp-header":""}}}`)
		})},
		{"x-mcp-header not a token", with("t_xh_space", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"My Region"}}}`)
		})},
		{"x-mcp-header not a string", with("t_xh_num", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"r":{"type":"string","x-mcp-header":7}}}`)
		})},
		{"x-mcp-header twice ignoring case", with("t_xh_dup", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"a":{"type":"string","x-mcp-header":"Region"},"b":{"type":"string","x-mcp-header":"region"}}}`)
		})},
		{"x-mcp-header on an object", with("t_xh_obj", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"r":{"type":"object","x-mcp-header":"R"}}}`)
		})},
		{"x-mcp-header on a number", with("t_xh_number", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"r":{"type":"number","x-mcp-header":"R"}}}`)
		})},
		{"x-mcp-header under items", with("t_xh_items", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","properties":{"l":{"type":"array","items":{"type":"string","x-mcp-header":"R"}}}}`)
		})},
		{"x-mcp-header in $defs", with("t_xh_defs", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","$defs":{"r":{"type":"string","x-mcp-header":"R"}},"properties":{"r":{"$ref":"#/$defs/r"}}}`)
		})},
		{"x-mcp-header on the root", with("t_xh_root", func(tl *mcpruntime.Tool) {
			tl.InputSchema = json.RawMessage(`{"type":"object","x-mcp-header":"R"}`)
		})},
		{"built-in name taken", good("thread_read")},
		{"host name taken", good("host_dup")},
	}
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(good("host_dup")))
	before := rt.Tools()
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := rt.RegisterTool(test.tool)
			if !errors.Is(err, mcpruntime.ErrInvalidTool) {
				t.Errorf("RegisterTool(%q) = %v, want ErrInvalidTool", test.tool.Name, err)
			}
		})
	}
	if diff := cmp.Diff(before, rt.Tools()); diff != "" {
		t.Errorf("registry changed by rejected registrations (-want +got):\n%s", diff)
	}
}

// TestRegisterToolAccepts: the edges of what is valid register, and the
// registry lists them sorted with their class and capability.
func TestRegisterToolAccepts(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	long := strings.Repeat("z", 128)
	tools := []mcpruntime.Tool{
		{Tool: mcp.Tool{Name: "a.b-c_D9"}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)},
		{Tool: mcp.Tool{Name: long}, Access: mcpruntime.AccessReadAsCaller, Handler: toolsOKHandler(nil)},
		{Tool: mcp.Tool{Name: "host_mutate"}, Access: mcpruntime.AccessMutate, Capability: "x", Handler: toolsOKHandler(nil)},
		{Tool: mcp.Tool{Name: "host_schema", InputSchema: json.RawMessage(
			`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",` +
				`"$defs":{"n":{"type":"integer"}},"properties":{"n":{"$ref":"#/$defs/n"}}}`)}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)},
		{Tool: mcp.Tool{Name: "host_headers", InputSchema: json.RawMessage(
			`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"},"n":{"type":"integer","x-mcp-header":"N"},` +
				`"o":{"type":"object","properties":{"b":{"type":"boolean","x-mcp-header":"Deep"}}},"x":{"type":"string","default":{"x-mcp-header":"data"}}}}`)}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)},
	}
	for _, tool := range tools {
		if err := rt.RegisterTool(tool); err != nil {
			t.Errorf("RegisterTool(%.20q) = %v, want nil", tool.Name, err)
		}
	}
	want := []string{"a.b-c_D9", "host_headers", "host_mutate", "host_schema", "runtime_capabilities", "thread_list", "thread_post", "thread_read", long}
	if diff := cmp.Diff(want, registeredNames(rt)); diff != "" {
		t.Errorf("Tools() names (-want +got):\n%s", diff)
	}
	for _, ti := range rt.Tools() {
		if ti.Name == "host_mutate" && (ti.Access != mcpruntime.AccessMutate || ti.Capability != "x" || string(ti.InputSchema) != `{"type":"object"}`) {
			t.Errorf("Tools() host_mutate = %+v, want mutate, capability x, default schema", ti)
		}
	}
}

// TestToolArgumentsAlwaysObject: a handler only ever sees an arguments
// object (MCP: tools/call arguments and a tool's inputSchema are of type
// "object"). A schema that leaves "type" out must either be refused at
// registration or still refuse non-object arguments with invalid_arguments.
// RegisterTool refuses it (prepareTool in tools.go wants type "object"):
// accepted, tools/list would advertise an inputSchema without type
// "object" and CallTool would hand 5, "x" or [1] to the handler.
func TestToolArgumentsAlwaysObject(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	_, p := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	var calls atomic.Int32
	err := rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "host_untyped", InputSchema: json.RawMessage(`{"properties":{"n":{"type":"integer"}}}`)},
		Access: mcpruntime.AccessRead, Handler: toolsOKHandler(&calls),
	})
	if errors.Is(err, mcpruntime.ErrInvalidTool) {
		return // refused at registration: the rule holds
	}
	noErr(t, err)
	for _, args := range []string{`5`, `"x"`, `[1]`, `true`} {
		res := toolsCall(t, rt, p, "host_untyped", args)
		if refusalCode(t, "host_untyped("+args+")", res) != mcpruntime.CodeInvalidArguments {
			t.Errorf("host_untyped(%s) = %+v, want invalid_arguments", args, res)
		}
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("handler ran %d times with non-object arguments, want 0", n)
	}
}

// TestToolSchemaExternalRefNotFetched: a schema that references another
// document is not loaded from anywhere — it fails to compile and nothing
// is fetched.
func TestToolSchemaExternalRefNotFetched(t *testing.T) {
	var hits atomic.Int32
	ext := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/schema+json")
		fmt.Fprint(w, `{"type":"string"}`)
	}))
	defer ext.Close()
	rt := quietRuntime(t, mcpruntime.Config{})
	schemas := map[string]string{
		"http ref":            `{"type":"object","properties":{"x":{"$ref":"` + ext.URL + `/s.json"}}}`,
		"relative to http id": `{"$id":"` + ext.URL + `/base.json","type":"object","properties":{"x":{"$ref":"other.json"}}}`,
		"file ref":            `{"type":"object","properties":{"x":{"$ref":"file:///etc/hostname"}}}`,
		"http meta-schema":    `{"$schema":"` + ext.URL + `/meta.json","type":"object"}`,
	}
	i := 0
	for name, schema := range schemas {
		i++
		err := rt.RegisterTool(mcpruntime.Tool{
			Tool:   mcp.Tool{Name: fmt.Sprintf("ext_%d", i), InputSchema: json.RawMessage(schema)},
			Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil),
		})
		if !errors.Is(err, mcpruntime.ErrInvalidTool) {
			t.Errorf("%s: RegisterTool = %v, want ErrInvalidTool", name, err)
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("schema compilation made %d HTTP requests, want 0", n)
	}
}

// TestToolArgumentsValidated: arguments that fail the schema are refused
// with invalid_arguments and never reach the handler.
func TestToolArgumentsValidated(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")
	var calls atomic.Int32
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "host_n", InputSchema: json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","minimum":1}},"required":["n"],"additionalProperties":false}`)},
		Access: mcpruntime.AccessRead, Handler: toolsOKHandler(&calls),
	}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_free"}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(&calls)}))

	tests := []struct {
		name     string
		tool     string
		args     string
		wantCode string // "" for success
	}{
		{"valid", "host_n", `{"n":3}`, ""},
		{"missing required", "host_n", `{}`, mcpruntime.CodeInvalidArguments},
		{"no arguments", "host_n", ``, mcpruntime.CodeInvalidArguments},
		{"wrong type", "host_n", `{"n":"3"}`, mcpruntime.CodeInvalidArguments},
		{"below minimum", "host_n", `{"n":0}`, mcpruntime.CodeInvalidArguments},
		{"not an integer", "host_n", `{"n":1.5}`, mcpruntime.CodeInvalidArguments},
		{"extra property", "host_n", `{"n":1,"m":2}`, mcpruntime.CodeInvalidArguments},
		{"array", "host_n", `[{"n":1}]`, mcpruntime.CodeInvalidArguments},
		{"not JSON", "host_n", `{"n":`, mcpruntime.CodeInvalidArguments},
		{"default schema, no arguments", "host_free", ``, ""},
		{"default schema, null", "host_free", `null`, ""},
		{"default schema, string", "host_free", `"x"`, mcpruntime.CodeInvalidArguments},
		{"thread_post empty text", "thread_post", `{"text":""}`, mcpruntime.CodeInvalidArguments},
		{"thread_post no text", "thread_post", `{}`, mcpruntime.CodeInvalidArguments},
		{"thread_post unknown property", "thread_post", `{"text":"x","urgent":true}`, mcpruntime.CodeInvalidArguments},
		{"thread_post text too long", "thread_post", `{"text":"` + strings.Repeat("x", 65537) + `"}`, mcpruntime.CodeInvalidArguments},
		{"thread_read numeric id", "thread_read", `{"threadId":7}`, mcpruntime.CodeInvalidArguments},
		{"runtime_capabilities with arguments", "runtime_capabilities", `{"x":1}`, mcpruntime.CodeInvalidArguments},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			before := calls.Load()
			before0 := len(threadOf(t, rt, "T").Messages)
			res := toolsCall(t, rt, p, test.tool, test.args)
			wantRefusal(t, fmt.Sprintf("%s(%.40s)", test.tool, test.args), res, test.wantCode)
			if test.wantCode != "" {
				if calls.Load() != before {
					t.Errorf("handler ran for refused arguments %.40s", test.args)
				}
				if got := len(threadOf(t, rt, "T").Messages); got != before0 {
					t.Errorf("thread T has %d messages after refused call, want %d", got, before0)
				}
			}
		})
	}
	if _, err := rt.CallTool(context.Background(), p, "no_such_tool", nil, nil); !errors.Is(err, mcpruntime.ErrUnknownTool) {
		t.Errorf("CallTool(no_such_tool) = %v, want ErrUnknownTool", err)
	}
}

// TestToolHandlerErrors: a handler's runtime error becomes its stable code;
// any other error is a plain tool error; a nil result is an empty success.
func TestToolHandlerErrors(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")
	errs := map[string]error{
		"host_notlive":  fmt.Errorf("wrapped: %w", mcpruntime.ErrNotLive),
		"host_readonly": mcpruntime.ErrReadOnly,
		"host_credreq":  mcpruntime.ErrCredentialRequired,
		"host_nothread": mcpruntime.ErrUnknownThread,
		"host_badarg":   mcpruntime.ErrInvalidArgument,
		"host_other":    errors.New("disk on fire"),
	}
	for name, e := range errs {
		noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: name}, Access: mcpruntime.AccessRead,
			Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) { return nil, e }}))
	}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_nil"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) { return nil, nil }}))
	tests := []struct {
		tool string
		code string
	}{
		{"host_notlive", mcpruntime.CodeParentNotActive},
		{"host_readonly", mcpruntime.CodeCapabilityDenied},
		{"host_credreq", mcpruntime.CodeThreadCredentialRequired},
		{"host_nothread", mcpruntime.CodeThreadNotFound},
		{"host_badarg", mcpruntime.CodeInvalidArguments},
	}
	for _, test := range tests {
		wantRefusal(t, test.tool, toolsCall(t, rt, p, test.tool, ""), test.code)
	}
	if res := toolsCall(t, rt, p, "host_other", ""); !res.IsError || res.StructuredContent != nil || !strings.Contains(resultText(res), "disk on fire") {
		t.Errorf("host_other = %+v, want a plain isError result naming the error", res)
	}
	if res := toolsCall(t, rt, p, "host_nil", ""); res.IsError {
		t.Errorf("host_nil = %+v, want an empty success", res)
	}
}

// TestToolCancelledIsNotAFailure: a handler that fails with its context's
// error once the context is done was cancelled: CallTool returns that error,
// not the isError result "tool failed: context canceled". The same error
// while the context is live is a tool failure like any other.
func TestToolCancelledIsNotAFailure(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "waits"}, Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			<-ctx.Done()
			return nil, fmt.Errorf("waiting: %w", ctx.Err())
		}}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "own_timeout"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return nil, context.DeadlineExceeded
		}}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if res, err := rt.CallTool(ctx, p, "waits", nil, nil); !errors.Is(err, context.Canceled) || res != nil {
		t.Errorf("cancelled call = %+v, %v; want no result and context.Canceled", res, err)
	}
	if res := toolsCall(t, rt, p, "own_timeout", ""); !res.IsError || !strings.Contains(resultText(res), "deadline exceeded") {
		t.Errorf("own_timeout = %+v, want a plain isError result", res)
	}
}

// TestReadAsCaller: a readAsCaller tool needs a provider credential; any
// client grant is refused with thread_credential_required.
func TestReadAsCaller(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A") // no run: readAsCaller needs none
	p := assertLive(t, rt, "provider", tok)
	var calls atomic.Int32
	var seen atomic.Value
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_mine"}, Access: mcpruntime.AccessReadAsCaller,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			calls.Add(1)
			seen.Store(call.Caller.Thread)
			return textResult(call.Caller.Thread, nil), nil
		}}))

	for _, access := range []string{memdb.AccessReadOnly, memdb.AccessReadWrite} {
		_, cp := issueClient(t, rt, "ide-"+access, access)
		wantRefusal(t, "host_mine by "+access+" client", toolsCall(t, rt, cp, "host_mine", ""), mcpruntime.CodeThreadCredentialRequired)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("handler ran %d times for client grants, want 0", n)
	}
	if res := toolsCall(t, rt, p, "host_mine", ""); res.IsError || resultText(res) != "T" || seen.Load() != "T" {
		t.Errorf("host_mine by provider = %+v, want success scoped to T", res)
	}
}

// TestCapabilityGate: a tool with a capability is refused with
// capability_denied unless the caller's credential was minted with it.
func TestCapabilityGate(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "plain")
	noErr(t, rt.RegisterInstance(ctx, "capped", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Capabilities: []string{"x"}}))
	createThreads(t, rt, "T", "U")
	pPlain, _, _ := liveOn(t, rt, "T", "plain")
	pCapped, _, _ := liveOn(t, rt, "U", "capped")
	_, pClient := issueClient(t, rt, "ide", memdb.AccessReadWrite)
	if !slices.Equal(pCapped.Capabilities, []string{"x"}) || slices.Contains(pPlain.Capabilities, "x") {
		t.Fatalf("capabilities: capped %q, plain %q", pCapped.Capabilities, pPlain.Capabilities)
	}
	var calls atomic.Int32
	for _, access := range []mcpruntime.Access{mcpruntime.AccessRead, mcpruntime.AccessReadAsCaller, mcpruntime.AccessMutate} {
		noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "x_" + string(access)}, Access: access, Capability: "x", AllowClients: true, Handler: toolsOKHandler(&calls)}))
	}
	for _, access := range []mcpruntime.Access{mcpruntime.AccessRead, mcpruntime.AccessReadAsCaller, mcpruntime.AccessMutate} {
		name := "x_" + string(access)
		before := calls.Load()
		wantRefusal(t, name+" by plain", toolsCall(t, rt, pPlain, name, ""), mcpruntime.CodeCapabilityDenied)
		wantRefusal(t, name+" by client", toolsCall(t, rt, pClient, name, ""), mcpruntime.CodeCapabilityDenied)
		if calls.Load() != before {
			t.Fatalf("%s: handler ran for a caller without capability x", name)
		}
		wantRefusal(t, name+" by capped", toolsCall(t, rt, pCapped, name, ""), "")
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler ran %d times, want 3 (capped caller only)", n)
	}
}

// TestMutateToolCallers: who may call a mutate tool, and that the liveness
// check of ToolCall.Mutate is the one that refuses a caller without a run.
func TestMutateToolCallers(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	pLive, _, _ := liveOn(t, rt, "T", "A")
	_, tokIdle := openMinted(t, rt, "U", "A") // U has no run
	pIdle := assertLive(t, rt, "idle provider", tokIdle)
	_, pRO := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	_, pRW := issueClient(t, rt, "rw", memdb.AccessReadWrite)

	appendTool := func(name string, allowClients bool) mcpruntime.Tool {
		return mcpruntime.Tool{
			Tool:   mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object","properties":{"threadId":{"type":"string"}}}`)},
			Access: mcpruntime.AccessMutate, AllowClients: allowClients,
			Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				var args struct {
					ThreadID string `json:"threadId"`
				}
				if err := json.Unmarshal(call.Arguments, &args); err != nil {
					return nil, err
				}
				m, err := mcpruntime.Mutate[memdb.Message](ctx, call.Runtime(), call.Caller, args.ThreadID, thread.AppendMessage{Text: "by " + call.Caller.Namespace})
				if err != nil {
					return nil, err
				}
				return textResult(fmt.Sprint(m.Seq), nil), nil
			},
		}
	}
	noErr(t, rt.RegisterTool(appendTool("host_providers_only", false)))
	noErr(t, rt.RegisterTool(appendTool("host_clients_too", true)))

	tests := []struct {
		name   string
		caller mcpruntime.Principal
		tool   string
		args   string
		code   string
	}{
		{"live provider", pLive, "host_providers_only", `{}`, ""},
		{"live provider, clients allowed", pLive, "host_clients_too", `{}`, ""},
		{"provider without a run", pIdle, "host_providers_only", `{}`, mcpruntime.CodeParentNotActive},
		{"read-write client, clients not allowed", pRW, "host_providers_only", `{"threadId":"T"}`, mcpruntime.CodeThreadCredentialRequired},
		{"read-only client, clients not allowed", pRO, "host_providers_only", `{"threadId":"T"}`, mcpruntime.CodeThreadCredentialRequired},
		{"read-only client", pRO, "host_clients_too", `{"threadId":"T"}`, mcpruntime.CodeCapabilityDenied},
		{"read-write client", pRW, "host_clients_too", `{"threadId":"T"}`, ""},
		{"read-write client without thread", pRW, "host_clients_too", `{}`, mcpruntime.CodeThreadCredentialRequired},
		{"read-write client, missing thread", pRW, "host_clients_too", `{"threadId":"ghost"}`, mcpruntime.CodeThreadNotFound},
		{"built-in: read-only client", pRO, "thread_post", `{"text":"x","threadId":"T"}`, mcpruntime.CodeCapabilityDenied},
		{"built-in: read-write client", pRW, "thread_post", `{"text":"x","threadId":"T"}`, ""},
		{"built-in: read-write client without thread", pRW, "thread_post", `{"text":"x"}`, mcpruntime.CodeThreadCredentialRequired},
		{"built-in: provider without a run", pIdle, "thread_post", `{"text":"x"}`, mcpruntime.CodeParentNotActive},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			before := len(threadOf(t, rt, "T").Messages) + len(threadOf(t, rt, "U").Messages)
			res := toolsCall(t, rt, test.caller, test.tool, test.args)
			wantRefusal(t, test.tool, res, test.code)
			after := len(threadOf(t, rt, "T").Messages) + len(threadOf(t, rt, "U").Messages)
			if wantDelta := map[bool]int{true: 1, false: 0}[test.code == ""]; after-before != wantDelta {
				t.Errorf("messages grew by %d, want %d", after-before, wantDelta)
			}
		})
	}

	// Archived target: nothing to post to.
	noErr(t, rt.Archive(ctx, "U"))
	wantRefusal(t, "thread_post to archived U", toolsCall(t, rt, pRW, "thread_post", `{"text":"x","threadId":"U"}`), mcpruntime.CodeThreadNotFound)
}

// TestToolsAfterSwitch is SPEC §4: after a switch A→B, A still reads, A's
// mutation is parent_not_active, and B mutates only while it owns the run.
func TestToolsAfterSwitch(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	pA, _, tokA := liveOn(t, rt, "T", "A")
	wantRefusal(t, "A posts during its run", toolsCall(t, rt, pA, "thread_post", `{"text":"a1"}`), "")

	sw, err := rt.SwitchProvider(ctx, "T", "B")
	noErr(t, err)
	if sw.EndedRun == "" {
		t.Fatalf("SwitchProvider = %+v, want A's run ended", sw)
	}
	_, tokB := openMinted(t, rt, "T", "B")
	pB := assertLive(t, rt, "B", tokB)
	assertLive(t, rt, "A after switch", tokA)

	read := toolsCall(t, rt, pA, "thread_read", `{}`)
	if read.IsError || toolsStructured(t, "A reads", read)["instance"] != "B" {
		t.Errorf("A's thread_read after switch = %+v, want success showing instance B", read)
	}
	wantRefusal(t, "A posts after switch", toolsCall(t, rt, pA, "thread_post", `{"text":"a2"}`), mcpruntime.CodeParentNotActive)
	wantRefusal(t, "B posts before its run", toolsCall(t, rt, pB, "thread_post", `{"text":"b0"}`), mcpruntime.CodeParentNotActive)

	run, err := rt.StartRun(ctx, "T", "B")
	noErr(t, err)
	wantRefusal(t, "B posts during its run", toolsCall(t, rt, pB, "thread_post", `{"text":"b1"}`), "")
	wantRefusal(t, "A posts during B's run", toolsCall(t, rt, pA, "thread_post", `{"text":"a3"}`), mcpruntime.CodeParentNotActive)
	wantRefusal(t, "A names T explicitly", toolsCall(t, rt, pA, "thread_post", `{"text":"a4","threadId":"T"}`), mcpruntime.CodeParentNotActive)
	noErr(t, rt.EndRun(ctx, "T", run))
	wantRefusal(t, "B posts after EndRun", toolsCall(t, rt, pB, "thread_post", `{"text":"b2"}`), mcpruntime.CodeParentNotActive)

	var texts []string
	for _, m := range threadOf(t, rt, "T").Messages {
		texts = append(texts, m.Text)
	}
	if diff := cmp.Diff([]string{"a1", "b1"}, texts); diff != "" {
		t.Errorf("messages of T (-want +got):\n%s", diff)
	}
}

// TestThreadToolsMissingThread: posting to or reading a thread that does
// not exist is thread_not_found, for providers and clients.
func TestThreadToolsMissingThread(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")
	_, pRW := issueClient(t, rt, "rw", memdb.AccessReadWrite)
	for _, who := range []struct {
		name   string
		caller mcpruntime.Principal
	}{{"provider", p}, {"client", pRW}} {
		for _, id := range []string{"ghost", "not a valid id!"} {
			wantRefusal(t, who.name+" thread_post to "+id, toolsCall(t, rt, who.caller, "thread_post", `{"text":"x","threadId":"`+id+`"}`), mcpruntime.CodeThreadNotFound)
			wantRefusal(t, who.name+" thread_read of "+id, toolsCall(t, rt, who.caller, "thread_read", `{"threadId":"`+id+`"}`), mcpruntime.CodeThreadNotFound)
		}
	}
	wantRefusal(t, "client thread_read without thread", toolsCall(t, rt, pRW, "thread_read", `{}`), mcpruntime.CodeThreadCredentialRequired)
	if n := len(threadOf(t, rt, "T").Messages); n != 0 {
		t.Errorf("T has %d messages, want 0", n)
	}
}

// TestRuntimeCapabilities: the built-in reports who the caller is and
// which tools it may call now; thread_post appears only with a run.
func TestRuntimeCapabilities(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Capabilities: []string{"x"}}))
	createThreads(t, rt, "T")
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_x"}, Access: mcpruntime.AccessRead, Capability: "x", Handler: toolsOKHandler(nil)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_y"}, Access: mcpruntime.AccessRead, Capability: "y", Handler: toolsOKHandler(nil)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_mine"}, Access: mcpruntime.AccessReadAsCaller, Handler: toolsOKHandler(nil)}))
	_, tok := openMinted(t, rt, "T", "A")
	p := assertLive(t, rt, "A", tok)
	_, pRO := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	ctRW, pRW := issueClient(t, rt, "rw", memdb.AccessReadWrite)

	caps := func(caller mcpruntime.Principal) map[string]any {
		t.Helper()
		res := toolsCall(t, rt, caller, "runtime_capabilities", "")
		if res.IsError {
			t.Fatalf("runtime_capabilities = %+v", res)
		}
		// An embedder gets the built-in's structured content as the JSON it
		// can decode, the same bytes as the text block.
		if raw, ok := res.StructuredContent.(json.RawMessage); !ok || string(raw) != resultText(res) {
			t.Fatalf("runtime_capabilities structuredContent %T %s, want a json.RawMessage of its text %s", res.StructuredContent, res.StructuredContent, resultText(res))
		}
		return toolsStructured(t, "runtime_capabilities", res)
	}
	readTools := []any{"host_mine", "host_x", "runtime_capabilities", "thread_list", "thread_read"}
	want := map[string]any{
		"namespaceKind": "provider", "threadId": "T", "instance": "A",
		"capabilities": []any{"x"}, "tools": readTools,
	}
	if diff := cmp.Diff(want, caps(p)); diff != "" {
		t.Errorf("provider without a run (-want +got):\n%s", diff)
	}

	run, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	want["tools"] = []any{"host_mine", "host_x", "runtime_capabilities", "thread_list", "thread_post", "thread_read"}
	if diff := cmp.Diff(want, caps(p)); diff != "" {
		t.Errorf("provider with a run (-want +got):\n%s", diff)
	}
	noErr(t, rt.EndRun(ctx, "T", run))
	want["tools"] = readTools
	if diff := cmp.Diff(want, caps(p)); diff != "" {
		t.Errorf("provider after EndRun (-want +got):\n%s", diff)
	}

	wantRO := map[string]any{
		"namespaceKind": "client", "clientId": pRO.Client, "access": memdb.AccessReadOnly,
		"capabilities": []any{}, "tools": []any{"runtime_capabilities", "thread_list", "thread_read"},
	}
	if diff := cmp.Diff(wantRO, caps(pRO)); diff != "" {
		t.Errorf("read-only client (-want +got):\n%s", diff)
	}
	wantRW := map[string]any{
		"namespaceKind": "client", "clientId": ctRW.ClientID, "access": memdb.AccessReadWrite,
		"capabilities": []any{}, "tools": []any{"runtime_capabilities", "thread_list", "thread_post", "thread_read"},
	}
	if diff := cmp.Diff(wantRW, caps(pRW)); diff != "" {
		t.Errorf("read-write client (-want +got):\n%s", diff)
	}
}

// toolsHTTPSession initializes an MCP session over raw HTTP and returns a
// function that posts a JSON-RPC body on it.
func toolsHTTPSession(t *testing.T, ts *httptest.Server, tok string) func(body string) (int, map[string]any) {
	t.Helper()
	resp, body := interopPost(t, ts, tok, "", `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"tools-test","version":"1"}}}`)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize = %s %s", resp.Status, body)
	}
	return func(in string) (int, map[string]any) {
		t.Helper()
		resp, out := interopPost(t, ts, tok, sid, in)
		var m map[string]any
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("POST %s: %s: body %q is not JSON: %v", in, resp.Status, out, err)
		}
		return resp.StatusCode, m
	}
}

// TestToolsOverHTTP: the same rules through the endpoint: refusals are
// 200 results with isError and a code, an unknown tool is -32602.
func TestToolsOverHTTP(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	ro, _ := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_x"}, Access: mcpruntime.AccessRead, Capability: "x", Handler: toolsOKHandler(nil)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_mine"}, Access: mcpruntime.AccessReadAsCaller, Handler: toolsOKHandler(nil)}))
	ts, _ := interopServer(t, rt)
	prov := toolsHTTPSession(t, ts, tok)
	client := toolsHTTPSession(t, ts, ro.Token)

	call := func(name, args string) string {
		return `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
	}
	tests := []struct {
		name string
		post func(string) (int, map[string]any)
		body string
		code string
	}{
		{"provider posts", prov, call("thread_post", `{"text":"hi"}`), ""},
		{"invalid arguments", prov, call("thread_post", `{"text":""}`), mcpruntime.CodeInvalidArguments},
		{"capability denied", prov, call("host_x", `{}`), mcpruntime.CodeCapabilityDenied},
		{"missing thread", prov, call("thread_read", `{"threadId":"ghost"}`), mcpruntime.CodeThreadNotFound},
		{"client readAsCaller", client, call("host_mine", `{}`), mcpruntime.CodeThreadCredentialRequired},
		{"read-only client posts", client, call("thread_post", `{"text":"x","threadId":"T"}`), mcpruntime.CodeCapabilityDenied},
		{"client reads T", client, call("thread_read", `{"threadId":"T"}`), ""},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			status, m := test.post(test.body)
			res, ok := m["result"].(map[string]any)
			if status != http.StatusOK || !ok {
				t.Fatalf("tools/call = %d %v, want 200 with a result", status, m)
			}
			sc, _ := res["structuredContent"].(map[string]any)
			if isErr, _ := res["isError"].(bool); isErr != (test.code != "") || (test.code != "" && sc["code"] != test.code) {
				t.Errorf("tools/call result = %v, want code %q", res, test.code)
			}
			if content, _ := res["content"].([]any); len(content) != 1 {
				t.Errorf("content = %v, want one text block", res["content"])
			}
		})
	}

	status, m := prov(call("no_such_tool", `{}`))
	if e, _ := m["error"].(map[string]any); status != http.StatusOK || e["code"] != float64(-32602) {
		t.Errorf("unknown tool = %d %v, want 200 with JSON-RPC error -32602", status, m)
	}
	status, m = prov(`{"jsonrpc":"2.0","id":8,"method":"tools/list"}`)
	res, _ := m["result"].(map[string]any)
	tools, _ := res["tools"].([]any)
	var names []string
	for _, tl := range tools {
		names = append(names, tl.(map[string]any)["name"].(string))
	}
	if diff := cmp.Diff([]string{"host_mine", "host_x", "runtime_capabilities", "thread_list", "thread_post", "thread_read"}, names); status != http.StatusOK || diff != "" {
		t.Errorf("tools/list = %d, names (-want +got):\n%s", status, diff)
	}
}

// TestRefusalFitsTheOutputSchema: a refusal from a tool that declares an
// output schema carries no structuredContent that breaks it — a client that
// validates the two (the TypeScript SDK v1) would throw the refusal away —
// and its text still begins with the code; a tool without one keeps the
// {code, message} structured content.
func TestRefusalFitsTheOutputSchema(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tokIdle := openMinted(t, rt, "T", "A") // T has no run: every mutation is refused
	pIdle := assertLive(t, rt, "idle provider", tokIdle)

	type posted struct {
		Seq uint64 `json:"seq"`
	}
	noErr(t, mcpruntime.AddTool(rt, mcpruntime.Tool{Tool: mcp.Tool{Name: "typed_post"}, Access: mcpruntime.AccessMutate},
		func(ctx context.Context, call *mcpruntime.ToolCall, _ struct{}) (*mcp.CallToolResult, posted, error) {
			m, err := mcpruntime.Mutate[memdb.Message](ctx, call.Runtime(), call.Caller, "", thread.AppendMessage{Text: "x"})
			return nil, posted{Seq: m.Seq}, err
		}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "schema_refuses", OutputSchema: json.RawMessage(`{"type":"object","required":["seq"],"properties":{"seq":{"type":"integer"}}}`)},
		Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return mcpruntime.Refuse(mcpruntime.CodeInvalidArguments, "no"), nil
		},
	}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "schema_admits", OutputSchema: json.RawMessage(`{"type":"object","properties":{"code":{"type":"string"}}}`)},
		Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return mcpruntime.Refuse(mcpruntime.CodeInvalidArguments, "no"), nil
		},
	}))

	for _, tt := range []struct {
		tool, code string
		keeps      bool // structuredContent kept: it matches the schema
	}{
		{"typed_post", mcpruntime.CodeParentNotActive, false},
		{"schema_refuses", mcpruntime.CodeInvalidArguments, false},
		{"schema_admits", mcpruntime.CodeInvalidArguments, true},
	} {
		res, err := rt.CallTool(ctx, pIdle, tt.tool, nil, nil)
		noErr(t, err)
		if !res.IsError || !strings.HasPrefix(resultText(res), tt.code+": ") {
			t.Errorf("%s: isError %v, text %q; want a refusal whose text begins %q", tt.tool, res.IsError, resultText(res), tt.code+": ")
		}
		if kept := res.StructuredContent != nil; kept != tt.keeps {
			t.Errorf("%s: structuredContent %v, want kept=%v", tt.tool, res.StructuredContent, tt.keeps)
		}
		if tt.keeps {
			wantRefusal(t, tt.tool, res, tt.code)
		}
	}
	if n := len(threadOf(t, rt, "T").Messages); n != 0 {
		t.Errorf("T has %d messages after refused posts, want 0", n)
	}
}

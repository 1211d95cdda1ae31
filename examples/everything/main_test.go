package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The fixtures of conformance/SCENARIOS.md §2, by the names the suite uses.
var (
	wantTools = []string{
		"json_schema_2020_12_tool", "test_audio_content", "test_elicitation", "test_elicitation_sep1034_defaults",
		"test_elicitation_sep1330_enums", "test_embedded_resource", "test_error_handling", "test_image_content",
		"test_input_required_result_capabilities", "test_input_required_result_elicitation",
		"test_input_required_result_list_roots", "test_input_required_result_multi_round",
		"test_input_required_result_multiple_inputs", "test_input_required_result_request_state",
		"test_input_required_result_sampling", "test_input_required_result_tampered_state",
		"test_logging_tool", "test_missing_capability", "test_multiple_content_types", "test_reconnection",
		"test_sampling", "test_simple_text", "test_streaming_elicitation", "test_tool_with_logging",
		"test_tool_with_progress", "test_trigger_prompt_change", "test_trigger_tool_change", "test_x_mcp_header",
	}
	wantPrompts = []string{"test_input_required_result_prompt", "test_prompt_with_arguments", "test_prompt_with_embedded_resource", "test_prompt_with_image", "test_simple_prompt"}
)

func fixtureRuntime(t *testing.T) (*mcpruntime.Runtime, mcpruntime.Principal) {
	t.Helper()
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	if err := register(rt); err != nil {
		t.Fatalf("register: %v", err)
	}
	tok, err := rt.IssueClient(context.Background(), "test", "read-write")
	if err != nil {
		t.Fatal(err)
	}
	p, err := rt.Authenticate(tok.Token)
	if err != nil {
		t.Fatal(err)
	}
	return rt, p
}

// TestFixturesRegistered: every tool of the suite is there, with a
// description and an object input schema; the 2020-12 schema is listed
// verbatim; the built-ins are there too.
func TestFixturesRegistered(t *testing.T) {
	rt, _ := fixtureRuntime(t)
	var names []string
	for _, ti := range rt.Tools() {
		if strings.HasPrefix(ti.Name, "test_") || strings.HasPrefix(ti.Name, "json_") {
			names = append(names, ti.Name)
		}
		var schema map[string]any
		if err := json.Unmarshal(ti.InputSchema, &schema); err != nil || schema["type"] != "object" || ti.Description == "" {
			t.Errorf("tool %s: description %q, schema %s", ti.Name, ti.Description, ti.InputSchema)
		}
		if ti.Name == "json_schema_2020_12_tool" {
			var want map[string]any
			if err := json.Unmarshal([]byte(schema2020), &want); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(want, schema); diff != "" {
				t.Errorf("2020-12 schema (-want +got):\n%s", diff)
			}
		}
	}
	if diff := cmp.Diff(wantTools, names); diff != "" {
		t.Errorf("tools (-want +got):\n%s", diff)
	}
}

func call(t *testing.T, rt *mcpruntime.Runtime, p mcpruntime.Principal, name, args string) *mcp.CallToolResult {
	t.Helper()
	res, err := rt.CallTool(context.Background(), p, name, json.RawMessage(args), nil)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return res
}

func contentTypes(t *testing.T, res *mcp.CallToolResult) []string {
	t.Helper()
	b, _ := json.Marshal(res)
	var w struct {
		Content []struct {
			Type     string `json:"type"`
			MIMEType string `json:"mimeType"`
		} `json:"content"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range w.Content {
		out = append(out, c.Type+" "+c.MIMEType)
	}
	return out
}

// TestToolFixtures: what the suite checks of each tool's first answer.
func TestToolFixtures(t *testing.T) {
	rt, p := fixtureRuntime(t)
	for _, c := range []struct{ tool, args, want string }{
		{"test_simple_text", `{}`, "text "},
		{"test_image_content", `{}`, "image image/png"},
		{"test_audio_content", `{}`, "audio audio/wav"},
		{"test_embedded_resource", `{}`, "resource "},
		{"test_multiple_content_types", `{}`, "text ,image image/png,resource "},
		{"test_streaming_elicitation", `{}`, "text "},
		{"test_x_mcp_header", `{"region":"Hello"}`, "text "},
	} {
		res := call(t, rt, p, c.tool, c.args)
		if got := strings.Join(contentTypes(t, res), ","); got != c.want || res.IsError {
			t.Errorf("%s content = %q (isError %v), want %q", c.tool, got, res.IsError, c.want)
		}
	}
	if res := call(t, rt, p, "test_error_handling", `{}`); !res.IsError || res.Content[0].(*mcp.TextContent).Text == "" {
		t.Errorf("test_error_handling = %+v", res)
	}
	var progress []float64
	res, err := rt.CallTool(context.Background(), p, "test_tool_with_progress", nil, func(p, _ float64, _ string) { progress = append(progress, p) })
	if err != nil || res.IsError || !cmp.Equal(progress, []float64{0, 50, 100}) {
		t.Errorf("test_tool_with_progress: %v, progress %v", err, progress)
	}
	// The ones that ask: the first round names what they need.
	for _, c := range []struct{ tool, args, key string }{
		{"test_sampling", `{"prompt":"hi"}`, "llm"},
		{"test_elicitation", `{"message":"who?"}`, "user"},
		{"test_elicitation_sep1034_defaults", `{}`, "form"},
		{"test_elicitation_sep1330_enums", `{}`, "form"},
		{"test_input_required_result_elicitation", `{}`, "user_name"},
		{"test_input_required_result_sampling", `{}`, "capital_question"},
		{"test_input_required_result_list_roots", `{}`, "client_roots"},
		{"test_input_required_result_request_state", `{}`, "confirm"},
		{"test_input_required_result_multiple_inputs", `{}`, "greeting"},
		{"test_input_required_result_multi_round", `{}`, "step1"},
		{"test_input_required_result_tampered_state", `{}`, "confirm"},
		{"test_missing_capability", `{}`, "sample"},
	} {
		res := call(t, rt, p, c.tool, c.args)
		if _, ok := res.InputRequests[c.key]; !ok {
			t.Errorf("%s = %+v, want an input request %q", c.tool, res, c.key)
		}
	}
	// test_trigger_tool_change adds the transient tool, then removes it.
	for _, want := range []bool{true, false} {
		call(t, rt, p, "test_trigger_tool_change", `{}`)
		has := slices.ContainsFunc(rt.Tools(), func(ti mcpruntime.ToolInfo) bool { return ti.Name == transientTool })
		if has != want {
			t.Errorf("after test_trigger_tool_change: transient tool listed = %v, want %v", has, want)
		}
	}
	call(t, rt, p, "test_trigger_prompt_change", `{}`)
	if _, err := rt.GetPrompt(context.Background(), p, transientPrompt, nil); err != nil {
		t.Errorf("transient prompt after test_trigger_prompt_change: %v", err)
	}
}

// TestResourceAndPromptFixtures: what the suite checks of resources,
// prompts and completion.
func TestResourceAndPromptFixtures(t *testing.T) {
	rt, p := fixtureRuntime(t)
	ctx := context.Background()
	for uri, want := range map[string]string{
		"test://static-text": "text/plain", "test://static-binary": "image/png", watchedURI: "text/plain", "test://template/123/data": "application/json",
	} {
		res, err := rt.ReadResource(ctx, p, uri)
		if err != nil || len(res.Contents) != 1 || res.Contents[0].MIMEType != want || res.Contents[0].URI != uri ||
			(res.Contents[0].Text == "" && len(res.Contents[0].Blob) == 0) {
			t.Errorf("read %s = %+v, %v", uri, res, err)
		}
		if strings.Contains(uri, "123") && !strings.Contains(res.Contents[0].Text, "123") {
			t.Errorf("template read = %q, want the id in it", res.Contents[0].Text)
		}
	}
	if _, err := rt.ReadResource(ctx, p, "test://nonexistent-resource-for-conformance-testing"); err == nil {
		t.Error("read of an unknown URI succeeded")
	}
	for _, name := range wantPrompts {
		args := map[string]string{"arg1": "testValue1", "arg2": "testValue2", "resourceUri": "test://example-resource"}
		res, err := rt.GetPrompt(ctx, p, name, args)
		if err != nil {
			t.Errorf("prompt %s: %v", name, err)
			continue
		}
		b, _ := json.Marshal(res)
		switch name {
		case "test_input_required_result_prompt":
			if _, ok := res.InputRequests["user_context"]; !ok {
				t.Errorf("%s = %s, want an input request", name, b)
			}
		case "test_prompt_with_arguments":
			if !bytes.Contains(b, []byte("testValue1")) || !bytes.Contains(b, []byte("testValue2")) {
				t.Errorf("%s = %s", name, b)
			}
		case "test_prompt_with_embedded_resource":
			if !bytes.Contains(b, []byte(`"type":"resource"`)) {
				t.Errorf("%s = %s", name, b)
			}
		case "test_prompt_with_image":
			if !bytes.Contains(b, []byte(`"type":"image"`)) {
				t.Errorf("%s = %s", name, b)
			}
		}
	}
	c, err := rt.Complete(ctx, p, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "test_prompt_with_arguments"}, Argument: mcp.CompleteParamsArgument{Name: "arg1", Value: "test"}})
	if err != nil || !cmp.Equal(c.Completion.Values, []string{"testValue1", "testValue2"}) {
		t.Errorf("completion = %+v, %v", c, err)
	}
}

// TestRunAnnounces: run prints the URL and two tokens of two principals,
// serves MCP there, and returns once its context is done.
func TestRunAnnounces(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-listen", "127.0.0.1:0"}, pw, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("read the announcement: %v", err)
	}
	go io.Copy(io.Discard, pr)
	var a announcement
	if err := json.Unmarshal([]byte(line), &a); err != nil || !strings.HasPrefix(a.URL, "http://127.0.0.1:") || !strings.HasSuffix(a.URL, "/mcp") || a.Token == "" || a.OtherToken == "" || a.Token == a.OtherToken {
		t.Fatalf("announcement %q: %v", line, err)
	}
	initialize := func(tok, sid string) (int, string) {
		body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		if sid != "" {
			body = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
		}
		req, _ := http.NewRequest(http.MethodPost, a.URL, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if sid != "" {
			req.Header.Set("Mcp-Session-Id", sid)
			req.Header.Set("MCP-Protocol-Version", "2025-11-25")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	status, sid := initialize(a.Token, "")
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize with token = %d, session %q", status, sid)
	}
	if status, _ := initialize(a.Token, sid); status != http.StatusOK {
		t.Errorf("ping on the session = %d", status)
	}
	if status, _ := initialize(a.OtherToken, sid); status != http.StatusNotFound {
		t.Errorf("otherToken on token's session = %d, want 404 (another principal)", status)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("run = %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("run did not return after its context ended")
	}
}

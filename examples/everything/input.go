package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime"
)

// The multi-round-trip fixtures of SEP-2322 (conformance/SCENARIOS.md §5.3). Each is
// one handler for both eras: it reads the answers it has (Input) and its
// own state (State), and returns InputRequired for what it still needs.

func nameSchema() map[string]any {
	return map[string]any{"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string"}}, "required": []string{"name"}}
}

func askNameParams(message string) *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: message, RequestedSchema: nameSchema()}
}

func confirmParams() *mcp.ElicitParams {
	return &mcp.ElicitParams{Message: "Please confirm", RequestedSchema: map[string]any{
		"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}}}
}

func greetingParams(prompt string) *mcp.CreateMessageParams {
	return &mcp.CreateMessageParams{Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: prompt}}}, MaxTokens: 50}
}

// accepted returns the content of an accepted elicitation answered as key.
func accepted(x *mcpruntime.Exchange, key string) (map[string]any, bool) {
	e, ok := x.Elicitation(key)
	if !ok || e.Action != "accept" {
		return nil, false
	}
	return e.Content, true
}

func registerInputTools(rt *mcpruntime.Runtime) error {
	tools := []mcpruntime.Tool{
		tool("test_input_required_result_elicitation", "MRTR (SEP-2322): asks for the caller's name with an elicitation", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if c, ok := accepted(&call.Exchange, "user_name"); ok {
					if name, _ := c["name"].(string); name != "" {
						return text("Hello, " + name + "!"), nil
					}
				}
				return mcpruntime.InputRequired(mcp.InputRequestMap{"user_name": askNameParams("What is your name?")}, ""), nil
			}),
		tool("test_input_required_result_sampling", "MRTR (SEP-2322): asks for an LLM completion with a sampling request", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if ans, ok := call.Sampling("capital_question"); ok {
					return text("Sampling response: " + samplingText(ans)), nil
				}
				q := greetingParams("What is the capital of France?")
				q.MaxTokens = 100
				return mcpruntime.InputRequired(mcp.InputRequestMap{"capital_question": q}, ""), nil
			}),
		tool("test_input_required_result_list_roots", "MRTR (SEP-2322): asks for the client's roots", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if roots, ok := call.Roots("client_roots"); ok {
					var uris []string
					for _, r := range roots.Roots {
						uris = append(uris, r.URI)
					}
					return text(fmt.Sprintf("Client exposed %d root(s): %s", len(uris), strings.Join(uris, ", "))), nil
				}
				return mcpruntime.InputRequired(mcp.InputRequestMap{"client_roots": &mcp.ListRootsParams{}}, ""), nil
			}),
		tool("test_input_required_result_request_state", "MRTR (SEP-2322): carries its state alongside an elicitation", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if _, ok := accepted(&call.Exchange, "confirm"); ok && call.State() == "request_state" {
					return text("state-ok: requestState received and confirmation accepted"), nil
				}
				return mcpruntime.InputRequired(mcp.InputRequestMap{"confirm": confirmParams()}, "request_state"), nil
			}),
		tool("test_input_required_result_multiple_inputs", "MRTR (SEP-2322): asks for an elicitation, a sampling and the roots in one round", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				c, named := accepted(&call.Exchange, "user_name")
				greeting, greeted := call.Sampling("greeting")
				roots, rooted := call.Roots("client_roots")
				if named && greeted && rooted {
					return text(fmt.Sprintf("%s %v — %d root(s) visible", samplingText(greeting), c["name"], len(roots.Roots))), nil
				}
				return mcpruntime.InputRequired(mcp.InputRequestMap{
					"user_name":    askNameParams("What is your name?"),
					"greeting":     greetingParams("Generate a greeting"),
					"client_roots": &mcp.ListRootsParams{},
				}, "multiple_inputs"), nil
			}),
		tool("test_input_required_result_multi_round", "MRTR (SEP-2322): two elicitation rounds with a changing state, then the result", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				switch state := call.State(); {
				case state == "":
					return mcpruntime.InputRequired(mcp.InputRequestMap{"step1": askNameParams("Step 1: What is your name?")}, "round=1"), nil
				case state == "round=1":
					c, _ := accepted(&call.Exchange, "step1")
					name, _ := c["name"].(string)
					return mcpruntime.InputRequired(mcp.InputRequestMap{"step2": &mcp.ElicitParams{
						Message:         "Step 2: What is your favorite color?",
						RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"color": map[string]any{"type": "string"}}, "required": []string{"color"}},
					}}, "round=2;name="+name), nil
				default:
					c, _ := accepted(&call.Exchange, "step2")
					return text(fmt.Sprintf("Multi-round complete: %s likes %v", strings.TrimPrefix(state, "round=2;name="), c["color"])), nil
				}
			}),
		tool("test_input_required_result_tampered_state", "MRTR (SEP-2322): a retry whose state was tampered with is refused (the runtime seals the state)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if _, ok := accepted(&call.Exchange, "confirm"); ok && call.State() == "tampered_state" {
					return text("state-ok: requestState received and confirmation accepted"), nil
				}
				return mcpruntime.InputRequired(mcp.InputRequestMap{"confirm": confirmParams()}, "tampered_state"), nil
			}),
		tool("test_input_required_result_capabilities", "MRTR (SEP-2322): asks only for what the client's capabilities cover", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				caps := call.ClientCapabilities()
				reqs := mcp.InputRequestMap{}
				if caps.Elicitation != nil {
					reqs["user_name"] = askNameParams("What is your name?")
				}
				if caps.Sampling != nil {
					reqs["greeting"] = greetingParams("Generate a short greeting")
				}
				if caps.RootsV2 != nil || caps.Roots.ListChanged {
					reqs["client_roots"] = &mcp.ListRootsParams{}
				}
				answered := 0
				for k := range reqs {
					if _, ok := call.Input(k); ok {
						answered++
					}
				}
				if len(reqs) == 0 || answered == len(reqs) {
					return text("Capability-aware input requests fulfilled"), nil
				}
				return mcpruntime.InputRequired(reqs, ""), nil
			}),
	}
	var errs []error
	for _, t := range tools {
		errs = append(errs, rt.RegisterTool(t))
	}
	return errors.Join(errs...)
}

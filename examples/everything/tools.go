package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime"
)

// The suite's media: a 1×1 PNG and a silent WAV (the reference servers').
var (
	pngData = mustBase64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	wavData = mustBase64("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")
)

func mustBase64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// tool is a read tool of the suite: every fixture is callable by any
// principal.
func tool(name, description string, schema string, h mcpruntime.ToolHandler) mcpruntime.Tool {
	t := mcpruntime.Tool{Tool: mcp.Tool{Name: name, Description: description}, Access: mcpruntime.AccessRead, Handler: h}
	if schema != "" {
		t.InputSchema = json.RawMessage(schema)
	}
	return t
}

// pause waits d or until ctx is done, whichever comes first: the suite
// wants notifications spread out, and a cancelled call must stop.
func pause(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// schema2020 is the suite's 2020-12 schema, listed verbatim.
const schema2020 = `{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object",
 "$defs":{"address":{"$anchor":"addressDef","type":"object","properties":{"street":{"type":"string"},"city":{"type":"string"}}}},
 "properties":{"name":{"type":"string"},"address":{"$ref":"#/$defs/address"},
   "contactMethod":{"type":"string","enum":["phone","email"]},"phone":{"type":"string"},"email":{"type":"string"}},
 "allOf":[{"anyOf":[{"required":["phone"]},{"required":["email"]}]}],
 "if":{"properties":{"contactMethod":{"const":"phone"}},"required":["contactMethod"]},
 "then":{"required":["phone"]},"else":{"required":["email"]},
 "additionalProperties":false}`

// transient names what test_trigger_tool_change and
// test_trigger_prompt_change add and remove.
const (
	transientTool   = "__transient_tool_for_list_changed"
	transientPrompt = "__transient_prompt_for_list_changed"
)

func registerTools(rt *mcpruntime.Runtime) error {
	tools := []mcpruntime.Tool{
		tool("test_simple_text", "Tests simple text content response", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return text("This is a simple text response for testing."), nil
		}),
		tool("test_image_content", "Tests image content response", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.ImageContent{Data: pngData, MIMEType: "image/png"}}}, nil
		}),
		tool("test_audio_content", "Tests audio content response", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.AudioContent{Data: wavData, MIMEType: "audio/wav"}}}, nil
		}),
		tool("test_embedded_resource", "Tests embedded resource content response", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
				URI: "test://embedded-resource", MIMEType: "text/plain", Text: "This is an embedded resource content."}}}}, nil
		}),
		tool("test_multiple_content_types", "Tests response with multiple content types (text, image, resource)", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Multiple content types test:"},
				&mcp.ImageContent{Data: pngData, MIMEType: "image/png"},
				&mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: "test://mixed-content-resource", MIMEType: "application/json", Text: `{"test":"data","value":123}`}},
			}}, nil
		}),
		tool("test_error_handling", "Tests error response handling", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "This tool intentionally returns an error for testing"}}, IsError: true}, nil
		}),
		tool("test_tool_with_progress", "Tests tool that reports progress notifications", "", func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			for _, p := range []float64{0, 50, 100} {
				call.Progress(p, 100, fmt.Sprintf("Completed step %.0f of 100", p))
				if err := pause(ctx, 50*time.Millisecond); err != nil {
					return nil, err
				}
			}
			return text("Progress test completed"), nil
		}),
		tool("test_tool_with_logging", "Tests tool that emits log messages during execution", "", func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			for i, msg := range []string{"Tool execution started", "Tool processing data", "Tool execution completed"} {
				if i > 0 {
					if err := pause(ctx, 50*time.Millisecond); err != nil {
						return nil, err
					}
				}
				call.Log("info", "everything", msg)
			}
			return text("Tool with logging executed successfully"), nil
		}),
		tool("json_schema_2020_12_tool", "Tool with JSON Schema 2020-12 features for conformance testing (SEP-1613, SEP-2106)", schema2020,
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				return text("JSON Schema 2020-12 tool called with: " + string(call.Arguments)), nil
			}),
		tool("test_reconnection", "Tests SSE stream disconnection and client reconnection (SEP-1699): closes the stream mid-call and sends the result after the client reconnects", "",
			func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				call.CloseStream()
				if err := pause(ctx, 100*time.Millisecond); err != nil {
					return nil, err
				}
				return text("Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure."), nil
			}),
		tool("test_x_mcp_header", "Tests SEP-2243 Mcp-Param-* server-side validation",
			`{"type":"object","properties":{"region":{"type":"string","description":"mirrored into Mcp-Param-Region","x-mcp-header":"Region"},"level":{"type":"integer","description":"non-mirrored argument"}}}`,
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				var in struct {
					Region string `json:"region"`
				}
				_ = json.Unmarshal(call.Arguments, &in) // validated against the schema already
				return text("region=" + in.Region), nil
			}),
		tool("test_missing_capability", "Requires the sampling client capability; without it the call is refused with -32021 (SEP-2575)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				if call.ClientCapabilities().Sampling != nil {
					return text("Client declared the sampling capability; tool executed."), nil
				}
				// Asking what the client did not declare: the runtime refuses
				// it (ErrCapabilityNotDeclared), never asks.
				return mcpruntime.InputRequired(mcp.InputRequestMap{"sample": &mcp.CreateMessageParams{
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "ping"}}}, MaxTokens: 10}}, ""), nil
			}),
		tool("test_streaming_elicitation", "Streams progress notifications while a call is in flight; its stream carries no JSON-RPC request (SEP-2575)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				call.Progress(1, 2, "streaming")
				call.Progress(2, 2, "done")
				return text("stream observed: result frames only, no top-level requests"), nil
			}),
		tool("test_logging_tool", "Attempts to emit a log message; it reaches only a client that asked for logs (SEP-2575)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				call.Log("info", "everything", "test_logging_tool executed")
				return text("Log attempted; sent only where the client set a log level."), nil
			}),
		tool("test_trigger_tool_change", "Adds or removes a transient tool, so that the tool list changes (SEP-2575)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				rt := call.Runtime()
				if !rt.RemoveTool(transientTool) {
					if err := rt.RegisterTool(tool(transientTool, "Transient tool used to trigger tools/list_changed", "", func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
						return text("transient"), nil
					})); err != nil {
						return nil, err
					}
				}
				return text("tools_list_changed published"), nil
			}),
		tool("test_trigger_prompt_change", "Adds or removes a transient prompt, so that the prompt list changes (SEP-2575)", "",
			func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				rt := call.Runtime()
				if !rt.RemovePrompt(transientPrompt) {
					if err := rt.RegisterPrompt(prompt(transientPrompt, "Transient prompt used to trigger prompts/list_changed", "transient")); err != nil {
						return nil, err
					}
				}
				return text("prompts_list_changed published"), nil
			}),
	}
	var errs []error
	for _, t := range tools {
		errs = append(errs, rt.RegisterTool(t))
	}
	return errors.Join(append(errs, registerAskingTools(rt))...)
}

// samplingArgs are test_sampling's arguments.
type samplingArgs struct {
	Prompt string `json:"prompt" jsonschema:"The prompt to send to the LLM"`
}

// elicitationArgs are test_elicitation's arguments.
type elicitationArgs struct {
	Message string `json:"message" jsonschema:"The message to show the user"`
}

// registerAskingTools registers the 2025 fixtures that ask the client —
// written once: in a 2025 session the runtime sends the request over the
// call's stream and calls the handler again with the answer.
func registerAskingTools(rt *mcpruntime.Runtime) error {
	sampling := mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "test_sampling", Description: "Tests server-initiated sampling (LLM completion request)"},
		Access: mcpruntime.AccessRead,
	}, func(_ context.Context, call *mcpruntime.ToolCall, in samplingArgs) (*mcp.CallToolResult, any, error) {
		if ans, ok := call.Sampling("llm"); ok {
			return text("LLM response: " + samplingText(ans)), nil, nil
		}
		return mcpruntime.InputRequired(mcp.InputRequestMap{"llm": &mcp.CreateMessageParams{
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: in.Prompt}}}, MaxTokens: 100,
		}}, ""), nil, nil
	})
	// The README's elicitation example.
	elicitation := mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "test_elicitation", Description: "Tests server-initiated elicitation (user input request)"},
		Access: mcpruntime.AccessRead,
	}, func(_ context.Context, call *mcpruntime.ToolCall, in elicitationArgs) (*mcp.CallToolResult, any, error) {
		e, ok := call.Elicitation("user")
		if !ok {
			return mcpruntime.InputRequired(mcp.InputRequestMap{"user": &mcp.ElicitParams{
				Message: in.Message,
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{
					"username": map[string]any{"type": "string", "description": "Your preferred username"},
					"email":    map[string]any{"type": "string", "description": "Your email address"},
				}, "required": []string{"username"}},
			}}, ""), nil, nil
		}
		return text(fmt.Sprintf("Elicitation result: action=%s, content=%v", e.Action, e.Content)), nil, nil
	})
	defaults := rt.RegisterTool(tool("test_elicitation_sep1034_defaults", "Tests elicitation with default values per SEP-1034", "", elicitWith("Test defaults for primitives", map[string]any{
		"type": "object", "properties": map[string]any{
			"name":     map[string]any{"type": "string", "description": "User name", "default": "John Doe"},
			"age":      map[string]any{"type": "integer", "description": "User age", "default": 30},
			"score":    map[string]any{"type": "number", "description": "User score", "default": 95.5},
			"status":   map[string]any{"type": "string", "description": "User status", "enum": []string{"active", "inactive", "pending"}, "default": "active"},
			"verified": map[string]any{"type": "boolean", "description": "Verification status", "default": true},
		}})))
	titled := func(vals ...string) []map[string]any {
		out := make([]map[string]any, 0, len(vals)/2)
		for i := 0; i < len(vals); i += 2 {
			out = append(out, map[string]any{"const": vals[i], "title": vals[i+1]})
		}
		return out
	}
	opts := titled("value1", "First Option", "value2", "Second Option", "value3", "Third Option")
	enums := rt.RegisterTool(tool("test_elicitation_sep1330_enums", "Tests elicitation with enum schema improvements per SEP-1330", "", elicitWith("Test enum schemas", map[string]any{
		"type": "object", "properties": map[string]any{
			"untitledSingle": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}},
			"titledSingle":   map[string]any{"type": "string", "oneOf": opts},
			"legacyEnum":     map[string]any{"type": "string", "enum": []string{"opt1", "opt2", "opt3"}, "enumNames": []string{"Option One", "Option Two", "Option Three"}},
			"untitledMulti":  map[string]any{"type": "array", "minItems": 1, "maxItems": 3, "items": map[string]any{"type": "string", "enum": []string{"option1", "option2", "option3"}}},
			"titledMulti":    map[string]any{"type": "array", "minItems": 1, "maxItems": 3, "items": map[string]any{"type": "string", "anyOf": opts}},
		}})))
	return errors.Join(sampling, elicitation, defaults, enums)
}

// elicitWith is a handler that elicits schema once and reports the answer.
func elicitWith(message string, schema map[string]any) mcpruntime.ToolHandler {
	return func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
		e, ok := call.Elicitation("form")
		if !ok {
			return mcpruntime.InputRequired(mcp.InputRequestMap{"form": &mcp.ElicitParams{Message: message, RequestedSchema: schema}}, ""), nil
		}
		return text(fmt.Sprintf("Elicitation result: action=%s, content=%v", e.Action, e.Content)), nil
	}
}

// samplingText is the text of a sampling answer (Exchange.Sampling: one
// shape in both eras).
func samplingText(ans *mcp.CreateMessageWithToolsResult) string {
	for _, c := range ans.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return "(non-text response)"
}

package mcpruntime_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestInteropGoSDKAsks drives the runtime's asks of a 2025 session with
// the official Go SDK client (SPEC §5b.18): a tool written once for both
// eras returns InputRequired for an elicitation, then for a sampling and
// the client's roots (the name it got in its state); the runtime asks the client over the call's stream,
// the SDK client's handlers answer, and the tool's result shows every
// answer and the state it kept between rounds.
func TestInteropGoSDKAsks(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "greet_and_sample", Description: "asks the user's name, then an LLM and the roots"},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			// Each round's answers are only that round's: what an earlier
			// round got travels in the handler's state.
			if name, ok := call.Input("name"); ok {
				return mcpruntime.InputRequired(mcp.InputRequestMap{
					"llm": &mcp.CreateMessageParams{
						Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Say hi"}}},
						MaxTokens: 20,
					},
					"roots": &mcp.ListRootsParams{},
				}, fmt.Sprint(name.(*mcp.ElicitResult).Content["name"])), nil
			}
			answer, okS := call.Input("llm")
			roots, okR := call.Input("roots")
			if call.State() == "" || !okS || !okR {
				return mcpruntime.InputRequired(mcp.InputRequestMap{"name": &mcp.ElicitParams{
					Message: "Your name?",
					RequestedSchema: map[string]any{"type": "object", "required": []string{"name"},
						"properties": map[string]any{"name": map[string]any{"type": "string"}}},
				}}, ""), nil
			}
			sampled := ""
			switch a := answer.(type) {
			case *mcp.CreateMessageResult:
				sampled = a.Content.(*mcp.TextContent).Text
			case *mcp.CreateMessageWithToolsResult:
				sampled = a.Content[0].(*mcp.TextContent).Text
			}
			r := roots.(*mcp.ListRootsResult)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{
				Text: fmt.Sprintf("%s said %q, %d root %s", call.State(), sampled, len(r.Roots), r.Roots[0].URI),
			}}}, nil
		},
	}))
	ts, _ := interopServer(t, rt)
	var elicited, sampled atomic.Int32
	opts := &mcp.ClientOptions{
		ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			elicited.Add(1)
			if req.Params.Message != "Your name?" {
				return nil, fmt.Errorf("unexpected elicitation %q", req.Params.Message)
			}
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "Ada"}}, nil
		},
		CreateMessageHandler: func(_ context.Context, req *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			sampled.Add(1)
			return &mcp.CreateMessageResult{Role: "assistant", Model: "test-model", Content: &mcp.TextContent{Text: "hi there"}}, nil
		},
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "interop-asks", Version: "1.0.0"}, opts)
	client.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	cs := sdkConnectClient(t, ts, tok, client)
	defer cs.Close()

	res := sdkCall(t, cs, &mcp.CallToolParams{Name: "greet_and_sample", Arguments: map[string]any{}})
	if res.IsError {
		t.Fatalf("greet_and_sample = error %q", sdkText(res))
	}
	if got, want := sdkText(res), `Ada said "hi there", 1 root file:///work`; got != want {
		t.Fatalf("greet_and_sample = %q, want %q", got, want)
	}
	if elicited.Load() != 1 || sampled.Load() != 1 {
		t.Fatalf("the client was asked %d elicitations and %d samplings, want 1 and 1", elicited.Load(), sampled.Load())
	}
}

// TestInteropGoSDKPromptAsks: a prompts/get whose handler needs the
// client is asked the same way (SPEC §5b.18): the go-sdk client's
// elicitation handler answers, and the prompt's messages carry the answer.
func TestInteropGoSDKPromptAsks(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	noErr(t, rt.RegisterPrompt(mcpruntime.Prompt{
		Prompt: mcp.Prompt{Name: "with_context", Description: "asks the user for context"},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			if ans, ok := get.Input("context"); ok {
				return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user",
					Content: &mcp.TextContent{Text: fmt.Sprintf("Context: %v", ans.(*mcp.ElicitResult).Content["context"])}}}}, nil
			}
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"context": &mcp.ElicitParams{
				Message:         "Context?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"context": map[string]any{"type": "string"}}, "required": []string{"context"}},
			}}}, nil
		},
	}))
	ts, _ := interopServer(t, rt)
	client := mcp.NewClient(&mcp.Implementation{Name: "interop-asks", Version: "1.0.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"context": "the repo"}}, nil
		},
	})
	cs := sdkConnectClient(t, ts, tok, client)
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "with_context"})
	if err != nil {
		t.Fatalf("GetPrompt = %v", err)
	}
	if len(res.Messages) != 1 {
		t.Fatalf("GetPrompt = %d messages, want 1", len(res.Messages))
	}
	if got, ok := res.Messages[0].Content.(*mcp.TextContent); !ok || got.Text != "Context: the repo" {
		t.Fatalf("GetPrompt message = %#v, want the text Context: the repo", res.Messages[0].Content)
	}
}

// TestInteropGoSDKCancelClosesDialog (SPEC §5b.18): when a go-sdk client
// cancels a call that waits on its elicitation, the runtime's
// notifications/cancelled for the ask reaches the client on a stream it
// still has, and the client's elicitation handler — its dialog — sees its
// context end.
func TestInteropGoSDKCancelClosesDialog(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool: mcp.Tool{Name: "ask_forever"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			if _, ok := call.Elicitation("q"); ok {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "answered"}}}, nil
			}
			return mcpruntime.InputRequired(mcp.InputRequestMap{"q": &mcp.ElicitParams{Message: "Sure?",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}}}}, ""), nil
		},
	}))
	ts, _ := interopServer(t, rt)
	opened, closed, stop := make(chan struct{}), make(chan struct{}), make(chan struct{})
	client := mcp.NewClient(&mcp.Implementation{Name: "interop-cancel", Version: "1.0.0"}, &mcp.ClientOptions{
		ElicitationHandler: func(ctx context.Context, _ *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			close(opened)
			select { // the dialog stays open until the server says otherwise
			case <-ctx.Done():
				close(closed)
				return nil, ctx.Err()
			case <-stop: // the test failed: let the client close
				return nil, errors.New("the test ended")
			}
		},
	})
	cs := sdkConnectClient(t, ts, tok, client)
	defer cs.Close()
	defer close(stop)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ask_forever", Arguments: map[string]any{}})
		done <- err
	}()
	select {
	case <-opened:
	case <-time.After(10 * time.Second): // detects a hang only
		t.Fatal("the client was never asked")
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("a cancelled call returned no error")
	}
	select {
	case <-closed:
	case <-time.After(10 * time.Second): // detects a hang only
		t.Fatal("the client's elicitation stayed open after its call was cancelled: no notifications/cancelled reached it")
	}
}

package main

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/clienttest"
)

// What the modern clients' elicitation handlers answer, and what
// test_elicitation then says.
const (
	tsModernElicited = "Elicitation result: action=accept, content=map[email:ts-v2-user@example.test username:ts-v2-user]"
	goElicited       = "Elicitation result: action=accept, content=map[username:go-sdk-user]"
	simpleText       = "This is a simple text response for testing."
)

// triggerToolChange is the Go side's change: test_trigger_tool_change over
// a stateless request of its own adds or removes a tool.
func triggerToolChange(t *testing.T, a announcement) {
	t.Helper()
	status, body, err := clienttest.PostModern(a.URL, a.Token, "tools/call", "test_trigger_tool_change",
		map[string]any{"name": "test_trigger_tool_change", "arguments": map[string]any{}})
	if err != nil || status != http.StatusOK || !bytes.Contains(body, []byte("tools_list_changed published")) {
		t.Fatalf("test_trigger_tool_change: %d %s (%v)", status, body, err)
	}
}

// wantListed checks a tools/list: every fixture and built-in tool, and the
// transient tool when an odd number of changes added it.
func wantListed(t *testing.T, names []string, changes int) {
	t.Helper()
	want := append([]string{"deploy", "report", "runtime_capabilities", "thread_list", "thread_post", "thread_read"}, wantTools...)
	if changes%2 == 1 {
		want = append(want, transientTool)
	}
	slices.Sort(want)
	got := slices.Sorted(slices.Values(names))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("tools/list after %d changes (-want +got):\n%s", changes, diff)
	}
}

// onlyText returns the text of a result's only content, "" if it has
// another shape.
func onlyText(res *mcp.CallToolResult) string {
	if len(res.Content) != 1 {
		return ""
	}
	if c, ok := res.Content[0].(*mcp.TextContent); ok {
		return c.Text
	}
	return ""
}

// wantInputRound checks the exchanges of a tool that asked once: a first
// tools/call without answers or state, then the retry with the one answer
// and the sealed requestState.
func wantInputRound(t *testing.T, who string, ex []clienttest.Exchange) {
	t.Helper()
	var calls []clienttest.Exchange
	for _, e := range ex {
		if e.RPC == "tools/call" {
			calls = append(calls, e)
		}
	}
	if len(calls) != 2 || calls[0].RequestState || len(calls[0].InputResponses) != 0 ||
		!calls[1].RequestState || !cmp.Equal(calls[1].InputResponses, []string{"user"}) {
		t.Errorf("%s: the asking tool's calls %+v; want one without state or answers, then one with the requestState and the answer to \"user\"", who, calls)
	}
}

// TestModernClientsOnEverything: the official clients speak MCP 2026-07-28
// to this command's binary (built here) with the announced token: the
// TypeScript SDK v2 client (@modelcontextprotocol/client 2.4.0,
// e2e/oauth-client/modern.mjs) pinned to 2026-07-28 and in auto mode, and
// the go-sdk v1.8.0 client pinned and with its default version. Each
// connects with server/discover, lists the fixtures, calls
// test_simple_text, opens a subscriptions/listen stream for tool list
// changes and hears the one the test makes (test_trigger_tool_change), and
// calls test_elicitation, which answers input_required: the client's
// elicitation handler answers and the client retries with the sealed
// requestState, and the result is that answer. Every exchange is in the
// 2026-07-28 era, never an initialize, and no answer carries an
// Mcp-Session-Id (the header that alone would name a session the server
// made: this server has no /metrics to count them).
// modernCall is the call the TypeScript client makes in each mode: the
// host's tool with an outputSchema (the client validates the structured
// content against it) and its act tool.
var modernCall = map[string]struct {
	call clienttest.Call
	what string
	want func(isError bool, text string, structured map[string]any) bool
}{
	"pinned": {clienttest.Call{Name: "report", Arguments: map[string]any{"text": "ship the release today"}}, "structured content {words: 4, first: ship}",
		func(isError bool, _ string, sc map[string]any) bool {
			return !isError && cmp.Equal(sc, map[string]any{"words": 4.0, "first": "ship"})
		}},
	"auto": {clienttest.Call{Name: "deploy", Arguments: map[string]any{}}, "deployed main",
		func(isError bool, text string, _ map[string]any) bool { return !isError && text == "deployed main" }},
}

func TestModernClientsOnEverything(t *testing.T) {
	a := startEverything(t)
	changes := 0 // tool list changes made: each adds or removes the transient tool
	for _, mode := range []string{"pinned", "auto"} {
		t.Run("typescript/"+mode, func(t *testing.T) {
			listed := changes // the client lists before the test changes the list
			tr := clienttest.RunModern(t, clienttest.Run{
				URL: a.URL, Token: a.Token, Mode: mode,
				Call:    modernCall[mode].call,
				Listen:  map[string]any{"toolsListChanged": true},
				Trigger: func() { triggerToolChange(t, a); changes++ },
				Ask:     &clienttest.Call{Name: "test_elicitation", Arguments: map[string]any{"message": "Who are you, modern client?"}},
			})
			clienttest.WantStateless(t, "TypeScript client ("+mode+")", tr.Exchanges(""))
			for _, step := range []string{"connect", "close"} {
				if c := tr.One(t, step); c.ProtocolVersion != clienttest.Modern || c.Era != "modern" {
					t.Errorf("%s: protocol version %q, era %q; want 2026-07-28, modern", step, c.ProtocolVersion, c.Era)
				}
			}
			wantListed(t, tr.One(t, "tools/list").Tools, listed)
			if res := tr.One(t, "tools/call").Tool; res == nil || len(res.Content) != 1 || !modernCall[mode].want(res.IsError, res.Content[0].Text, res.StructuredContent) {
				t.Errorf("%s = %+v, want %s", modernCall[mode].call.Name, res, modernCall[mode].what)
			}
			if diff := cmp.Diff(map[string]any{"toolsListChanged": true}, tr.One(t, "listen").HonoredFilter); diff != "" {
				t.Errorf("honoured filter (-want +got):\n%s", diff)
			}
			want := map[string]any{"_meta": map[string]any{"io.modelcontextprotocol/subscriptionId": "listen:0"}}
			if h := tr.One(t, "notification").Heard; h == nil || h.Method != "notifications/tools/list_changed" || !cmp.Equal(want, h.Params) {
				t.Errorf("heard %+v, want notifications/tools/list_changed %v", h, want)
			}
			input := tr.Step("input")
			if len(input) != 2 || input[0].Asked != "elicitation/create" || input[0].Params["message"] != "Who are you, modern client?" ||
				input[1].Tool == nil || input[1].Tool.IsError || len(input[1].Tool.Content) != 1 || input[1].Tool.Content[0].Text != tsModernElicited {
				t.Errorf("input step %+v; want elicitation/create with the tool's message, then %q", input, tsModernElicited)
			}
			wantInputRound(t, "TypeScript client ("+mode+")", tr.Exchanges("input"))
		})
	}
	for _, version := range []string{clienttest.Modern, ""} {
		t.Run("go-sdk/version="+version, func(t *testing.T) {
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			rec := &clienttest.Recorder{Token: a.Token, Base: base}
			changed := make(chan struct{}, 8)
			var asked []string // written by the handler, read after the call returned
			client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-modern-test", Version: "1.0.0"}, &mcp.ClientOptions{
				ElicitationHandler: func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
					asked = append(asked, req.Params.Message)
					return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": "go-sdk-user"}}, nil
				},
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // detects a hang only
			defer cancel()
			cs, names := clienttest.ConnectGoSDK(t, ctx, client, a.URL, rec, version)
			wantListed(t, names, changes)
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_simple_text", Arguments: map[string]any{}})
			if err != nil || res.IsError || onlyText(res) != simpleText {
				t.Errorf("test_simple_text = %+v (%v), want %q", res, err, simpleText)
			}
			// Connect opened the listen stream for tool list changes (the
			// client has a handler) and returned once it was acknowledged.
			triggerToolChange(t, a)
			changes++
			select {
			case <-changed:
			case <-ctx.Done():
				t.Fatal("no notifications/tools/list_changed on the listen stream")
			}
			start := len(rec.Exchanges())
			res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "test_elicitation", Arguments: map[string]any{"message": "Who are you, go-sdk client?"}})
			if err != nil || res.IsError || onlyText(res) != goElicited ||
				!cmp.Equal(asked, []string{"Who are you, go-sdk client?"}) {
				t.Errorf("test_elicitation = %+v (%v) after asks %q; want %q after the tool's one question", res, err, asked, goElicited)
			}
			wantInputRound(t, "go-sdk client (version="+version+")", rec.Exchanges()[start:])
			if err := cs.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			clienttest.WantStateless(t, "go-sdk client (version="+version+")", rec.Exchanges())
		})
	}
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPChangeFeedReachesSessions: the runtime's registries reach the
// endpoint it made (the endpoint is a change feed: feed.go finds it by its
// ListChanged and ResourceUpdated): registering a tool sends
// notifications/tools/list_changed to an open standalone stream, and
// Runtime.ResourceUpdated a notifications/resources/updated to a session
// that subscribed the URI.
func TestHTTPChangeFeedReachesSessions(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	noErr(t, rt.RegisterResource(mcpruntime.Resource{
		Resource: mcp.Resource{URI: "test://watched", Name: "watched"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://watched", Text: "w"}}}, nil
		},
	}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	sub := e.Post(tok, sid, `{"jsonrpc":"2.0","id":2,"method":"resources/subscribe","params":{"uri":"test://watched"}}`).RPC(t)
	if sub.Error != nil || string(sub.Result) != "{}" {
		t.Fatalf("resources/subscribe = %+v, want {}", sub)
	}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "late_tool"}, Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{}, nil
		}}))
	rt.ResourceUpdated("test://watched")
	want := []string{"notifications/tools/list_changed", "notifications/resources/updated"}
	waitUntil(t, "the stream carries the list change and the update", func() bool {
		var got []string
		for _, ev := range st.Events() {
			var a ht.Answer
			if ev.Data != "" && json.Unmarshal([]byte(ev.Data), &a) == nil {
				got = append(got, a.Method)
			}
		}
		return slices.Equal(got, want)
	})
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// TestRegistryStorm: registrations and removals from many goroutines while
// lists and calls are served: every change is told once, lists stay
// ordered and whole, calls see a tool or ErrUnknownTool, never a torn
// registry (under -race).
func TestRegistryStorm(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	f := &recFeed{}
	mcpruntime.AddChangeFeed(rt, f)
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{ListPageSize: 3})
	p := clientOf(t, rt, memdb.AccessReadOnly)
	const writers, rounds = 4, 50
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				name := fmt.Sprintf("storm_%d_%d", w, i%5)
				if !rt.RemoveTool(name) {
					if err := rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: name}, Access: mcpruntime.AccessRead, Handler: toolsOKHandler(nil)}); err != nil {
						t.Error(err)
					}
				}
				uri := fmt.Sprintf("test://storm/%d/%d", w, i%5)
				if !rt.RemoveResource(uri) {
					if err := rt.RegisterResource(staticResource(uri, mcpruntime.AccessRead, "")); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	// The reader calls Serve itself: a failure is an Error, never a Fatal
	// off the test's goroutine.
	call := func(method, params string) transport.Response {
		return transport.Dispatch(context.Background(), b, method, json.RawMessage(params), &transport.Request{Caller: p,
			Era: transport.EraSession, ClientCapabilities: &mcp.ClientCapabilities{}, Out: &recOutput{}})
	}
	done := make(chan struct{})
	var readers sync.WaitGroup
	readers.Add(1)
	go func() {
		defer readers.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			cursor, last := "", ""
			for {
				params := "{}"
				if cursor != "" {
					params = fmt.Sprintf(`{"cursor":%q}`, cursor)
				}
				res, ok := call("tools/list", params).Result.(*mcp.ListToolsResult)
				if !ok {
					t.Error("tools/list failed during the storm")
					return
				}
				for _, tl := range res.Tools {
					if tl.Name <= last {
						t.Errorf("tools/list out of order or repeated: %q after %q", tl.Name, last)
					}
					last = tl.Name
				}
				if cursor = res.NextCursor; cursor == "" {
					break
				}
			}
			if r := call("tools/call", `{"name":"storm_0_0"}`); r.Err != nil && r.Err.Code != -32602 {
				t.Errorf("call during the storm = %+v", r.Err)
			}
		}
	}()
	wg.Wait()
	close(done)
	readers.Wait()
	changed, _ := f.take()
	if len(changed) != 2*writers*rounds {
		t.Errorf("%d list changes told, want %d (one per change)", len(changed), 2*writers*rounds)
	}
}

// TestToolCallMutate: ToolCall.Mutate applies an effect checked atomically
// with the caller's liveness (SPEC §4.4), and a refused caller's call is
// the refusal of §4.3.
func TestToolCallMutate(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_note"}, Access: mcpruntime.AccessMutate,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			v, err := call.Mutate(ctx, "", thread.AppendMessage{Text: "noted"})
			if err != nil {
				return nil, err
			}
			return textResult(fmt.Sprint(v.(memdb.Message).Seq), nil), nil
		}}))
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	pA, _, _ := liveOn(t, rt, "T", "A")
	if res := toolsCall(t, rt, pA, "host_note", ""); res.IsError || resultText(res) != "0" {
		t.Errorf("live caller's mutation = %+v", res)
	}
	_, err := rt.SwitchProvider(context.Background(), "T", "B")
	noErr(t, err)
	wantRefusal(t, "after the switch", toolsCall(t, rt, pA, "host_note", ""), mcpruntime.CodeParentNotActive)
}

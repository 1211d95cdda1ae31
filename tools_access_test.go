package mcpruntime_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestAccessAct (SPEC §4.1): an act tool — a host tool with side effects
// that is not a thread mutation — runs for every principal the endpoint
// admitted, a read-only client and a provider without a run included; it
// is listed without an implied readOnlyHint, and a host's own annotations
// are listed as set.
func TestAccessAct(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	pLive, _, _ := liveOn(t, rt, "T", "A")
	_, tokIdle := openMinted(t, rt, "U", "A")
	pIdle := assertLive(t, rt, "idle provider", tokIdle)
	_, pRO := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	_, pRW := issueClient(t, rt, "rw", memdb.AccessReadWrite)
	var calls atomic.Int32
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_deploy"}, Access: mcpruntime.AccessAct, Handler: toolsOKHandler(&calls)}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "host_notify", Annotations: &mcp.ToolAnnotations{Title: "notify", OpenWorldHint: new(true)}},
		Access: mcpruntime.AccessAct, Handler: toolsOKHandler(&calls)}))
	for _, c := range []struct {
		name   string
		caller mcpruntime.Principal
	}{{"live provider", pLive}, {"provider without a run", pIdle}, {"read-only client", pRO}, {"read-write client", pRW}} {
		before := calls.Load()
		wantRefusal(t, c.name, toolsCall(t, rt, c.caller, "host_deploy", `{}`), "")
		if calls.Load() != before+1 {
			t.Errorf("%s: the handler ran %d times, want once", c.name, calls.Load()-before)
		}
	}

	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	res := resultOf[*mcp.ListToolsResult](t, "tools/list", serve(t, b, serveReq{caller: pRO, method: "tools/list", params: "{}"}))
	listed := map[string]map[string]any{}
	for _, tl := range res.Tools {
		listed[tl.Name] = wire(t, tl)
	}
	if a, ok := listed["host_deploy"]["annotations"]; ok {
		t.Errorf("host_deploy (act) annotations = %v, want none (no readOnlyHint implied)", a)
	}
	if a, _ := listed["host_notify"]["annotations"].(map[string]any); a["title"] != "notify" || a["readOnlyHint"] == true || a["openWorldHint"] != true {
		t.Errorf("host_notify annotations = %v, want the host's own", a)
	}
	if got := rt.Tools(); !hasToolAccess(got, "host_deploy", mcpruntime.AccessAct) {
		t.Errorf("Tools() = %+v, want host_deploy of class act", got)
	}
}

func hasToolAccess(tools []mcpruntime.ToolInfo, name string, a mcpruntime.Access) bool {
	for _, t := range tools {
		if t.Name == name {
			return t.Access == a
		}
	}
	return false
}

// TestAccessTable (SPEC §4.1): every class against every kind of
// principal, as the table says — who runs and who gets which refusal.
func TestAccessTable(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	pLive, _, _ := liveOn(t, rt, "T", "A")
	_, tokIdle := openMinted(t, rt, "U", "A")
	pIdle := assertLive(t, rt, "idle provider", tokIdle)
	_, pRO := issueClient(t, rt, "ro", memdb.AccessReadOnly)
	_, pRW := issueClient(t, rt, "rw", memdb.AccessReadWrite)

	ok := toolsOKHandler(nil)
	mutate := func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
		id := call.Caller.Thread
		if !call.Caller.Provider() {
			id = "T"
		}
		if _, err := mcpruntime.Mutate[memdb.Message](ctx, call.Runtime(), call.Caller, id, thread.AppendMessage{Text: "x"}); err != nil {
			return nil, err
		}
		return textResult("ok", nil), nil
	}
	for _, tl := range []mcpruntime.Tool{
		{Tool: mcp.Tool{Name: "c_read"}, Access: mcpruntime.AccessRead, Handler: ok},
		{Tool: mcp.Tool{Name: "c_caller"}, Access: mcpruntime.AccessReadAsCaller, Handler: ok},
		{Tool: mcp.Tool{Name: "c_act"}, Access: mcpruntime.AccessAct, Handler: ok},
		{Tool: mcp.Tool{Name: "c_mutate"}, Access: mcpruntime.AccessMutate, Handler: mutate},
		{Tool: mcp.Tool{Name: "c_mutate_clients"}, Access: mcpruntime.AccessMutate, AllowClients: true, Handler: mutate},
	} {
		noErr(t, rt.RegisterTool(tl))
	}
	const (
		yes      = ""
		notLive  = mcpruntime.CodeParentNotActive
		needCred = mcpruntime.CodeThreadCredentialRequired
		denied   = mcpruntime.CodeCapabilityDenied
	)
	table := []struct {
		name   string
		caller mcpruntime.Principal
		want   map[string]string // tool → refusal code
	}{
		{"live provider", pLive, map[string]string{"c_read": yes, "c_caller": yes, "c_act": yes, "c_mutate": yes, "c_mutate_clients": yes}},
		{"provider without a run", pIdle, map[string]string{"c_read": yes, "c_caller": yes, "c_act": yes, "c_mutate": notLive, "c_mutate_clients": notLive}},
		{"read-write client", pRW, map[string]string{"c_read": yes, "c_caller": needCred, "c_act": yes, "c_mutate": needCred, "c_mutate_clients": yes}},
		{"read-only client", pRO, map[string]string{"c_read": yes, "c_caller": needCred, "c_act": yes, "c_mutate": needCred, "c_mutate_clients": denied}},
	}
	for _, row := range table {
		for tool, code := range row.want {
			res, err := rt.CallTool(ctx, row.caller, tool, json.RawMessage(`{}`), nil)
			if err != nil {
				t.Fatalf("%s calls %s: %v", row.name, tool, err)
			}
			wantRefusal(t, row.name+" calls "+tool, res, code)
		}
	}
}

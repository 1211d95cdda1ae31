package mcpruntime_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
	ht "github.com/agenthost/mcpruntime/internal/mcphttp/mcphttptest"
)

// The root's HTTP tests are end to end: the MCP endpoint of a real
// runtime, for what needs real credentials — revocation by release,
// archive, delete, rotate and refresh, expiry by the credential window,
// rotated and refreshed principals. The endpoint's own behaviour is tested
// beside it, in internal/mcphttp, against a fake backend.

// hangAfter bounds every wait of the root package's tests for something
// that must happen. It only detects a hang: a correct runtime is never near
// it, however busy the machine.
const hangAfter = ht.HangAfter

// mcpEnv is an MCP endpoint of a real runtime behind httptest.NewServer.
type mcpEnv struct {
	*ht.Client
	rt  *mcpruntime.Runtime
	srv *mcpruntime.MCPEndpoint
}

// newMCPEnv mounts rt.MCPHandler(opts) on an httptest server. Its cleanup
// ends the sessions (so open streams return) and closes the server; it is
// registered after the runtime's, so it runs before rt.Close.
func newMCPEnv(t *testing.T, rt *mcpruntime.Runtime, opts mcpruntime.MCPOptions) *mcpEnv {
	t.Helper()
	srv, err := rt.MCPHandler(opts)
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	return &mcpEnv{Client: ht.New(t, srv), rt: rt, srv: srv}
}

const capabilitiesCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"runtime_capabilities","arguments":{}}}`

// sessionRequests are the requests that name a session.
var sessionRequests = ht.SessionRequests(capabilitiesCall)

// mcpRecords returns the ids of the ownership records in the store.
func mcpRecords(t *testing.T, rt *mcpruntime.Runtime) []string {
	t.Helper()
	recs := rt.MCPSessions()
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// hasRecord reports whether the ownership record of sid exists.
func hasRecord(rt *mcpruntime.Runtime, sid string) bool {
	for _, r := range rt.MCPSessions() {
		if r.ID == sid {
			return true
		}
	}
	return false
}

// waitSessionGone polls until the ownership record of sid is removed.
func waitSessionGone(t *testing.T, rt *mcpruntime.Runtime, what, sid string) {
	t.Helper()
	waitUntil(t, what+": session record removed", func() bool { return !hasRecord(rt, sid) })
}

// registerBlockingTool registers a read tool that blocks until its context
// is done (ht.Blocking).
func registerBlockingTool(t *testing.T, rt *mcpruntime.Runtime, name string, progress bool) *ht.Blocking {
	t.Helper()
	b := ht.NewBlocking()
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: name},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			var p func(float64, float64, string)
			if progress {
				p = call.Progress
			}
			return nil, b.Run(ctx, p)
		},
	}))
	return b
}

// waitInFlight waits until the endpoint holds exactly want.
func (e *mcpEnv) waitInFlight(what string, want mcphttp.InFlight) {
	e.T.Helper()
	waitUntil(e.T, fmt.Sprintf("%s: in flight %+v", what, want), func() bool { return mcpruntime.EndpointInFlight(e.srv) == want })
}

package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

func setLevelBody(level string) string {
	return `{"jsonrpc":"2.0","id":"lvl","method":"logging/setLevel","params":{"level":"` + level + `"}}`
}

// logMessages calls tool on sid and returns the levels of the
// notifications/message it carried before its result.
func logMessages(t *testing.T, e *mcpEnv, tok, sid string) []string {
	t.Helper()
	res := e.Post(tok, sid, ht.CallBody(`"c"`, "log_levels", ""))
	ht.WantStatus(t, "tools/call log_levels", res, http.StatusOK)
	if res.Header.Get("Content-Type") == "application/json" {
		return nil
	}
	var levels []string
	for _, ev := range ht.SSEEvents(t, res.Body) {
		if ev.Method == "notifications/message" {
			var p struct{ Level string }
			noErr(t, json.Unmarshal(ev.Params, &p))
			levels = append(levels, p.Level)
		}
	}
	return levels
}

// TestHTTPLoggingPerSession: the level is the session's: setting it on
// one session sends logs there and nowhere else, not on another session of
// the same token; every level at or above it passes.
func TestHTTPLoggingPerSession(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	f.tool("log_levels", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		for _, l := range []mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"} {
			out.Log(l, "", l)
		}
		return textResult("logged"), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	one, two := e.Initialize(tok), e.Initialize(tok)
	ht.WantStatus(t, "setLevel critical", e.Post(tok, one, setLevelBody("critical")), http.StatusOK)
	if got := logMessages(t, e, tok, one); len(got) != 3 || got[0] != "critical" || got[2] != "emergency" {
		t.Fatalf("session with level critical logged %v, want [critical alert emergency]", got)
	}
	if got := logMessages(t, e, tok, two); got != nil {
		t.Fatalf("the other session, with no level, logged %v; want nothing", got)
	}
	ht.WantStatus(t, "setLevel debug", e.Post(tok, two, setLevelBody("debug")), http.StatusOK)
	if got := logMessages(t, e, tok, two); len(got) != 8 {
		t.Fatalf("session with level debug logged %v, want all 8 levels", got)
	}
}

// TestHTTPLoggingNotDeclared: a backend that declares no logging
// capability does not have logging/setLevel: -32601.
func TestHTTPLoggingNotDeclared(t *testing.T) {
	f := newFake(t)
	f.caps = &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	if a := e.Post(tok, sid, setLevelBody("debug")).RPC(t); a.Error == nil || a.Error.Code != transport.CodeMethodNotFound {
		t.Fatalf("logging/setLevel without the capability = %+v, want -32601", a)
	}
}

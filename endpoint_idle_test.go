package mcpruntime_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestIdleSessionHeap: an idle 2025-era session holds at most 2 KiB of
// live heap (bench/'s idle mode measures 1.5 KB at
// 10 000 and 100 000), measured the same way: a warm endpoint (its first
// sessions opened and deleted), then the live heap after a collection
// before and after opening idleHeapSessions over a few client grants.
// Bytes, not time: live heap after GC does not depend on the machine's
// load.
func TestIdleSessionHeap(t *testing.T) {
	const idleHeapSessions, grants, maxPerSession = 2000, 8, 2048
	rt := quietRuntime(t, mcpruntime.Config{})
	env := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxSessions: idleHeapSessions, MaxSessionsPerNamespace: idleHeapSessions})
	toks := make([]string, grants)
	for i := range toks {
		ct, err := rt.IssueClient(context.Background(), fmt.Sprintf("idle-%d", i), "read-only")
		noErr(t, err)
		toks[i] = ct.Token
	}
	// env's own requests stay referenced until the test ends (their
	// cleanups close them): these do not.
	do := func(method, tok, sid, body string) (status int, gotSID string) {
		t.Helper()
		req, err := http.NewRequest(method, env.URL, strings.NewReader(body))
		noErr(t, err)
		req.Header = ht.Headers(tok, sid)
		resp, err := env.TS.Client().Do(req)
		noErr(t, err)
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		noErr(t, err)
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	initialize := func(tok string) string {
		t.Helper()
		status, sid := do(http.MethodPost, tok, "", ht.InitBody(ht.LatestVersion))
		if status != http.StatusOK || sid == "" {
			t.Fatalf("initialize = %d, session %q; want 200 and an id", status, sid)
		}
		if status, _ := do(http.MethodPost, tok, sid, ht.InitializedBody); status != http.StatusAccepted {
			t.Fatalf("notifications/initialized = %d, want 202", status)
		}
		return sid
	}
	for _, tok := range toks {
		if status, _ := do(http.MethodDelete, tok, initialize(tok), ""); status != http.StatusNoContent {
			t.Fatalf("warm-up DELETE = %d, want 204", status)
		}
	}
	before := liveHeap()
	sids := make([]string, idleHeapSessions)
	for i := range sids {
		sids[i] = initialize(toks[i%grants])
	}
	after := liveHeap()
	if got := len(rt.MCPSessions()); got != idleHeapSessions {
		t.Fatalf("%d ownership records, want %d", got, idleHeapSessions)
	}
	per := (float64(after) - float64(before)) / idleHeapSessions
	t.Logf("%.0f B of live heap per idle session (%d sessions)", per, idleHeapSessions)
	if per > maxPerSession {
		t.Errorf("an idle session holds %.0f B of live heap, want at most %d", per, maxPerSession)
	}
	runtime.KeepAlive(sids)
}

package metrics_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/metrics"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newRuntime returns a runtime that logs nothing, closed at cleanup.
func newRuntime(t *testing.T) *mcpruntime.Runtime {
	t.Helper()
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestMetricsCountWhatHappens(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, err := rt.OpenProviderSession(ctx, "T", "A")
	if err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	m := metrics.New(reg, rt)
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	// send sends one MCP request with headers h besides the usual ones.
	send := func(method, authz, body string, h map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+"/mcp", strings.NewReader(body))
		if authz != "" {
			req.Header.Set("Authorization", authz)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	do := func(method, authz, sid, body string) *http.Response {
		t.Helper()
		if sid == "" {
			return send(method, authz, body, nil)
		}
		return send(method, authz, body, map[string]string{"Mcp-Session-Id": sid})
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	resp := do(http.MethodPost, ps.Authorization, "", init)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %s", resp.Status)
	}
	do(http.MethodPost, "", "", init)                                                      // 401 missing
	do(http.MethodPost, "Bearer mcprt_nope", "", init)                                     // 401 malformed
	do(http.MethodDelete, ps.Authorization, sid, "")                                       // 204
	do(http.MethodPost, ps.Authorization, sid, `{"jsonrpc":"2.0","id":2,"method":"ping"}`) // 404
	modern := func(method, body string) {
		t.Helper()
		send(method, ps.Authorization, body, map[string]string{"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"})
	}
	modern(http.MethodPost, `{"jsonrpc":"2.0","id":3,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`) // 200
	modern(http.MethodGet, "")                                                                                                                                                                                 // 405: the era has no GET stream

	want := `
# HELP mcpruntime_auth_failures_total Requests answered 401, by reason (missing, malformed_header, malformed, unknown, revoked, expired, invalid, other).
# TYPE mcpruntime_auth_failures_total counter
mcpruntime_auth_failures_total{reason="malformed"} 1
mcpruntime_auth_failures_total{reason="missing"} 1
# HELP mcpruntime_http_requests_total MCP endpoint requests, by protocol era (session, modern), HTTP method (GET, POST, DELETE, other) and status (those the endpoint answers, other).
# TYPE mcpruntime_http_requests_total counter
mcpruntime_http_requests_total{era="modern",method="GET",status="405"} 1
mcpruntime_http_requests_total{era="modern",method="POST",status="200"} 1
mcpruntime_http_requests_total{era="session",method="DELETE",status="204"} 1
mcpruntime_http_requests_total{era="session",method="POST",status="200"} 1
mcpruntime_http_requests_total{era="session",method="POST",status="401"} 2
mcpruntime_http_requests_total{era="session",method="POST",status="404"} 1
# HELP mcpruntime_mcp_sessions Live MCP sessions.
# TYPE mcpruntime_mcp_sessions gauge
mcpruntime_mcp_sessions 0
# HELP mcpruntime_mcp_sessions_closed_total MCP sessions ended, by reason (delete, idle, cap, revoke, shutdown, other).
# TYPE mcpruntime_mcp_sessions_closed_total counter
mcpruntime_mcp_sessions_closed_total{reason="delete"} 1
# HELP mcpruntime_mcp_sessions_opened_total MCP sessions opened by initialize.
# TYPE mcpruntime_mcp_sessions_opened_total counter
mcpruntime_mcp_sessions_opened_total 1
# HELP mcpruntime_threads Threads.
# TYPE mcpruntime_threads gauge
mcpruntime_threads 1
# HELP mcpruntime_provider_sessions Open provider sessions.
# TYPE mcpruntime_provider_sessions gauge
mcpruntime_provider_sessions 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"mcpruntime_auth_failures_total", "mcpruntime_http_requests_total", "mcpruntime_mcp_sessions",
		"mcpruntime_mcp_sessions_closed_total", "mcpruntime_mcp_sessions_opened_total",
		"mcpruntime_threads", "mcpruntime_provider_sessions"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "mcpruntime_http_request_duration_seconds"); err != nil || n != 4 {
		t.Fatalf("latency histogram series = %d, %v; want 4 (session POST, DELETE; modern POST, GET)", n, err)
	}
	if n, err := testutil.GatherAndCount(reg, "mcpruntime_actors"); err != nil || n != 1 {
		t.Fatalf("actors gauge series = %d, %v", n, err)
	}
}

// TestMetricsLabelsBounded: no input an attacker controls adds a series.
// 20 000 requests with distinct HTTP methods leave the request counter and
// the latency histogram with the series of the fixed method set, and
// reasons and statuses outside the fixed lists count as "other".
func TestMetricsLabelsBounded(t *testing.T) {
	rt := newRuntime(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, rt)
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{Observer: m})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)

	for i := range 20_000 {
		req := httptest.NewRequest("M"+strconv.Itoa(i), "/mcp", nil)
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, method := range []string{http.MethodPost, http.MethodGet, http.MethodDelete} {
		req := httptest.NewRequest(method, "/mcp", nil)
		req.Host = "127.0.0.1" // past the Host guard: 401, no token
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for i := range 1_000 {
		m.AuthFailure("reason-" + strconv.Itoa(i))
		m.SessionClosed("reason-" + strconv.Itoa(i))
		m.Request("era-"+strconv.Itoa(i), "M"+strconv.Itoa(i), 1000+i, time.Millisecond)
	}

	want := `
# HELP mcpruntime_auth_failures_total Requests answered 401, by reason (missing, malformed_header, malformed, unknown, revoked, expired, invalid, other).
# TYPE mcpruntime_auth_failures_total counter
mcpruntime_auth_failures_total{reason="missing"} 3
mcpruntime_auth_failures_total{reason="other"} 1000
# HELP mcpruntime_http_requests_total MCP endpoint requests, by protocol era (session, modern), HTTP method (GET, POST, DELETE, other) and status (those the endpoint answers, other).
# TYPE mcpruntime_http_requests_total counter
mcpruntime_http_requests_total{era="other",method="other",status="other"} 1000
mcpruntime_http_requests_total{era="session",method="DELETE",status="401"} 1
mcpruntime_http_requests_total{era="session",method="GET",status="401"} 1
mcpruntime_http_requests_total{era="session",method="POST",status="401"} 1
mcpruntime_http_requests_total{era="session",method="other",status="405"} 20000
# HELP mcpruntime_mcp_sessions_closed_total MCP sessions ended, by reason (delete, idle, cap, revoke, shutdown, other).
# TYPE mcpruntime_mcp_sessions_closed_total counter
mcpruntime_mcp_sessions_closed_total{reason="other"} 1000
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"mcpruntime_auth_failures_total", "mcpruntime_http_requests_total", "mcpruntime_mcp_sessions_closed_total"); err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "mcpruntime_http_request_duration_seconds"); err != nil || n != 5 {
		t.Fatalf("latency histogram series = %d, %v; want 5 (session GET, POST, DELETE, other; other other)", n, err)
	}
}

// TestMetricsRefused: a request refused by a bound counts under the bound's
// name: here the cap on MCP sessions (503), twice.
func TestMetricsRefused(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	ct, err := rt.IssueClient(ctx, "ide", "read-only")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, rt)
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{Observer: m, MaxSessions: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	for i, want := range []int{http.StatusOK, http.StatusServiceUnavailable, http.StatusServiceUnavailable} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(init))
		req.Header.Set("Authorization", "Bearer "+ct.Token)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("initialize %d: %s, want %d", i, resp.Status, want)
		}
	}
	want := `
# HELP mcpruntime_http_refused_total MCP endpoint requests refused by a bound (429, 503), by bound (requests_per_namespace, requests, body_bytes, sessions_per_namespace, sessions, modern_requests_per_namespace, listen_per_namespace, listen, unavailable, rate_per_namespace, other).
# TYPE mcpruntime_http_refused_total counter
mcpruntime_http_refused_total{bound="sessions"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mcpruntime_http_refused_total"); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsModernGauges: an open 2026-07-28 listen stream is counted by
// mcpruntime_mcp_listen_streams while it is open, and not after its
// endpoint closed it; mcpruntime_mcp_modern_calls counts the calls being
// answered (none here once the stream went).
func TestMetricsModernGauges(t *testing.T) {
	ctx := context.Background()
	rt := newRuntime(t)
	ct, err := rt.IssueClient(ctx, "ide", "read-only")
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	metrics.New(reg, rt)
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	gauges := func(listens, calls int) string {
		return fmt.Sprintf(`
# HELP mcpruntime_mcp_listen_streams Open 2026-07-28 listen streams (subscriptions/listen).
# TYPE mcpruntime_mcp_listen_streams gauge
mcpruntime_mcp_listen_streams %d
# HELP mcpruntime_mcp_modern_calls 2026-07-28 requests being answered (listen streams not included).
# TYPE mcpruntime_mcp_modern_calls gauge
mcpruntime_mcp_modern_calls %d
`, listens, calls)
	}
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":"l","method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	req.Header.Set("Authorization", "Bearer "+ct.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", "subscriptions/listen")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	line, err := bufio.NewReader(resp.Body).ReadString('\n') // the acknowledgement's first line: the stream is open
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("listen = %s %q %v", resp.Status, line, err)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges(1, 0)), "mcpruntime_mcp_listen_streams", "mcpruntime_mcp_modern_calls"); err != nil {
		t.Fatalf("with the stream open: %v", err)
	}
	h.Close() // answers the listen request, then ends it
	io.Copy(io.Discard, resp.Body)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(gauges(0, 0)), "mcpruntime_mcp_listen_streams", "mcpruntime_mcp_modern_calls"); err != nil {
		t.Fatalf("after Close: %v", err)
	}
}

// TestMetricsForwarded: each forward outcome counts under its name, and
// any other outcome as "other".
func TestMetricsForwarded(t *testing.T) {
	rt := newRuntime(t)
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, rt)
	for range 3 {
		m.Forward("proxied")
	}
	m.Forward("home_gone")
	m.Forward("proxy_error")
	m.Forward("read_here")
	m.Forward("read_here")
	for i := range 100 {
		m.Forward("outcome-" + strconv.Itoa(i))
	}
	want := `
# HELP mcpruntime_forwarded_requests_total MCP endpoint requests of a principal whose home is another node, by outcome: sent on (proxied, home_gone, proxy_error) or read_here (a read answered from this node's replica), other.
# TYPE mcpruntime_forwarded_requests_total counter
mcpruntime_forwarded_requests_total{outcome="home_gone"} 1
mcpruntime_forwarded_requests_total{outcome="other"} 100
mcpruntime_forwarded_requests_total{outcome="proxied"} 3
mcpruntime_forwarded_requests_total{outcome="proxy_error"} 1
mcpruntime_forwarded_requests_total{outcome="read_here"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "mcpruntime_forwarded_requests_total"); err != nil {
		t.Fatal(err)
	}
}

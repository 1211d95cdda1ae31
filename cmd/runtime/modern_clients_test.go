package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/clienttest"
)

// demoServer is `runtime serve --demo` — what `make run` runs — as a
// process of the binary built by the test.
type demoServer struct {
	mcp, admin string // the MCP endpoint's URL; the admin listener's origin
	token      string // the demo credential's token
}

// startDemoBinary builds the binary, starts it with --demo on free
// loopback ports and reads the demo credential from the file the ready
// line names; the cleanup sends SIGTERM to its PID and fails the test
// unless it exits 0 without a data race.
func startDemoBinary(t *testing.T) demoServer {
	t.Helper()
	bin := clienttest.Build(t, ".", "runtime")
	dir := t.TempDir()
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json", "--demo")
	cmd.Env = []string{"RUNTIME_ADMIN_TOKEN_FILE=" + dir + "/admin-token", "HOME=" + dir}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	readyc, exited := make(chan map[string]any, 1), make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "runtime ready" {
				readyc <- rec
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("SIGTERM to runtime (pid %d): %v", cmd.Process.Pid, err)
		}
		select {
		case err := <-exited:
			if err != nil || strings.Contains(logs.String(), "DATA RACE") {
				t.Errorf("runtime exited with %v; its log:\n%s", err, logs.String())
			}
		case <-time.After(time.Minute): // detects a hang only
			t.Errorf("runtime (pid %d) did not exit within a minute of SIGTERM; killing it", cmd.Process.Pid)
			cmd.Process.Kill()
			<-exited
		}
	})
	var ready map[string]any
	select {
	case ready = <-readyc:
	case err := <-exited:
		t.Fatalf("runtime exited before it was ready: %v\n%s", err, logs.String())
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatalf("runtime not ready:\n%s", logs.String())
	}
	file, _ := ready["demo_credential"].(string)
	auth, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("demo credential %q: %v", file, err)
	}
	token, ok := strings.CutPrefix(strings.TrimSpace(string(auth)), "Bearer ")
	if !ok {
		t.Fatalf("demo credential file holds no Bearer value")
	}
	mcpURL, _ := ready["mcp"].(string)
	admin, _ := ready["admin"].(string)
	return demoServer{mcp: mcpURL, admin: strings.TrimSuffix(admin, "/admin/v1/"), token: token}
}

// metric returns the value of the series named exactly series (name and
// labels) in the server's /metrics; a series that is not there fails t,
// unless absentIsZero (a labelled counter's series appears at its first
// increment).
func (s demoServer) metric(t *testing.T, series string, absentIsZero bool) float64 {
	t.Helper()
	status, body := httpGet(t, s.admin+"/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics: %d", status)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("/metrics line %q: %v", line, err)
			}
			return f
		}
	}
	if !absentIsZero {
		t.Fatalf("/metrics has no %s", series)
	}
	return 0
}

// wantNoSession checks, from the server's own /metrics, that no MCP session
// was ever opened nor is live, and that it did serve POSTs since before.
func (s demoServer) wantNoSession(t *testing.T, before float64) {
	t.Helper()
	if n := s.metric(t, "mcpruntime_mcp_sessions_opened_total", false); n != 0 {
		t.Errorf("mcpruntime_mcp_sessions_opened_total = %v, want 0: a client opened a session", n)
	}
	if n := s.metric(t, "mcpruntime_mcp_sessions", false); n != 0 {
		t.Errorf("mcpruntime_mcp_sessions = %v, want 0", n)
	}
	if n := s.metric(t, postsAnswered, true); n <= before {
		t.Errorf("POSTs answered 200 = %v, not more than the %v before the client: these metrics are not its server's", n, before)
	}
}

// postsAnswered is the series of 2026-07-28 POSTs answered 200.
const postsAnswered = `mcpruntime_http_requests_total{era="modern",method="POST",status="200"}`

// post makes the Go side's change: a thread_post on the demo thread, over
// a stateless request of its own, which updates the thread's transcript.
func (s demoServer) post(t *testing.T, text string) {
	t.Helper()
	status, body, err := clienttest.PostModern(s.mcp, s.token, "tools/call", "thread_post",
		map[string]any{"name": "thread_post", "arguments": map[string]any{"text": text}})
	if err != nil || status != http.StatusOK || !bytes.Contains(body, []byte(`"text":"`+text+`"`)) || bytes.Contains(body, []byte(`"isError":true`)) {
		t.Fatalf("thread_post %q: %d %s (%v)", text, status, body, err)
	}
}

// The demo credential's view of the binary: its built-in tools and what
// runtime_capabilities says of it.
var (
	demoTools        = []string{"runtime_capabilities", "thread_list", "thread_post", "thread_read"}
	demoCapabilities = map[string]any{
		"capabilities": []any{}, "instance": "demo", "namespaceKind": "provider", "threadId": "demo",
		"tools": []any{"runtime_capabilities", "thread_list", "thread_post", "thread_read"},
	}
)

// TestModernClientsOnTheBinary: the official clients speak MCP 2026-07-28
// to the binary as `make run` starts it (built here, run with --demo, the
// demo credential): the TypeScript SDK v2 client (@modelcontextprotocol/client
// 2.4.0, e2e/oauth-client/modern.mjs) pinned to 2026-07-28 and in auto
// mode, and the go-sdk v1.8.0 client pinned and with its default version.
// Each connects with server/discover, lists the tools, calls
// runtime_capabilities, and opens a subscriptions/listen stream for tool
// list changes and the demo thread's transcript; the test then posts to
// the thread and the client hears notifications/resources/updated on it.
// Nothing in this binary changes its tool list after start (no route of
// the admin API registers a tool): the tool list change is heard in
// examples/everything's TestModernClientsOnEverything. Every exchange is
// in the 2026-07-28 era, no Mcp-Session-Id either way, no initialize; the
// server's /metrics counts no session ever opened.
func TestModernClientsOnTheBinary(t *testing.T) {
	s := startDemoBinary(t)
	transcript := mcpruntime.TranscriptURI("demo")
	for _, mode := range []string{"pinned", "auto"} {
		t.Run("typescript/"+mode, func(t *testing.T) {
			before := s.metric(t, postsAnswered, true)
			text := "heard by the TypeScript client, " + mode
			tr := clienttest.RunModern(t, clienttest.Run{
				URL: s.mcp, Token: s.token, Mode: mode,
				Call:    clienttest.Call{Name: "runtime_capabilities", Arguments: map[string]any{}},
				Listen:  map[string]any{"toolsListChanged": true, "resourceSubscriptions": []string{transcript}},
				Trigger: func() { s.post(t, text) },
			})
			clienttest.WantStateless(t, "TypeScript client ("+mode+")", tr.Exchanges(""))
			for _, step := range []string{"connect", "close"} {
				if c := tr.One(t, step); c.ProtocolVersion != clienttest.Modern || c.Era != "modern" {
					t.Errorf("%s: protocol version %q, era %q; want 2026-07-28, modern", step, c.ProtocolVersion, c.Era)
				}
			}
			if c := tr.One(t, "connect"); c.SessionID {
				t.Error("connect: the transport holds a session id")
			}
			if diff := cmp.Diff(demoTools, tr.One(t, "tools/list").Tools); diff != "" {
				t.Errorf("tools/list (-want +got):\n%s", diff)
			}
			if res := tr.One(t, "tools/call").Tool; res == nil || res.IsError || !cmp.Equal(demoCapabilities, res.StructuredContent) {
				t.Errorf("runtime_capabilities = %+v, want %v", res, demoCapabilities)
			}
			if diff := cmp.Diff(map[string]any{"toolsListChanged": true, "resourceSubscriptions": []any{transcript}}, tr.One(t, "listen").HonoredFilter); diff != "" {
				t.Errorf("honoured filter (-want +got):\n%s", diff)
			}
			// The subscription id is the listen request's id, which the
			// client chose: "listen:0".
			want := map[string]any{"uri": transcript, "_meta": map[string]any{"io.modelcontextprotocol/subscriptionId": "listen:0"}}
			if h := tr.One(t, "notification").Heard; h == nil || h.Method != "notifications/resources/updated" || !cmp.Equal(want, h.Params) {
				t.Errorf("heard %+v, want notifications/resources/updated %v", h, want)
			}
			if c := tr.One(t, "listen closed").Closed; c != "local" {
				t.Errorf("listen closed %q, want local (the client's close)", c)
			}
			s.wantNoSession(t, before)
		})
	}
	for _, version := range []string{clienttest.Modern, ""} {
		t.Run("go-sdk/version="+version, func(t *testing.T) {
			before := s.metric(t, postsAnswered, true)
			base := &http.Transport{}
			t.Cleanup(base.CloseIdleConnections)
			rec := &clienttest.Recorder{Token: s.token, Base: base}
			updated := make(chan string, 8)
			client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-modern-test", Version: "1.0.0"}, &mcp.ClientOptions{
				ResourceUpdatedHandler: func(_ context.Context, req *mcp.ResourceUpdatedNotificationRequest) {
					updated <- req.Params.URI
				},
				ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {},
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // detects a hang only
			defer cancel()
			cs, names := clienttest.ConnectGoSDK(t, ctx, client, s.mcp, rec, version)
			if diff := cmp.Diff(demoTools, names); diff != "" {
				t.Errorf("tools/list (-want +got):\n%s", diff)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "runtime_capabilities", Arguments: map[string]any{}})
			if err != nil || res.IsError || !cmp.Equal(demoCapabilities, res.StructuredContent) {
				t.Errorf("runtime_capabilities = %+v (%v), want %v", res, err, demoCapabilities)
			}
			// Subscribe is, in this era, a subscriptions/listen stream for
			// the URI; it returns once the server acknowledged it.
			if err := cs.Subscribe(ctx, &mcp.SubscribeParams{URI: transcript}); err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			s.post(t, "heard by the go-sdk client, version="+version)
			select {
			case uri := <-updated:
				if uri != transcript {
					t.Errorf("notifications/resources/updated for %q, want %q", uri, transcript)
				}
			case <-ctx.Done():
				t.Fatal("no notifications/resources/updated on the listen stream")
			}
			if err := cs.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
			ex := rec.Exchanges()
			clienttest.WantStateless(t, "go-sdk client (version="+version+")", ex)
			if !slices.ContainsFunc(ex, func(e clienttest.Exchange) bool { return e.RPC == "subscriptions/listen" }) {
				t.Errorf("exchanges %+v: no subscriptions/listen", ex)
			}
			s.wantNoSession(t, before)
		})
	}
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// syncBuffer is a bytes.Buffer safe for a logger and a test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// mcpClient speaks just enough MCP Streamable HTTP for the tests.
type mcpClient struct {
	t    *testing.T
	http *http.Client
	url  string
	auth string
	sid  string
}

func newMCPClient(t *testing.T, url, auth string) *mcpClient {
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &mcpClient{t: t, http: &http.Client{Transport: tr, Timeout: 20 * time.Second}, url: url, auth: auth}
}

func (c *mcpClient) request(method, body string) *http.Request {
	c.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.url, rd)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Accept", "application/json, text/event-stream")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.sid != "" {
		req.Header.Set("Mcp-Session-Id", c.sid)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	return req
}

// post sends one JSON-RPC message and returns the status and body.
func (c *mcpClient) post(body string) (int, string) {
	c.t.Helper()
	resp, err := c.http.Do(c.request(http.MethodPost, body))
	if err != nil {
		c.t.Fatalf("MCP POST: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if sid := resp.Header.Get("Mcp-Session-Id"); sid != "" {
		c.sid = sid
	}
	return resp.StatusCode, string(b)
}

// initialize opens a session and says it is initialized.
func (c *mcpClient) initialize() {
	c.t.Helper()
	status, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`)
	if status != 200 || c.sid == "" || !strings.Contains(body, `"protocolVersion"`) {
		c.t.Fatalf("initialize: %d %s (session %q)", status, body, c.sid)
	}
	if status, body := c.post(`{"jsonrpc":"2.0","method":"notifications/initialized"}`); status != 202 {
		c.t.Fatalf("notifications/initialized: %d %s", status, body)
	}
}

// startServe runs `runtime serve` in-process on free loopback ports and
// returns their addresses and a stop function that cancels it and waits
// for its exit status.
func startServe(t *testing.T, env map[string]string, args ...string) (mcpAddr, adminAddr string, logs *syncBuffer, stop func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ mcp, admin string }
	ready := make(chan addrs, 1)
	ctx = context.WithValue(ctx, readyHookKey{}, func(m, a string) { ready <- addrs{m, a} })
	logs = &syncBuffer{}
	done := make(chan int, 1)
	args = append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, args...)
	go func() { done <- run(ctx, args, env, io.Discard, logs) }()
	var stopped bool
	var code int
	stop = func() int {
		if stopped {
			return code
		}
		stopped = true
		cancel()
		select {
		case code = <-done:
		case <-time.After(2 * time.Minute): // detects a hang only
			t.Fatalf("serve did not stop; logs:\n%s", logs)
		}
		return code
	}
	t.Cleanup(func() { stop() })
	select {
	case a := <-ready:
		return a.mcp, a.admin, logs, stop
	case code := <-done:
		t.Fatalf("serve exited %d before it was ready; logs:\n%s", code, logs)
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatalf("serve not ready; logs:\n%s", logs)
	}
	return
}

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// TestServeEndToEnd starts serve in-process, drives the admin API through
// the CLI, talks MCP with the minted credential, then shuts down and
// checks that the shutdown was graceful and left nothing behind. The grace
// is an hour: a shutdown that waited for its deadline (an open stream
// holding it up) would hang, not just take a little longer.
func TestServeEndToEnd(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "run", "admin-token")
	mcpAddr, adminAddr, logs, stop := startServe(t, map[string]string{},
		"--admin-token-file", tokenFile, "--no-demo", "--log-level", "debug", "--shutdown-grace", "1h")

	// The admin token: generated, in a 0600 file whose path is logged.
	fi, err := os.Stat(tokenFile)
	if err != nil {
		t.Fatalf("admin token file: %v", err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin token file mode %v", fi.Mode().Perm())
	}
	adminToken, _ := os.ReadFile(tokenFile)
	if !strings.Contains(logs.String(), "file="+tokenFile) {
		t.Errorf("token file path not logged:\n%s", logs)
	}

	if code, body := httpGet(t, "http://"+adminAddr+"/healthz"); code != 200 || body != `{"status":"ok"}` {
		t.Errorf("healthz: %d %s", code, body)
	}
	if code, body := httpGet(t, "http://"+adminAddr+"/readyz"); code != 200 || body != `{"status":"ready"}` {
		t.Errorf("readyz: %d %s", code, body)
	}

	admin := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(context.Background(), map[string]string{},
			append([]string{"admin", "--admin-url", "http://" + adminAddr, "--admin-token-file", tokenFile}, args...)...)
		if code != 0 {
			t.Fatalf("admin %q: exit %d, stderr %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	admin("instance", "create", "codex", "--driver", "inproc")
	admin("thread", "create", "t1", "--instance", "codex")
	auth := admin("provider-session", "open", "t1", "codex", "--field", "authorization")
	if !strings.HasPrefix(auth, "Bearer ") {
		t.Fatalf("provider-session open printed authorization %q", auth)
	}
	runID := admin("run", "start", "t1", "codex", "-f", "runId")
	var thread struct {
		ID  string `json:"id"`
		Run struct {
			ID string `json:"id"`
		} `json:"run"`
	}
	if err := json.Unmarshal([]byte(admin("thread", "get", "t1")), &thread); err != nil || thread.ID != "t1" || thread.Run.ID != runID {
		t.Errorf("thread get: %+v %v (run %q)", thread, err, runID)
	}

	// MCP with the minted credential.
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", auth)
	c.initialize()
	status, body := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"hello"}}}`)
	if status != 200 || strings.Contains(body, `"isError":true`) {
		t.Errorf("thread_post: %d %s", status, body)
	}
	// /metrics on the admin listener counts what just happened.
	if code, body := httpGet(t, "http://"+adminAddr+"/metrics"); code != 200 ||
		!strings.Contains(body, "mcpruntime_mcp_sessions_opened_total 1") ||
		!strings.Contains(body, `mcpruntime_http_requests_total{era="session",method="POST",status="200"}`) ||
		!strings.Contains(body, "mcpruntime_mcp_sessions 1") {
		t.Errorf("metrics: %d\n%s", code, body)
	}
	sessions := admin("mcp-sessions")
	if !strings.Contains(sessions, c.sid) || strings.Contains(sessions, strings.TrimPrefix(auth, "Bearer ")) {
		t.Errorf("admin mcp-sessions: %s", sessions)
	}
	// Every admin command prints the API's answer, archive included.
	admin("thread", "create", "t9")
	if got := admin("thread", "archive", "t9", "-f", "status"); got != "archived" {
		t.Errorf("thread archive printed status %q, want archived", got)
	}
	if got := admin("thread", "delete", "t9", "-f", "status"); got != "deleted" {
		t.Errorf("thread delete printed status %q, want deleted", got)
	}

	// An open SSE stream must not hold the shutdown up.
	streamReq := c.request(http.MethodGet, "")
	streamReq.Header.Set("Accept", "text/event-stream")
	stream, err := c.http.Transport.RoundTrip(streamReq)
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("GET stream: %v %v", stream, err)
	}
	streamDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, stream.Body)
		stream.Body.Close()
		streamDone <- err
	}()

	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; logs:\n%s", code, logs)
	}
	if strings.Contains(logs.String(), "shutdown deadline passed") {
		t.Errorf("the shutdown waited for its deadline; logs:\n%s", logs)
	}
	select {
	case <-streamDone:
	case <-time.After(time.Minute): // detects a hang only
		t.Error("SSE stream still open after shutdown")
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin token file left behind: %v", err)
	}
	out := logs.String()
	for _, want := range []string{"runtime ready", "shutting down", "shut down"} {
		if !strings.Contains(out, want) {
			t.Errorf("logs lack %q:\n%s", want, out)
		}
	}
	for name, secret := range map[string]string{"admin token": strings.TrimSpace(string(adminToken)), "credential": strings.TrimPrefix(auth, "Bearer ")} {
		if secret == "" || strings.Contains(out, secret) {
			t.Errorf("the %s appears in the logs (or is empty)", name)
		}
	}
	// Everything is closed: nothing answers, no goroutine is left.
	tr := &http.Transport{}
	if _, err := (&http.Client{Transport: tr, Timeout: 2 * time.Second}).Get("http://" + adminAddr + "/healthz"); err == nil {
		t.Error("admin listener still answers after shutdown")
	}
	tr.CloseIdleConnections()
	c.http.CloseIdleConnections()
	goleak.VerifyNone(t)
}

// TestServeDemoAndEnvToken: the demo credential works at once, and an
// admin token from the environment is used and written nowhere.
func TestServeDemoAndEnvToken(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "env-admin-token-0123456789abcdef0123456789", "RUNTIME_ADMIN_TOKEN_FILE": tokenFile}
	mcpAddr, adminAddr, logs, stop := startServe(t, env, "--log-format", "json", "--demo")
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin token file written although RUNTIME_ADMIN_TOKEN is set: %v", err)
	}
	// The demo credential: at a stable path beside the admin token file
	// (set here, though the token comes from the environment), 0600, named
	// by its own log line and by the ready line.
	demoFile, readyDemo := "", ""
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "demo credential written" {
			demoFile, _ = rec["file"].(string)
		}
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "runtime ready" {
			readyDemo, _ = rec["demo_credential"].(string)
		}
	}
	if want := filepath.Join(dir, "demo-authorization"); demoFile != want || readyDemo != want {
		t.Errorf("demo credential file %q, in the ready line %q; want %q", demoFile, readyDemo, want)
	}
	if fi, err := os.Stat(demoFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("demo credential file: %v (mode %v), want 0600", err, fi)
	}
	auth, err := os.ReadFile(demoFile)
	if err != nil {
		t.Fatalf("demo credential file %q: %v; logs:\n%s", demoFile, err, logs)
	}
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", strings.TrimSpace(string(auth)))
	c.initialize()
	if status, body := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"hi"}}}`); status != 200 || strings.Contains(body, `"isError":true`) {
		t.Errorf("demo thread_post: %d %s", status, body)
	}
	code, stdout, stderr := runCLI(context.Background(), env, "admin", "--admin-url", "http://"+adminAddr, "thread", "get", "demo", "-f", "status")
	if code != 0 || stdout != "active\n" {
		t.Errorf("admin with the env token: exit %d %q %q", code, stdout, stderr)
	}
	code, _, stderr = runCLI(context.Background(), map[string]string{"RUNTIME_ADMIN_TOKEN": "wrong"}, "admin", "--admin-url", "http://"+adminAddr, "mcp-sessions")
	if code != 1 || !strings.Contains(stderr, "401") {
		t.Errorf("wrong admin token: exit %d %q", code, stderr)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	if _, err := os.Stat(demoFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("demo credential file left behind: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files left beside the token file: %v", ents)
	}
	if strings.Contains(logs.String(), env["RUNTIME_ADMIN_TOKEN"]) {
		t.Error("the admin token appears in the logs")
	}
	c.http.CloseIdleConnections()
}

// TestServeHasNoDemoByDefault: a server started without --demo mints
// nothing: no demo thread, no credential file, nothing in the ready line —
// a production server must not hold a live credential nobody asked for.
// `make run` passes --demo.
func TestServeHasNoDemoByDefault(t *testing.T) {
	dir := t.TempDir()
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "env-admin-token-0123456789abcdef0123456789", "RUNTIME_ADMIN_TOKEN_FILE": filepath.Join(dir, "admin-token")}
	_, adminAddr, logs, stop := startServe(t, env, "--log-format", "json")
	code, stdout, stderr := runCLI(context.Background(), env, "admin", "--admin-url", "http://"+adminAddr, "thread", "list")
	if code != 0 || strings.Join(strings.Fields(stdout), "") != `{"threads":[]}` {
		t.Errorf("thread list of a server without --demo: exit %d %q %q; want no thread", code, stdout, stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("files written beside the token file without --demo: %v", ents)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		if rec["msg"] == "demo credential written" || rec["demo_credential"] != nil {
			t.Errorf("a server without --demo logged a demo credential: %s", line)
		}
	}
}

// TestServePortInUse: a second server on the same port fails with exit 1
// and leaves the first one's token file alone.
func TestServePortInUse(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	_, adminAddr, _, stop := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo")
	before, _ := os.ReadFile(tokenFile)
	code, _, stderr := runCLI(context.Background(), map[string]string{},
		"--listen", "127.0.0.1:0", "--admin-listen", adminAddr, "--admin-token-file", tokenFile, "--no-demo")
	if code != 1 || !strings.Contains(stderr, "admin listener") {
		t.Errorf("second server: exit %d %q", code, stderr)
	}
	if after, _ := os.ReadFile(tokenFile); !bytes.Equal(before, after) {
		t.Error("second server replaced the first one's admin token file")
	}
	if code := stop(); code != 0 {
		t.Errorf("first server exited %d", code)
	}
}

// TestBinarySIGTERM builds the binary, runs it on free ports, drives it
// with its own CLI and MCP over real HTTP, sends SIGTERM and expects a
// clean exit 0.
func TestBinarySIGTERM(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "runtime")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	tokenFile := filepath.Join(dir, "admin-token")
	cmd := exec.Command(bin, "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--log-format", "json", "--no-demo")
	cmd.Env = []string{"RUNTIME_ADMIN_TOKEN_FILE=" + tokenFile, "HOME=" + dir}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	var logs syncBuffer
	readyc := make(chan map[string]any, 1)
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
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	var ready map[string]any
	select {
	case ready = <-readyc:
	case err := <-exited:
		t.Fatalf("exited before ready: %v\n%s", err, logs.String())
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatalf("not ready:\n%s", logs.String())
	}
	mcpURL, _ := ready["mcp"].(string)
	adminURL := strings.TrimSuffix(ready["admin"].(string), "/admin/v1/")

	cli := func(args ...string) string {
		t.Helper()
		c := exec.Command(bin, append([]string{"admin", "--admin-url", adminURL}, args...)...)
		c.Env = []string{"RUNTIME_ADMIN_TOKEN_FILE=" + tokenFile}
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		if err := c.Run(); err != nil {
			t.Fatalf("runtime admin %q: %v\n%s", args, err, errb.String())
		}
		return strings.TrimSpace(out.String())
	}
	cli("instance", "create", "codex")
	cli("thread", "create", "t1", "--instance", "codex")
	auth := cli("provider-session", "open", "t1", "codex", "-f", "authorization")
	c := newMCPClient(t, mcpURL, auth)
	c.initialize()
	if !strings.Contains(cli("mcp-sessions"), c.sid) {
		t.Error("admin mcp-sessions does not list the MCP session")
	}
	c.http.CloseIdleConnections()

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(2 * time.Minute): // detects a hang only
		t.Fatalf("no exit after SIGTERM:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), `"msg":"shut down"`) {
		t.Errorf("no clean shutdown logged:\n%s", logs.String())
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin token file left behind: %v", err)
	}
}

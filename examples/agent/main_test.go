package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestMain fails the package if a test leaves a goroutine behind: the
// agent's MCP sessions, the runtime and its test server must all be gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadline bounds every wait; a correct program is never near it, however
// busy the machine.
const deadline = time.Minute

// server is one entry of an MCP config file.
type server struct {
	Type, URL, Authorization string
	NoHeaders                bool
}

// writeConfig writes an MCP config file atomically (the agent may be
// reading it) and returns its path.
func writeConfig(t *testing.T, path string, servers map[string]server) string {
	t.Helper()
	m := map[string]any{}
	for name, s := range servers {
		e := map[string]any{"type": s.Type, "url": s.URL}
		if !s.NoHeaders {
			e["headers"] = map[string]string{"Authorization": s.Authorization}
		}
		m[name] = e
	}
	data, err := json.Marshal(map[string]any{"mcpServers": m})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, path, data)
	return path
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// clearEnv unsets every variable the agent reads, for this test.
func clearEnv(t *testing.T) {
	for _, k := range []string{"MCPRUNTIME_MCP_CONFIG", "MCPRUNTIME_SERVER_NAME", "MCPRUNTIME_URL", "MCPRUNTIME_AUTHORIZATION"} {
		t.Setenv(k, "")
	}
}

// TestReadConfigFile: the server is picked from the file as documented,
// and every malformed file is refused with an error naming it.
func TestReadConfigFile(t *testing.T) {
	dir := t.TempDir()
	one := writeConfig(t, filepath.Join(dir, "one.json"), map[string]server{
		"mcpruntime": {Type: "http", URL: "http://h/mcp", Authorization: "Bearer one"},
	})
	two := writeConfig(t, filepath.Join(dir, "two.json"), map[string]server{
		"a": {Type: "http", URL: "http://a/mcp", Authorization: "Bearer a"},
		"b": {Type: "http", URL: "http://b/mcp", Authorization: "Bearer b"},
	})
	none := writeConfig(t, filepath.Join(dir, "none.json"), nil)
	stdio := writeConfig(t, filepath.Join(dir, "stdio.json"), map[string]server{
		"s": {Type: "stdio", URL: "http://s/mcp", Authorization: "Bearer s"},
	})
	nourl := writeConfig(t, filepath.Join(dir, "nourl.json"), map[string]server{
		"s": {Type: "http", Authorization: "Bearer s"},
	})
	noheaders := writeConfig(t, filepath.Join(dir, "noheaders.json"), map[string]server{
		"s": {Type: "http", URL: "http://s/mcp", NoHeaders: true},
	})
	bad := filepath.Join(dir, "bad.json")
	writeFile(t, bad, []byte(`{"mcpServers":`))
	wrongShape := filepath.Join(dir, "shape.json")
	writeFile(t, wrongShape, []byte(`{"mcpServers":["a"]}`))
	missing := filepath.Join(dir, "missing.json")

	for _, tc := range []struct {
		name, path, server string
		want               connection
		wantErr            []string
	}{
		{name: "one server", path: one, want: connection{URL: "http://h/mcp", Authorization: "Bearer one"}},
		{name: "one server named", path: one, server: "mcpruntime", want: connection{URL: "http://h/mcp", Authorization: "Bearer one"}},
		{name: "one server, other name", path: one, server: "other", wantErr: []string{one, `no server "other"`}},
		{name: "two servers picked a", path: two, server: "a", want: connection{URL: "http://a/mcp", Authorization: "Bearer a"}},
		{name: "two servers picked b", path: two, server: "b", want: connection{URL: "http://b/mcp", Authorization: "Bearer b"}},
		{name: "two servers unpicked", path: two, wantErr: []string{two, "2 servers", "[a b]", "-server"}},
		{name: "no servers", path: none, wantErr: []string{none, "0 servers"}},
		{name: "wrong type", path: stdio, wantErr: []string{stdio, `type "stdio"`}},
		{name: "missing url", path: nourl, wantErr: []string{nourl, "no url"}},
		{name: "no headers", path: noheaders, want: connection{URL: "http://s/mcp"}},
		{name: "bad JSON", path: bad, wantErr: []string{bad}},
		{name: "wrong shape", path: wrongShape, wantErr: []string{wrongShape}},
		{name: "missing file", path: missing, wantErr: []string{missing}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readConfigFile(tc.path, tc.server)
			if tc.wantErr == nil {
				if err != nil {
					t.Fatalf("readConfigFile = %v", err)
				}
				if got != tc.want {
					t.Errorf("readConfigFile = %+v, want %+v", got, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("readConfigFile = %+v, nil; want an error", got)
			}
			for _, w := range tc.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// TestLoadConnection: a config file wins over the environment; without
// one, both MCPRUNTIME_URL and MCPRUNTIME_AUTHORIZATION are needed.
func TestLoadConnection(t *testing.T) {
	file := writeConfig(t, filepath.Join(t.TempDir(), "mcp.json"), map[string]server{
		"x": {Type: "http", URL: "http://file/mcp", Authorization: "Bearer file"},
	})
	for _, tc := range []struct {
		name      string
		url, auth string
		opts      options
		want      connection
		wantErr   bool
	}{
		{name: "env", url: "http://env/mcp", auth: "Bearer env", want: connection{URL: "http://env/mcp", Authorization: "Bearer env"}},
		{name: "file wins", url: "http://env/mcp", auth: "Bearer env", opts: options{configFile: file}, want: connection{URL: "http://file/mcp", Authorization: "Bearer file"}},
		{name: "file server", opts: options{configFile: file, server: "x"}, want: connection{URL: "http://file/mcp", Authorization: "Bearer file"}},
		{name: "file wrong server", url: "http://env/mcp", auth: "Bearer env", opts: options{configFile: file, server: "y"}, wantErr: true},
		{name: "env without authorization", url: "http://env/mcp", wantErr: true},
		{name: "env without url", auth: "Bearer env", wantErr: true},
		{name: "nothing", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			t.Setenv("MCPRUNTIME_URL", tc.url)
			t.Setenv("MCPRUNTIME_AUTHORIZATION", tc.auth)
			got, err := loadConnection(tc.opts)
			switch {
			case tc.wantErr && err == nil:
				t.Errorf("loadConnection = %+v, nil; want an error", got)
			case !tc.wantErr && err != nil:
				t.Errorf("loadConnection = %v", err)
			case !tc.wantErr && got != tc.want:
				t.Errorf("loadConnection = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestRunUsage: a bad command line or no connection exits 2 with a
// message and makes no call.
func TestRunUsage(t *testing.T) {
	dir := t.TempDir()
	two := writeConfig(t, filepath.Join(dir, "two.json"), map[string]server{
		"a": {Type: "http", URL: "http://a/mcp", Authorization: "Bearer a"},
		"b": {Type: "http", URL: "http://b/mcp", Authorization: "Bearer b"},
	})
	for _, tc := range []struct {
		name string
		argv []string
		want string
	}{
		{"nothing configured", nil, "no MCP connection"},
		{"unknown flag", []string{"-nope"}, "-nope"},
		{"args not JSON", []string{"-args", "{", "-mcp-config", two, "-server", "a"}, "-args"},
		{"args not an object", []string{"-args", "[1]", "-mcp-config", two, "-server", "a"}, "-args"},
		{"interval zero", []string{"-interval", "0s", "-mcp-config", two, "-server", "a"}, "-interval"},
		{"interval negative", []string{"-interval", "-1s", "-mcp-config", two, "-server", "a"}, "-interval"},
		{"missing file", []string{"-mcp-config", filepath.Join(dir, "missing.json")}, "missing.json"},
		{"several servers", []string{"-mcp-config", two}, "pick one with -server"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			var stdout, stderr bytes.Buffer
			if code := run(tc.argv, &stdout, &stderr); code != 2 {
				t.Errorf("run(%q) = %d, want 2", tc.argv, code)
			}
			if !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("stderr %q does not mention %q", stderr.String(), tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}

// fixture is a runtime serving MCP on a test server, with an in-process
// provider instance A and a thread T with a credential for (T, A).
type fixture struct {
	rt       *mcpruntime.Runtime
	endpoint string
	auth     string // "Bearer …" of (T, A)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx := context.Background()
	ts := httptest.NewUnstartedServer(nil)
	endpoint := "http://" + ts.Listener.Addr().String() + "/mcp"
	rt, err := mcpruntime.New(mcpruntime.Config{Endpoint: endpoint, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		ts.Close()
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		ts.Close()
		t.Fatalf("MCPHandler: %v", err)
	}
	ts.Config.Handler = h
	ts.Start()
	t.Cleanup(ts.Close)
	t.Cleanup(h.Close)

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
	if ps.Endpoint != endpoint || !strings.HasPrefix(ps.Authorization, "Bearer ") {
		t.Fatalf("OpenProviderSession = %+v, want endpoint %s and a bearer credential", ps, endpoint)
	}
	return &fixture{rt: rt, endpoint: endpoint, auth: ps.Authorization}
}

// config writes the fixture's connection with auth into a config file.
func (f *fixture) config(t *testing.T, path, auth string) string {
	t.Helper()
	return writeConfig(t, path, map[string]server{"mcpruntime": {Type: "http", URL: f.endpoint, Authorization: auth}})
}

// parseReports decodes the agent's output, a JSON object per line, each
// with only the documented fields.
func parseReports(t *testing.T, out string) []report {
	t.Helper()
	var rs []report
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		dec := json.NewDecoder(strings.NewReader(sc.Text()))
		dec.DisallowUnknownFields()
		var r report
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("output line %q: %v", sc.Text(), err)
		}
		rs = append(rs, r)
	}
	return rs
}

// runAgent runs the agent to completion.
func runAgent(t *testing.T, argv ...string) []report {
	t.Helper()
	var stdout, stderr bytes.Buffer
	if code := run(argv, &stdout, &stderr); code != 0 {
		t.Fatalf("run(%q) = %d; stderr:\n%s", argv, code, stderr.String())
	}
	return parseReports(t, stdout.String())
}

// TestRunCalls: with a config file, -calls 3 makes three successful calls
// of thread_read, each reported as one JSON line with status 200 and the
// tool's text.
func TestRunCalls(t *testing.T) {
	clearEnv(t)
	f := newFixture(t)
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), f.auth)

	var stdout, stderr bytes.Buffer
	if code := run([]string{"-mcp-config", file, "-calls", "3", "-interval", "10ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run = %d; stderr:\n%s", code, stderr.String())
	}
	lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("output %q, want 3 lines", stdout.String())
	}
	// The documented keys, and no others.
	var first map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(first))
	for k := range first {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if diff := cmp.Diff([]string{"n", "ok", "result", "status", "tool"}, keys); diff != "" {
		t.Errorf("keys of %s (-want +got):\n%s", lines[0], diff)
	}
	for i, r := range parseReports(t, stdout.String()) {
		if r.N != i+1 || r.Tool != "thread_read" || !r.OK || r.Status != http.StatusOK || r.Error != "" {
			t.Errorf("report %d = %+v, want n=%d, thread_read, ok, status 200", i, r, i+1)
		}
		if !strings.Contains(r.Result, `"threadId":"T"`) {
			t.Errorf("report %d result %q, want thread T's content", i, r.Result)
		}
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %s", stderr.String())
	}
}

// TestRunEnvironment: the connection is taken from MCPRUNTIME_MCP_CONFIG
// (server from MCPRUNTIME_SERVER_NAME), or from MCPRUNTIME_URL and
// MCPRUNTIME_AUTHORIZATION; -tool and -args are passed on.
func TestRunEnvironment(t *testing.T) {
	f := newFixture(t)
	t.Run("config file", func(t *testing.T) {
		clearEnv(t)
		file := writeConfig(t, filepath.Join(t.TempDir(), "mcp.json"), map[string]server{
			"host":  {Type: "http", URL: f.endpoint, Authorization: f.auth},
			"other": {Type: "http", URL: "http://127.0.0.1:1/mcp", Authorization: "Bearer nope"},
		})
		t.Setenv("MCPRUNTIME_MCP_CONFIG", file)
		t.Setenv("MCPRUNTIME_SERVER_NAME", "host")
		rs := runAgent(t, "-calls", "1", "-interval", "10ms")
		if len(rs) != 1 || !rs[0].OK || rs[0].Status != 200 {
			t.Errorf("reports %+v, want one ok call", rs)
		}
	})
	t.Run("url and authorization", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("MCPRUNTIME_URL", f.endpoint)
		t.Setenv("MCPRUNTIME_AUTHORIZATION", f.auth)
		rs := runAgent(t, "-calls", "2", "-interval", "10ms", "-tool", "thread_list")
		if len(rs) != 2 {
			t.Fatalf("reports %+v, want 2", rs)
		}
		for _, r := range rs {
			if !r.OK || r.Tool != "thread_list" || r.Status != 200 || !strings.Contains(r.Result, `"threadId":"T"`) {
				t.Errorf("report %+v, want an ok thread_list listing T", r)
			}
		}
	})
	t.Run("args", func(t *testing.T) {
		clearEnv(t)
		t.Setenv("MCPRUNTIME_URL", f.endpoint)
		t.Setenv("MCPRUNTIME_AUTHORIZATION", f.auth)
		if _, err := f.rt.CreateThread(context.Background(), "U", mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
		rs := runAgent(t, "-calls", "1", "-interval", "10ms", "-args", `{"threadId":"U"}`)
		if len(rs) != 1 || !strings.Contains(rs[0].Result, `"threadId":"U"`) {
			t.Errorf("reports %+v, want thread U read", rs)
		}
	})
}

// TestRunPost: -post posts after each call; it is refused (a tool error,
// not a transport one) unless the instance owns the thread's run.
func TestRunPost(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	f := newFixture(t)
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), f.auth)

	rs := runAgent(t, "-mcp-config", file, "-calls", "1", "-interval", "10ms", "-post", "refused")
	if len(rs) != 2 || rs[0].Tool != "thread_read" || !rs[0].OK || rs[1].Tool != "thread_post" || rs[1].OK || rs[1].N != 1 || rs[1].Status != 200 {
		t.Errorf("reports without a run %+v, want an ok read and a refused post, both n=1", rs)
	}

	if _, err := f.rt.StartRun(ctx, "T", "A"); err != nil {
		t.Fatal(err)
	}
	rs = runAgent(t, "-mcp-config", file, "-calls", "2", "-interval", "10ms", "-post", "hello")
	if len(rs) != 4 {
		t.Fatalf("reports %+v, want 4", rs)
	}
	for i, r := range rs {
		if !r.OK || r.N != i/2+1 {
			t.Errorf("report %d = %+v, want ok with n=%d", i, r, i/2+1)
		}
	}
	th, err := f.rt.Thread(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	var texts []string
	for _, m := range th.Messages {
		texts = append(texts, m.Text)
	}
	if diff := cmp.Diff([]string{"hello", "hello"}, texts); diff != "" {
		t.Errorf("thread messages (-want +got):\n%s", diff)
	}
}

// TestRunRevoked: once the thread is deleted, every call is reported with
// status 401 and an error; the agent keeps going and exits 0.
func TestRunRevoked(t *testing.T) {
	clearEnv(t)
	f := newFixture(t)
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), f.auth)
	if err := f.rt.DeleteThread(context.Background(), "T"); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-mcp-config", file, "-calls", "3", "-interval", "10ms"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run = %d; stderr:\n%s", code, stderr.String())
	}
	rs := parseReports(t, stdout.String())
	if len(rs) != 3 {
		t.Fatalf("reports %+v, want 3", rs)
	}
	for i, r := range rs {
		if r.N != i+1 || r.OK || r.Status != http.StatusUnauthorized || r.Error == "" || r.Result != "" {
			t.Errorf("report %d = %+v, want n=%d, not ok, status 401, an error", i, r, i+1)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and one reader.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// complete returns the complete lines written so far.
func (b *syncBuffer) complete() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	return s[:strings.LastIndexByte(s, '\n')+1]
}

// TestRunRotation: an agent calling in a loop is cut off by a rotation
// (401), picks up the new token once it is written to its config file,
// and recovers; SIGTERM then ends it with status 0.
func TestRunRotation(t *testing.T) {
	clearEnv(t)
	f := newFixture(t)
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), f.auth)

	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-mcp-config", file, "-interval", "10ms"}, &stdout, &stderr) }()
	stopped := false
	stop := func() int {
		stopped = true
		// The agent is in its loop (it has reported), so its SIGTERM
		// handler is installed: the signal goes to it, not to the test.
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-done:
			return code
		case <-time.After(deadline):
			t.Fatal("agent did not stop on SIGTERM")
			return -1
		}
	}
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})

	// waitFor waits for a report after the first `after` ones that
	// satisfies cond, and returns its index.
	waitFor := func(what string, after int, cond func(report) bool) int {
		t.Helper()
		end := time.Now().Add(deadline)
		for time.Now().Before(end) {
			rs := parseReports(t, stdout.complete())
			for i := after; i < len(rs); i++ {
				if cond(rs[i]) {
					return i
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("timed out waiting for %s; output:\n%s\nstderr:\n%s", what, stdout.complete(), stderr.complete())
		return -1
	}
	ok := func(r report) bool { return r.OK && r.Status == 200 }

	waitFor("a first ok call", 0, ok)
	okBefore := waitFor("a second ok call", 1, ok)
	cred, err := f.rt.Rotate(context.Background(), "T", "A")
	if err != nil {
		t.Fatal(err)
	}
	if cred.Authorization == f.auth {
		t.Fatal("Rotate returned the old credential")
	}
	refused := waitFor("a 401 after the rotation", okBefore+1, func(r report) bool { return r.Status == http.StatusUnauthorized })
	f.config(t, file, cred.Authorization)
	recovered := waitFor("an ok call with the new token", refused+1, ok)
	waitFor("a second ok call with the new token", recovered+1, ok)
	rs := parseReports(t, stdout.complete()) // before SIGTERM
	if code := stop(); code != 0 {
		t.Errorf("run after SIGTERM = %d, want 0", code)
	}

	for i, r := range rs {
		if r.N != i+1 || r.Tool != "thread_read" {
			t.Errorf("report %d = %+v, want n=%d of thread_read", i, r, i+1)
		}
		switch {
		case i <= okBefore:
			// Before the rotation: every call ok.
			if !ok(r) {
				t.Errorf("report %d before the rotation = %+v, want ok", i, r)
			}
		case i >= refused && i < recovered:
			if r.OK || r.Status != http.StatusUnauthorized || r.Error == "" {
				t.Errorf("report %d while revoked = %+v, want a 401", i, r)
			}
		case i >= recovered:
			if !ok(r) {
				t.Errorf("report %d after recovery = %+v, want ok", i, r)
			}
		}
	}
	// Calls reported after the SIGTERM: ok, or cut short by it.
	after := parseReports(t, stdout.complete())
	for i := len(rs); i < len(after); i++ {
		if r := after[i]; r.N != i+1 || (!ok(r) && !strings.Contains(r.Error, "context canceled")) {
			t.Errorf("report %d after SIGTERM = %+v, want n=%d, ok or cancelled", i, r, i+1)
		}
	}
}

// TestRunStopsAfterLastCall: -calls N returns once the Nth call is
// reported; it does not wait another interval first.
func TestRunStopsAfterLastCall(t *testing.T) {
	clearEnv(t)
	f := newFixture(t)
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), f.auth)
	var stdout, stderr syncBuffer
	done := make(chan int, 1)
	go func() { done <- run([]string{"-mcp-config", file, "-calls", "1", "-interval", "1h"}, &stdout, &stderr) }()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("run = %d", code)
		}
	case <-time.After(deadline): // a hang detector: the interval is an hour
		// The agent sits out its interval; end it (its SIGTERM handler is
		// installed once it has reported).
		if rs := parseReports(t, stdout.complete()); len(rs) != 1 || !rs[0].OK {
			t.Fatalf("reports %+v, want one ok call", rs)
		}
		if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		<-done
		t.Error("run -calls 1 -interval 1h did not return after its only call: it waits an interval after the last call")
	}
	if rs := parseReports(t, stdout.complete()); len(rs) != 1 || !rs[0].OK {
		t.Errorf("reports %+v, want one ok call", rs)
	}
}

// TestRunResultCut: a long result is cut to its first 200 bytes and "…",
// never in the middle of a character.
func TestRunResultCut(t *testing.T) {
	clearEnv(t)
	ctx := context.Background()
	f := newFixture(t)
	// Two threads whose results differ by one byte: in one of them byte
	// 200 falls inside a two-byte "é".
	var (
		full, auth string
	)
	for i, prefix := range []string{"", "a"} {
		id := "R" + strconv.Itoa(i)
		if _, err := f.rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
		ps, err := f.rt.OpenProviderSession(ctx, id, "A")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.rt.StartRun(ctx, id, "A"); err != nil {
			t.Fatal(err)
		}
		p, err := f.rt.Authenticate(strings.TrimPrefix(ps.Authorization, "Bearer "))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.rt.Post(ctx, p, "", prefix+strings.Repeat("é", 300)); err != nil {
			t.Fatal(err)
		}
		res, err := f.rt.CallTool(ctx, p, "thread_read", json.RawMessage(`{}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		text := res.Content[0].(*mcp.TextContent).Text
		if len(text) > 200 && !utf8.ValidString(text[:200]) {
			full, auth = text, ps.Authorization
		}
	}
	if full == "" {
		t.Fatal("test setup: no result splits a character at byte 200")
	}
	file := f.config(t, filepath.Join(t.TempDir(), "mcp.json"), auth)
	rs := runAgent(t, "-mcp-config", file, "-calls", "1", "-interval", "10ms")
	if len(rs) != 1 || !rs[0].OK {
		t.Fatalf("reports %+v, want one ok call", rs)
	}
	got := rs[0].Result
	head, cut := strings.CutSuffix(got, "…")
	if !cut || len(head) > 200 || len(head) < 197 || !strings.HasPrefix(full, head) || !utf8.ValidString(head) {
		t.Errorf("result %q…%q (%d bytes), want the first 200 bytes of the text, less a partial character, and \"…\"",
			got[:min(len(got), 20)], got[max(0, len(got)-12):], len(got))
	}
}

package servers

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// envFakeRuntime makes the test binary a fake `runtime serve` when set
// (TestMain): "serve" serves (fakeRuntime), "fail" logs a line and exits
// 3 before it is ready.
const envFakeRuntime = "MCPBENCH_FAKE_RUNTIME"

func TestMain(m *testing.M) {
	switch os.Getenv(envFakeRuntime) {
	case "":
		os.Exit(m.Run())
	case "fail":
		fmt.Fprintln(os.Stderr, `time=2026-01-01T00:00:00Z level=ERROR msg="state file in use"`)
		os.Exit(3)
	default:
		os.Exit(fakeRuntime(os.Args[1:]))
	}
}

// fakeMetrics is the fake's /metrics: what the Go collector exposes, in
// its formats.
const fakeMetrics = `# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 12
go_gc_duration_seconds{quantile="0"} 0.000202907
go_memstats_alloc_bytes_total 9.73048e+06
go_memstats_heap_alloc_bytes 3.820192e+06
go_memstats_heap_inuse_bytes 5.562368e+06
go_memstats_mallocs_total 116602
go_memstats_stack_inuse_bytes 458752
`

// fakeSeen is what the fake saw, served on its admin listener at
// /fake/seen.
type fakeSeen struct {
	Args     []string // its argv after the program name
	Env      []string // the RUNTIME_ variables it got, but the token's value
	Issued   []string // "label access" of each client grant issued
	Revoked  []string // client ids revoked
	BadAuths int      // admin requests without the admin token
}

// fakeRuntime is a fake `runtime serve`: loopback listeners on the ports
// --listen and --admin-listen say (":0": the kernel's), the runtime's
// "runtime ready" log line, /readyz, /metrics and the client grants of
// the admin API, until SIGINT or SIGTERM. It returns the exit status.
func fakeRuntime(args []string) int {
	flag := func(name string) string {
		if i := slices.Index(args, name); i >= 0 && i+1 < len(args) {
			return args[i+1]
		}
		return ""
	}
	token := os.Getenv("RUNTIME_ADMIN_TOKEN")
	if len(args) == 0 || args[0] != "serve" || token == "" {
		fmt.Fprintln(os.Stderr, "fake runtime: want serve and $RUNTIME_ADMIN_TOKEN")
		return 2
	}
	if err := os.MkdirAll(flag("--state-dir"), 0o700); err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime:", err)
		return 1
	}
	var (
		mu   sync.Mutex
		seen = fakeSeen{Args: args}
		next int
		ids  = map[string]bool{}
	)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "RUNTIME_") {
			seen.Env = append(seen.Env, k)
		}
	}
	admin := http.NewServeMux()
	admin.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, `{"status":"ready"}`) })
	admin.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, fakeMetrics) })
	admin.HandleFunc("GET /fake/seen", func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(seen)
	})
	authorized := func(r *http.Request) bool {
		ok := r.Header.Get("Authorization") == "Bearer "+token
		if !ok {
			mu.Lock()
			seen.BadAuths++
			mu.Unlock()
		}
		return ok
	}
	admin.HandleFunc("POST /admin/v1/clients", func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Label, Access string }
		if !authorized(r) || json.NewDecoder(r.Body).Decode(&req) != nil {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		mu.Lock()
		next++
		n := next
		ids[fmt.Sprintf("cl_%d", n)] = true
		seen.Issued = append(seen.Issued, req.Label+" "+req.Access)
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"clientId":"cl_%d","token":"tok_%d"}`, n, n)
	})
	admin.HandleFunc("DELETE /admin/v1/clients/{id}", func(w http.ResponseWriter, r *http.Request) {
		if !authorized(r) {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		id := r.PathValue("id")
		mu.Lock()
		defer mu.Unlock()
		if !ids[id] {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		delete(ids, id)
		seen.Revoked = append(seen.Revoked, id)
		fmt.Fprintf(w, `{"clientId":%q,"status":"revoked"}`, id)
	})
	mcpLn, err := net.Listen("tcp", flag("--listen"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime:", err)
		return 1
	}
	adminLn, err := net.Listen("tcp", flag("--admin-listen"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime:", err)
		return 1
	}
	go func() { _ = http.Serve(mcpLn, http.NotFoundHandler()) }()
	go func() { _ = http.Serve(adminLn, admin) }()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Fprintln(os.Stderr, `time=2026-01-01T00:00:00Z level=INFO msg="state on disk" dir=`+flag("--state-dir"))
	fmt.Fprintf(os.Stderr, "time=2026-01-01T00:00:00Z level=INFO msg=\"runtime ready\" mcp=http://%s/mcp admin=http://%s/admin/v1/ endpoint=http://%[1]s/mcp\n",
		mcpLn.Addr(), adminLn.Addr())
	<-sig
	fmt.Fprintln(os.Stderr, `time=2026-01-01T00:00:00Z level=INFO msg="shut down"`)
	return 0
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestStartBinary drives a fake `runtime serve` (this test binary) through
// the adapter: started with the admin token in its environment only and no
// other RUNTIME_ setting, found through its ready line, tokens issued as
// read-only client grants and revoked by client id through the admin API
// (also through ControlBinary), stats and allocations from its /metrics,
// RSS from its /proc status; Close ends it by its PID and removes its
// state directory.
func TestStartBinary(t *testing.T) {
	t.Setenv(envFakeRuntime, "serve")
	t.Setenv("RUNTIME_LOG_LEVEL", "debug") // the shell's; must not reach the child
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log syncBuffer
	b, err := StartBinary(ctx, BinaryOptions{
		Path: os.Args[0], Raised: true, MaxSessions: 7, MaxSessionsPerNamespace: 5,
		Args: []string{"--no-oauth"}, Stderr: &log,
	})
	if err != nil {
		t.Fatalf("StartBinary: %v (log: %s)", err, log.String())
	}
	closed := false
	defer func() {
		if !closed {
			b.Close()
		}
	}()
	if host, _, err := net.SplitHostPort(b.MCPAddr()); err != nil || host != "127.0.0.1" {
		t.Errorf("MCPAddr = %q, want a 127.0.0.1 port", b.MCPAddr())
	}

	toks, err := b.IssueTokens(ctx, 5)
	if err != nil {
		t.Fatalf("IssueTokens: %v", err)
	}
	if slices.Sort(toks); len(slices.Compact(slices.Clone(toks))) != 5 {
		t.Fatalf("IssueTokens = %v, want 5 distinct tokens", toks)
	}
	if err := b.Revoke(ctx, toks[2]); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	for _, tok := range []string{toks[2], "never-issued"} {
		if err := b.Revoke(ctx, tok); !errors.Is(err, ErrUnknownToken) {
			t.Errorf("Revoke(%q) = %v, want ErrUnknownToken", tok, err)
		}
	}
	ctl := httptest.NewServer(ControlBinary(b))
	defer ctl.Close()
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/bench/revoke?token=" + url.QueryEscape(toks[4]), http.StatusNoContent},
		{"/bench/revoke?token=" + url.QueryEscape(toks[4]), http.StatusNotFound},
	} {
		resp, err := http.Post(ctl.URL+tc.path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("POST %s: %s, want %d", tc.path, resp.Status, tc.want)
		}
	}

	st, err := b.Stats(ctx)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.VmRSS == 0 {
		t.Error("Stats: no RSS from the child's /proc status")
	}
	st.VmRSS = 0
	if diff := cmp.Diff(result.ServerStats{HeapAlloc: 3820192, HeapInuse: 5562368, StackInuse: 458752, NumGoroutine: 12}, st); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
	if a, err := b.Allocs(ctx); err != nil || a.Objects != 116602 || a.Bytes != 9730480 {
		t.Errorf("Allocs = %+v, %v; want the fake's counters and its CPU time read", a, err)
	}

	var seen fakeSeen
	if err := b.adminDo(ctx, http.MethodGet, "/fake/seen", nil, http.StatusOK, &seen); err != nil {
		t.Fatal(err)
	}
	slices.Sort(seen.Issued)
	slices.Sort(seen.Revoked)
	want := fakeSeen{
		Args:    []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--state-dir", b.dir + "/state", "--max-sessions", "7", "--sessions-per-namespace", "5", "--no-oauth"},
		Env:     []string{"RUNTIME_ADMIN_TOKEN"},
		Issued:  []string{"bench-1 read-only", "bench-2 read-only", "bench-3 read-only", "bench-4 read-only", "bench-5 read-only"},
		Revoked: []string{"cl_" + strings.TrimPrefix(toks[2], "tok_"), "cl_" + strings.TrimPrefix(toks[4], "tok_")},
	}
	slices.Sort(want.Revoked)
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("the fake saw (-want +got):\n%s", diff)
	}
	if strings.Contains(strings.Join(seen.Args, " "), b.token) {
		t.Error("the admin token is in the child's argv")
	}

	pid, dir := b.PID(), b.dir
	if err := b.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	closed = true
	select {
	case <-b.Exited():
	default:
		t.Error("Close returned before the child exited")
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("kill(%d, 0) after Close = %v, want ESRCH", pid, err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("state directory after Close: %v, want it gone", err)
	}
	if l := log.String(); !strings.Contains(l, `msg="runtime ready"`) || !strings.Contains(l, `msg="shut down"`) {
		t.Errorf("the child's log was not relayed whole:\n%s", l)
	}
}

// TestStartBinaryFails: a child that exits before its ready line fails
// the start with its last log lines, and leaves no directory behind.
func TestStartBinaryFails(t *testing.T) {
	t.Setenv(envFakeRuntime, "fail")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var log syncBuffer
	_, err := StartBinary(ctx, BinaryOptions{Path: os.Args[0], Stderr: &log})
	if err == nil || !strings.Contains(err.Error(), "state file in use") {
		t.Fatalf("StartBinary = %v, want the child's last log line", err)
	}
	if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
		t.Errorf("left in TMPDIR: %v, %v", ents, err)
	}
}

func TestBinaryArgs(t *testing.T) {
	base := []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--state-dir", "/s"}
	for _, tc := range []struct {
		name string
		opts BinaryOptions
		want []string
	}{
		{"defaults", BinaryOptions{MaxSessions: 200000, MaxSessionsPerNamespace: 200000}, base},
		{"raised", BinaryOptions{Raised: true, MaxSessions: 200000, MaxSessionsPerNamespace: 100},
			append(slices.Clone(base), "--max-sessions", "200000", "--sessions-per-namespace", "100")},
		{"raised, zero caps keep their defaults", BinaryOptions{Raised: true}, base},
		{"more flags last", BinaryOptions{Args: []string{"--memory", "--no-oauth"}}, append(slices.Clone(base), "--memory", "--no-oauth")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, binaryArgs(tc.opts, "/s")); diff != "" {
				t.Errorf("binaryArgs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBinaryEnv(t *testing.T) {
	got := binaryEnv([]string{"HOME=/h", "RUNTIME_CONFIG=/etc/rt.toml", "RUNTIME_ADMIN_TOKEN=old", "PATH=/bin", "XRUNTIME_X=1"}, "new")
	if diff := cmp.Diff([]string{"HOME=/h", "PATH=/bin", "XRUNTIME_X=1", "RUNTIME_ADMIN_TOKEN=new"}, got); diff != "" {
		t.Errorf("binaryEnv (-want +got):\n%s", diff)
	}
}

func TestParseReadyLine(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		mcp, admin string
		ok         bool
	}{
		{"ready", `time=2026-12-07T01:11:07.394Z level=INFO msg="runtime ready" mcp=http://127.0.0.1:35409/mcp admin=http://127.0.0.1:39333/admin/v1/ endpoint=http://127.0.0.1:35409/mcp oauth_issuer=http://127.0.0.1:35409`,
			"127.0.0.1:35409", "http://127.0.0.1:39333", true},
		{"IPv6 loopback", `level=INFO msg="runtime ready" mcp=http://[::1]:1/mcp admin=http://[::1]:2/admin/v1/`, "[::1]:1", "http://[::1]:2", true},
		{"another line", `level=INFO msg="state on disk" mcp=http://127.0.0.1:1/mcp admin=http://127.0.0.1:2/admin/v1/`, "", "", false},
		{"beyond loopback", `level=INFO msg="runtime ready" mcp=http://10.0.0.1:1/mcp admin=http://127.0.0.1:2/admin/v1/`, "", "", false},
		{"a name, not an IP", `level=INFO msg="runtime ready" mcp=http://localhost:1/mcp admin=http://127.0.0.1:2/admin/v1/`, "", "", false},
		{"no admin", `level=INFO msg="runtime ready" mcp=http://127.0.0.1:1/mcp`, "", "", false},
		{"https", `level=INFO msg="runtime ready" mcp=https://127.0.0.1:1/mcp admin=http://127.0.0.1:2/admin/v1/`, "", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mcp, admin, ok := parseReadyLine(tc.line)
			if ok != tc.ok || (ok && (mcp != tc.mcp || admin != tc.admin)) {
				t.Errorf("parseReadyLine = %q, %q, %v; want %q, %q, %v", mcp, admin, ok, tc.mcp, tc.admin, tc.ok)
			}
		})
	}
}

func TestParseMetrics(t *testing.T) {
	m, err := parseMetrics(strings.NewReader(fakeMetrics + "\nprocess_start_time_seconds 1.79660586646e+09 1700000000000\n"))
	if err != nil {
		t.Fatalf("parseMetrics: %v", err)
	}
	want := map[string]float64{
		"go_goroutines": 12, "go_memstats_alloc_bytes_total": 9730480, "go_memstats_heap_alloc_bytes": 3820192,
		"go_memstats_heap_inuse_bytes": 5562368, "go_memstats_mallocs_total": 116602, "go_memstats_stack_inuse_bytes": 458752,
		"process_start_time_seconds": 1796605866.46,
	}
	if diff := cmp.Diff(want, m); diff != "" {
		t.Errorf("parseMetrics (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"go_goroutines\n", "go_goroutines twelve\n"} {
		if _, err := parseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("parseMetrics(%q): no error", bad)
		}
	}
	if _, err := statsFromMetrics(map[string]float64{metricHeapAlloc: 1}, 0); err == nil {
		t.Error("statsFromMetrics without the stack and goroutines: no error")
	}
	if _, err := allocsFromMetrics(map[string]float64{metricMallocs: 1}); err == nil {
		t.Error("allocsFromMetrics without the bytes: no error")
	}
}

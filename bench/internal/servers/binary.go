package servers

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// The shipped binary (binary, binary-raised) is `runtime serve` in a child
// process, driven through its own interfaces only: the admin API for
// tokens, Prometheus /metrics and /proc for memory. Its flags are its
// defaults but for what a benchmark must set: loopback listeners on ports
// the kernel picks (read back from its "runtime ready" log line), the
// admin token in $RUNTIME_ADMIN_TOKEN, and its state directory (durable,
// as by default) in a temporary directory. binary-raised raises its
// session caps as the runtime's in-process server has them.

// Defaults of BinaryOptions.
const (
	defaultStartTimeout = 30 * time.Second
	defaultStopTimeout  = 15 * time.Second // beyond runtime serve's 10 s shutdown grace
)

// adminConns is how many connections the adapter opens to the binary's
// admin listener, below its default cap of 16 per source.
const adminConns = 4

// maxMetricsBody bounds a /metrics answer.
const maxMetricsBody = 4 << 20

// BinaryOptions configure StartBinary.
type BinaryOptions struct {
	// Path is the runtime binary (go build ./cmd/runtime).
	Path string
	// Raised sets --max-sessions and --sessions-per-namespace to
	// MaxSessions and MaxSessionsPerNamespace (binary-raised); a zero one
	// keeps its default. Without Raised both keep their defaults.
	Raised                               bool
	MaxSessions, MaxSessionsPerNamespace int
	// Args are more flags of runtime serve, after the adapter's (a flag
	// given twice: the last one counts). Never a secret: argv is public.
	Args []string
	// Stderr receives the child's log. Nil: os.Stderr.
	Stderr io.Writer
	// StartTimeout bounds the start, until /readyz answers 200. Zero: 30 s.
	StartTimeout time.Duration
}

// BinaryServer is a running `runtime serve` child and the client of its
// admin listener. Its methods are safe for concurrent use.
type BinaryServer struct {
	cmd     *exec.Cmd
	dir     string // the temporary directory of its state; removed by Close
	mcpAddr string // host:port of its MCP listener
	admin   string // http://host:port of its admin listener
	token   string // its admin token; only in its environment and in requests' headers
	http    *http.Client
	labels  atomic.Int64

	exited  chan struct{} // closed once the child is reaped
	waitErr error         // the child's exit, once exited is closed
	stop    sync.Once
	stopErr error

	mu      sync.Mutex
	clients map[string]string // token → client grant id
}

// binaryArgs is the argv of runtime serve, after the program name: the
// adapter's flags, the raised caps, then opts.Args.
func binaryArgs(opts BinaryOptions, stateDir string) []string {
	args := []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--state-dir", stateDir}
	if opts.Raised {
		if opts.MaxSessions > 0 {
			args = append(args, "--max-sessions", strconv.Itoa(opts.MaxSessions))
		}
		if opts.MaxSessionsPerNamespace > 0 {
			args = append(args, "--sessions-per-namespace", strconv.Itoa(opts.MaxSessionsPerNamespace))
		}
	}
	return append(args, opts.Args...)
}

// binaryEnv is the child's environment: env without any RUNTIME_
// setting (a config file or flag value of the user's shell would change
// the defaults measured), with the admin token.
func binaryEnv(env []string, token string) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "RUNTIME_") {
			out = append(out, kv)
		}
	}
	return append(out, "RUNTIME_ADMIN_TOKEN="+token)
}

// StartBinary starts `runtime serve` and returns once its /readyz answers
// 200. The child inherits this process's CPU affinity. On an error
// nothing is left running and the temporary directory is gone.
func StartBinary(ctx context.Context, opts BinaryOptions) (*BinaryServer, error) {
	if opts.Stderr == nil {
		opts.Stderr = os.Stderr
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, opts.StartTimeout)
	defer cancel()
	dir, err := os.MkdirTemp("", "mcpbench-binary-")
	if err != nil {
		return nil, err
	}
	var tok [32]byte
	_, _ = rand.Read(tok[:]) // crypto/rand.Read never fails
	b := &BinaryServer{
		dir:     dir,
		token:   "mcpbench_" + hex.EncodeToString(tok[:]),
		http:    &http.Client{Transport: &http.Transport{Proxy: nil, MaxConnsPerHost: adminConns, MaxIdleConnsPerHost: adminConns}, Timeout: time.Minute},
		exited:  make(chan struct{}),
		clients: map[string]string{},
	}
	// Not exec.CommandContext: the child outlives ctx, which bounds the
	// start only; Close ends it.
	cmd := exec.Command(opts.Path, binaryArgs(opts, dir+"/state")...)
	cmd.Env = binaryEnv(os.Environ(), b.token)
	cmd.Stdout = opts.Stderr
	cmd.SysProcAttr = childAttr()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("start %s: %w", opts.Path, err)
	}
	b.cmd = cmd
	ready := make(chan readyAddrs, 1)
	logDone := make(chan struct{})
	go func() {
		defer close(logDone)
		relayLog(stderr, opts.Stderr, ready)
	}()
	go func() {
		<-logDone // Wait closes the pipe: read it to the end first
		b.waitErr = cmd.Wait()
		close(b.exited)
	}()
	if err := b.awaitReady(ctx, ready); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%s serve (pid %d): %w", opts.Path, cmd.Process.Pid, err)
	}
	// The first /metrics of a process costs ~3 000 allocations and 1 MB
	// (later ones ~500 and 100 KB): read it now, not as the first end of a
	// window of calls whose allocations are counted.
	if _, err := b.Allocs(ctx); err != nil {
		_ = b.Close()
		return nil, fmt.Errorf("%s serve (pid %d): %w", opts.Path, cmd.Process.Pid, err)
	}
	return b, nil
}

// readyAddrs are the listeners a "runtime ready" line names.
type readyAddrs struct {
	mcp, admin string
	err        error
}

// relayLog copies the child's log to w line by line and sends the
// addresses of its first "runtime ready" line on ready (or, at the end
// of the log without one, an error with its last lines).
func relayLog(r io.Reader, w io.Writer, ready chan<- readyAddrs) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var tail []string
	sent := false
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(w, line)
		if sent {
			continue
		}
		if mcp, admin, ok := parseReadyLine(line); ok {
			ready <- readyAddrs{mcp: mcp, admin: admin}
			sent = true
			continue
		}
		if tail = append(tail, line); len(tail) > 5 {
			tail = tail[1:]
		}
	}
	if !sent {
		ready <- readyAddrs{err: fmt.Errorf("its log ended without a ready line: %s", strings.Join(tail, " | "))}
	}
	_, _ = io.Copy(w, r) // a line too long for the scanner: keep the pipe drained
}

// parseReadyLine reads the MCP listener's host:port and the admin
// listener's base URL (http://host:port) from runtime serve's
// "runtime ready" log line (the text format):
//
//	time=… level=INFO msg="runtime ready" mcp=http://127.0.0.1:P/mcp admin=http://127.0.0.1:Q/admin/v1/ …
//
// Both must be loopback.
func parseReadyLine(line string) (mcpAddr, adminBase string, ok bool) {
	if !strings.Contains(line, `msg="runtime ready"`) {
		return "", "", false
	}
	for _, f := range strings.Fields(line) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "mcp":
			mcpAddr = loopbackHost(v)
		case "admin":
			if h := loopbackHost(v); h != "" {
				adminBase = "http://" + h
			}
		}
	}
	return mcpAddr, adminBase, mcpAddr != "" && adminBase != ""
}

// loopbackHost is the host:port of an http URL on a loopback IP, else "".
func loopbackHost(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "http" {
		return ""
	}
	ip := net.ParseIP(u.Hostname())
	if ip == nil || !ip.IsLoopback() || u.Port() == "" {
		return ""
	}
	return u.Host
}

// awaitReady waits for the ready line, then for /readyz to answer 200.
func (b *BinaryServer) awaitReady(ctx context.Context, ready <-chan readyAddrs) error {
	select {
	case a := <-ready:
		if a.err != nil {
			return a.err
		}
		b.mcpAddr, b.admin = a.mcp, a.admin
	case <-ctx.Done():
		return fmt.Errorf("no ready line: %w", ctx.Err())
	}
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.admin+"/readyz", nil)
		if err != nil {
			return err
		}
		resp, err := b.http.Do(req)
		if err == nil {
			drainClose(resp.Body)
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("/readyz: %w", ctx.Err())
		case <-b.exited:
			return fmt.Errorf("exited: %v", b.waitErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// MCPAddr is the host:port of the binary's MCP listener (path /mcp).
func (b *BinaryServer) MCPAddr() string { return b.mcpAddr }

// PID is the child's process id.
func (b *BinaryServer) PID() int { return b.cmd.Process.Pid }

// Exited is closed once the child has exited.
func (b *BinaryServer) Exited() <-chan struct{} { return b.exited }

// clientGrant is the admin API's answer to POST /admin/v1/clients.
type clientGrant struct {
	ClientID string `json:"clientId"`
	Token    string `json:"token"`
}

// IssueTokens issues one read-only client grant per token through the
// admin API (POST /admin/v1/clients), adminConns at a time.
func (b *BinaryServer) IssueTokens(ctx context.Context, n int) ([]string, error) {
	out := make([]string, n)
	var (
		errMu sync.Mutex
		first error
	)
	parallelDo(n, adminConns, func(i int) {
		if ctx.Err() != nil {
			return
		}
		label := fmt.Sprintf("bench-%d", b.labels.Add(1))
		body, _ := json.Marshal(map[string]string{"label": label, "access": "read-only"})
		var g clientGrant
		err := b.adminDo(ctx, http.MethodPost, "/admin/v1/clients", body, http.StatusCreated, &g)
		if err == nil && (g.ClientID == "" || g.Token == "") {
			err = fmt.Errorf("issue client grant %s: an answer without a client id or token", label)
		}
		if err != nil {
			errMu.Lock()
			if first == nil {
				first = err
			}
			errMu.Unlock()
			return
		}
		b.mu.Lock()
		b.clients[g.Token] = g.ClientID
		b.mu.Unlock()
		out[i] = g.Token
	})
	if first == nil && ctx.Err() != nil {
		first = ctx.Err()
	}
	if first != nil {
		return nil, first
	}
	return out, nil
}

// Revoke revokes the token's client grant (DELETE /admin/v1/clients/{id}).
func (b *BinaryServer) Revoke(ctx context.Context, tok string) error {
	b.mu.Lock()
	id, ok := b.clients[tok]
	delete(b.clients, tok)
	b.mu.Unlock()
	if !ok {
		return ErrUnknownToken
	}
	return b.adminDo(ctx, http.MethodDelete, "/admin/v1/clients/"+url.PathEscape(id), nil, http.StatusOK, nil)
}

// adminDo sends one admin API request with the admin token and decodes
// the answer into out (unless nil); any status but want is an error.
func (b *BinaryServer) adminDo(ctx context.Context, method, path string, body []byte, want int, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.admin+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+b.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != want {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return fmt.Errorf("admin %s %s: HTTP %d, want %d: %s", method, path, resp.StatusCode, want, bytes.TrimSpace(msg))
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("admin %s %s: %w", method, path, err)
	}
	return nil
}

// metrics reads the binary's /metrics: every sample without labels.
func (b *BinaryServer) metrics(ctx context.Context) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.admin+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := b.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("/metrics: %w", err)
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: HTTP %d", resp.StatusCode)
	}
	return parseMetrics(io.LimitReader(resp.Body, maxMetricsBody))
}

// parseMetrics reads the samples without labels of a Prometheus text
// exposition ("name value [timestamp]"); comments and labelled samples
// are skipped.
func parseMetrics(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || strings.ContainsRune(line, '{') {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("metrics line %q: no value", line)
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %q: %w", line, err)
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}

// The Go collector's metrics Stats and Allocs read. mallocs_total counts
// tiny allocations too, as ReadAllocs does.
const (
	metricHeapAlloc   = "go_memstats_heap_alloc_bytes"
	metricHeapInuse   = "go_memstats_heap_inuse_bytes"
	metricStackInuse  = "go_memstats_stack_inuse_bytes"
	metricGoroutines  = "go_goroutines"
	metricMallocs     = "go_memstats_mallocs_total"
	metricAllocsBytes = "go_memstats_alloc_bytes_total"
)

// statsFromMetrics is ServerStats of a /metrics reading: not collected
// (the binary cannot be asked to collect garbage), so the heap holds
// garbage too.
func statsFromMetrics(m map[string]float64, rss uint64) (result.ServerStats, error) {
	if err := require(m, metricHeapAlloc, metricHeapInuse, metricStackInuse, metricGoroutines); err != nil {
		return result.ServerStats{}, err
	}
	return result.ServerStats{
		HeapAlloc:    uint64(m[metricHeapAlloc]),
		HeapInuse:    uint64(m[metricHeapInuse]),
		StackInuse:   uint64(m[metricStackInuse]),
		NumGoroutine: int(m[metricGoroutines]),
		VmRSS:        rss,
	}, nil
}

// allocsFromMetrics is AllocCounts of a /metrics reading.
func allocsFromMetrics(m map[string]float64) (result.AllocCounts, error) {
	if err := require(m, metricMallocs, metricAllocsBytes); err != nil {
		return result.AllocCounts{}, err
	}
	return result.AllocCounts{Objects: uint64(m[metricMallocs]), Bytes: uint64(m[metricAllocsBytes])}, nil
}

func require(m map[string]float64, names ...string) error {
	for _, n := range names {
		if _, ok := m[n]; !ok {
			return fmt.Errorf("/metrics has no %s", n)
		}
	}
	return nil
}

// Stats reads the binary's memory from its /metrics and its RSS from
// /proc/<pid>/status, without collecting garbage first (Collected false).
func (b *BinaryServer) Stats(ctx context.Context) (result.ServerStats, error) {
	m, err := b.metrics(ctx)
	if err != nil {
		return result.ServerStats{}, err
	}
	var rss uint64
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", b.PID())); err == nil {
		rss = parseVmRSS(st)
	}
	return statsFromMetrics(m, rss)
}

// Allocs reads the binary's cumulative allocations from its /metrics and
// its CPU time from /proc/<pid>/stat.
// The reading itself allocates in the binary (the exposition is built per
// request): ~500 objects and ~100 KB once warm (StartBinary reads it
// once), which a window's delta counts once: under 0.1 allocations and
// ~10 B per call over a 3 s window at 3 000 calls/s.
func (b *BinaryServer) Allocs(ctx context.Context) (result.AllocCounts, error) {
	m, err := b.metrics(ctx)
	if err != nil {
		return result.AllocCounts{}, err
	}
	a, err := allocsFromMetrics(m)
	if err != nil {
		return a, err
	}
	a.CPUNanos, err = processCPU(strconv.Itoa(b.PID()))
	return a, err
}

// Close ends the child by its PID: SIGINT (runtime serve shuts down
// gracefully, as on SIGTERM), then SIGKILL if it is still running after
// its shutdown grace; then removes its state directory. It returns the
// child's exit error, nil after a clean shutdown.
func (b *BinaryServer) Close() error {
	b.stop.Do(func() {
		select {
		case <-b.exited:
		default:
			_ = b.cmd.Process.Signal(os.Interrupt)
			select {
			case <-b.exited:
			case <-time.After(defaultStopTimeout):
				_ = b.cmd.Process.Kill()
				<-b.exited
			}
		}
		if b.waitErr != nil {
			b.stopErr = fmt.Errorf("pid %d: %w", b.cmd.Process.Pid, b.waitErr)
		}
		b.http.CloseIdleConnections()
		if err := os.RemoveAll(b.dir); err != nil && b.stopErr == nil {
			b.stopErr = err
		}
	})
	return b.stopErr
}

// parallelDo runs fn(i) for i in [0, n) on at most conc goroutines.
func parallelDo(n, conc int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, conc) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// drainClose reads what is left of a body (bounded) and closes it.
func drainClose(body io.ReadCloser) {
	_, _ = io.Copy(io.Discard, io.LimitReader(body, 1<<20))
	_ = body.Close()
}

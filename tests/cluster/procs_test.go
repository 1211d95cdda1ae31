package cluster

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/clienttest"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// What the multi-process tests share: the runtime binary, runtime
// processes on loopback (each killed at cleanup by its PID), their admin
// API and their MCP listener.

// buildRuntime builds cmd/runtime, in the runtime's own module ("../.."), into
// a temporary directory and returns the binary. It is built without the
// race detector: the processes are the subject, the test process (under
// -race) the observer, and three instrumented servers on two cores would
// starve their own fences.
func buildRuntime(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runtime")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // detects a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/runtime")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/runtime: %v\n%s", err, out)
	}
	return bin
}

// freePorts returns n distinct loopback ports that were free a moment ago
// (held at once, then closed, so that the process can bind them).
func freePorts(t *testing.T, n int) []string {
	t.Helper()
	ports := make([]string, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		defer ln.Close()
		_, ports[i], _ = net.SplitHostPort(ln.Addr().String())
	}
	return ports
}

// randomSecret is 32 random bytes, base64url: an admin token or a cluster
// secret.
func randomSecret(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return prefix + base64.RawURLEncoding.EncodeToString(b)
}

// proc is one `runtime serve --etcd …` process.
type proc struct {
	t          *testing.T
	id         string
	cmd        *exec.Cmd
	dir        string // its own directory: HOME, the admin token file's
	log        string // its stderr
	mcpURL     string
	adminURL   string
	adminToken string
	done       chan struct{} // closed once it exited
	state      *os.ProcessState
	http       *http.Client
}

// startProcs starts one node per id on etcd with the cluster secret file,
// all at once, on free loopback ports, with extra flags, and waits until
// every /readyz answers 200. Each process is killed at cleanup (SIGKILL, by
// its PID) if it still runs, and its log printed if the test failed. A
// port taken by someone else in between is retried with new ones.
func startProcs(t *testing.T, bin, etcd, secretFile string, ids []string, extra ...string) []*proc {
	t.Helper()
	procs := make([]*proc, len(ids))
	for i, id := range ids {
		procs[i] = launch(t, bin, id, etcd, secretFile, extra)
	}
	for i, p := range procs {
		for attempt := 1; ; attempt++ {
			err := p.waitReady()
			if err == nil {
				break
			}
			if attempt < 3 && strings.Contains(p.logs(), "address already in use") {
				p = launch(t, bin, p.id, etcd, secretFile, extra)
				procs[i] = p
				continue
			}
			t.Fatalf("node %s not ready: %v\n%s", p.id, err, p.logs())
		}
	}
	return procs
}

func launch(t *testing.T, bin, id, etcd, secretFile string, extra []string) *proc {
	t.Helper()
	dir := t.TempDir()
	ports := freePorts(t, 3)
	p := &proc{
		t: t, id: id, dir: dir, log: filepath.Join(dir, "stderr.log"),
		mcpURL: "http://127.0.0.1:" + ports[0] + "/mcp", adminURL: "http://127.0.0.1:" + ports[1],
		adminToken: randomSecret(t, "mcpadm_"), done: make(chan struct{}),
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	p.http = &http.Client{Transport: tr, Timeout: 20 * time.Second} // detects a hang only
	logFile, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"serve",
		"--etcd", etcd, "--node", id, "--cluster-secret-file", secretFile,
		"--listen", "127.0.0.1:" + ports[0], "--admin-listen", "127.0.0.1:" + ports[1],
		"--internal-listen", "127.0.0.1:" + ports[2],
		"--admin-token-file", filepath.Join(dir, "admin-token"), "--shutdown-grace", "5s",
	}, extra...)
	p.cmd = exec.Command(bin, args...)
	// Its own environment, nothing of the test's: no RUNTIME_* leaks in.
	p.cmd.Env = []string{"HOME=" + dir, "PATH=" + os.Getenv("PATH"), "RUNTIME_ADMIN_TOKEN=" + p.adminToken}
	p.cmd.Stdout, p.cmd.Stderr = logFile, logFile
	if err := p.cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start %s: %v", id, err)
	}
	go func() {
		_ = p.cmd.Wait()
		p.state = p.cmd.ProcessState
		logFile.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("node %s (pid %d) stderr:\n%s", id, p.cmd.Process.Pid, p.logs())
		}
	})
	return p
}

// logs is what the process wrote so far.
func (p *proc) logs() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// kill sends SIGKILL to the process (a stopped one too) unless it has
// exited, and waits for its exit.
func (p *proc) kill() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Kill()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second): // detects a hang only
		p.t.Errorf("node %s (pid %d) did not exit after SIGKILL", p.id, p.cmd.Process.Pid)
	}
}

// signal sends sig to the process, by its PID.
func (p *proc) signal(sig syscall.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatalf("signal %v to %s: %v", sig, p.id, err)
	}
}

// waitExit waits for the process to exit by itself and returns its status.
func (p *proc) waitExit() int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.state.ExitCode()
	case <-time.After(30 * time.Second): // detects a hang only
		p.t.Fatalf("node %s did not exit", p.id)
		return -1
	}
}

// waitReady polls /readyz until it answers 200; an exit or 30 s first is
// an error.
func (p *proc) waitReady() error {
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if status, _ := p.get("/readyz"); status == http.StatusOK {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited with %v", p.state)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return errors.New("/readyz not 200 within 30 s")
		}
	}
}

// get GETs a path of the admin listener, without the token (health
// checks); status 0 when it did not answer.
func (p *proc) get(path string) (int, string) {
	resp, err := p.http.Get(p.adminURL + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// admin calls the admin API with the admin token and returns the status
// and the decoded JSON body.
func (p *proc) admin(method, path string, body any) (int, map[string]any) {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			p.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.adminURL+"/admin/v1"+path, rd)
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+p.adminToken)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := p.http.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s on %s: %v", method, path, p.id, err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		p.t.Fatalf("%s %s on %s: %d, body not JSON: %v", method, path, p.id, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// mustAdmin is admin that requires status want.
func (p *proc) mustAdmin(want int, method, path string, body any) map[string]any {
	p.t.Helper()
	status, out := p.admin(method, path, body)
	if status != want {
		p.t.Fatalf("%s %s on %s: %d %v, want %d", method, path, p.id, status, out, want)
	}
	return out
}

// toolsList sends a 2026-07-28 tools/list with token to the node's MCP
// listener and returns the status and the body.
func (p *proc) toolsList(token string) (int, []byte) {
	p.t.Helper()
	status, body, err := clienttest.PostModern(p.mcpURL, token, "tools/list", "", nil)
	if err != nil {
		p.t.Fatalf("tools/list on %s: %v", p.id, err)
	}
	if status == http.StatusOK && !bytes.Contains(body, []byte(`"thread_read"`)) {
		p.t.Fatalf("tools/list on %s: 200 without thread_read: %s", p.id, body)
	}
	return status, body
}

// post sends one 2025-era MCP POST (sid "": none) with token to the
// node's MCP listener and returns the status, the session id answered and
// the body.
func (p *proc) post(token, sid, body string) (int, string, []byte) {
	p.t.Helper()
	req, err := http.NewRequest(http.MethodPost, p.mcpURL, strings.NewReader(body))
	if err != nil {
		p.t.Fatal(err)
	}
	req.Header = ht.Headers(token, sid)
	resp, err := p.http.Do(req)
	if err != nil {
		p.t.Fatalf("MCP POST on %s: %v", p.id, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatalf("MCP POST on %s: body: %v", p.id, err)
	}
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), b
}

// metric returns the value of the sample line name (with its labels) in
// the node's /metrics, 0 when absent.
func (p *proc) metric(name string) float64 {
	p.t.Helper()
	status, body := p.get("/metrics")
	if status != http.StatusOK {
		p.t.Fatalf("%s /metrics: %d", p.id, status)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				p.t.Fatalf("%s /metrics: %q: %v", p.id, line, err)
			}
			return f
		}
	}
	return 0
}

// wantAuth requires each token's tools/list on each node to answer want.
func wantAuth(t *testing.T, want int, what string, nodes []*proc, tokens ...string) {
	t.Helper()
	for _, n := range nodes {
		for i, tok := range tokens {
			if got, body := n.toolsList(tok); got != want {
				t.Fatalf("%s: token %d on %s: tools/list %d %s, want %d", what, i, n.id, got, body, want)
			}
		}
	}
}

// waitAuth polls token's tools/list on node until it answers want.
func waitAuth(t *testing.T, n *proc, token string, want int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second) // detects a hang only
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		got, body := n.toolsList(token)
		if got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools/list on %s: %d %s, want %d within 30 s", n.id, got, body, want)
		}
		<-tick.C
	}
}

// bearer strips "Bearer " from an Authorization value.
func bearer(t *testing.T, auth any) string {
	t.Helper()
	s, _ := auth.(string)
	tok, ok := strings.CutPrefix(s, "Bearer ")
	if !ok || tok == "" {
		t.Fatalf("authorization %q: want Bearer <token>", s)
	}
	return tok
}

// waitMembers polls node's /metrics until mcpruntime_node_members (the
// members its replica has applied, itself included) is want.
func waitMembers(t *testing.T, n *proc, want int) {
	t.Helper()
	line := "\nmcpruntime_node_members " + strconv.Itoa(want) + "\n"
	deadline := time.Now().Add(30 * time.Second) // the lease is 3 s
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		status, body := n.get("/metrics")
		if status == http.StatusOK && strings.Contains("\n"+body+"\n", line) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not see %d members within 30 s; /metrics: %d\n%s", n.id, want, status, body)
		}
		<-tick.C
	}
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// jsonLogs returns the records of a JSON log, in order.
func jsonLogs(logs *syncBuffer) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(logs.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil {
			out = append(out, rec)
		}
	}
	return out
}

// logIndex is the index of the first record with message msg (and, if
// line is not "", that line of provider output); -1 if there is none.
func logIndex(recs []map[string]any, msg, line string) int {
	for i, r := range recs {
		if r["msg"] == msg && (line == "" || r["line"] == line) {
			return i
		}
	}
	return -1
}

// waitLog waits for a record as logIndex finds it; the deadline only
// detects a hang.
func waitLog(t *testing.T, logs *syncBuffer, msg, line string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for logIndex(jsonLogs(logs), msg, line) < 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no %q %q logged; logs:\n%s", msg, line, logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stubbornConfig is the exec config of an agent that ignores SIGTERM (and
// says "term" when it gets one) with a grace of an hour.
func stubbornConfig(t *testing.T) string {
	t.Helper()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(map[string]any{
		"command":   sh,
		"args":      []string{"-c", `trap 'echo term' TERM; echo "ready $$"; while :; do sleep 0.01; done`},
		"configDir": t.TempDir(),
		"grace":     "1h",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestShutdownOneDeadline: on SIGTERM the whole shutdown runs within
// --shutdown-grace. An exec agent that ignores SIGTERM (grace: an hour) is
// killed when the shutdown's deadline comes, and until the listeners close
// /readyz answers 503 JSON — the admin listener closes last. The test ends the deadline itself (through the shutdown hook)
// once it has seen the tail: the agent given SIGTERM and /readyz 503.
func TestShutdownOneDeadline(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type addrs struct{ mcp, admin string }
	ready := make(chan addrs, 1)
	deadline := make(chan context.CancelFunc, 1)
	ctx = context.WithValue(ctx, readyHookKey{}, func(m, a string) { ready <- addrs{m, a} })
	ctx = context.WithValue(ctx, shutdownHookKey{}, func(sctx context.Context) context.Context {
		c, end := context.WithCancel(sctx)
		deadline <- end
		return c
	})
	logs := &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
			"--admin-token-file", tokenFile, "--no-demo", "--log-format", "json", "--shutdown-grace", "1h"}, map[string]string{}, io.Discard, logs)
	}()
	var a addrs
	select {
	case a = <-ready:
	case code := <-done:
		t.Fatalf("serve exited %d before it was ready; logs:\n%s", code, logs)
	case <-time.After(30 * time.Second): // detects a hang only
		t.Fatalf("serve not ready; logs:\n%s", logs)
	}
	admin := func(args ...string) string {
		t.Helper()
		code, stdout, stderr := runCLI(context.Background(), map[string]string{},
			append([]string{"admin", "--admin-url", "http://" + a.admin, "--admin-token-file", tokenFile}, args...)...)
		if code != 0 {
			t.Fatalf("admin %q: exit %d, stderr %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}
	admin("instance", "create", "stubborn", "--driver", "exec", "--driver-config", stubbornConfig(t))
	admin("thread", "create", "t1")
	admin("provider-session", "open", "t1", "stubborn")
	waitLog(t, logs, "provider output", "")
	var pid int
	for _, r := range jsonLogs(logs) {
		if r["msg"] == "provider process started" {
			pid = int(r["pid"].(float64))
		}
	}
	if pid == 0 {
		t.Fatalf("no process started; logs:\n%s", logs)
	}

	cancel() // SIGTERM
	waitLog(t, logs, "provider output", "term")
	// The tail: the agent ignores SIGTERM, the shutdown waits for its
	// deadline, and the admin listener still says so.
	if code, body := httpGet(t, "http://"+a.admin+"/readyz"); code != 503 || body != `{"status":"shutting down"}` {
		t.Errorf("readyz during the shutdown's tail: %d %s, want 503 shutting down", code, body)
	}
	select {
	case code := <-done:
		t.Fatalf("serve exited %d before its deadline, with the agent still running", code)
	default:
	}
	(<-deadline)() // the deadline comes
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("serve exited %d; logs:\n%s", code, logs)
		}
	case <-time.After(60 * time.Second): // detects a hang only
		t.Fatalf("serve did not exit after its shutdown deadline; logs:\n%s", logs)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("agent %d after the shutdown: kill(0) = %v, want ESRCH (killed and reaped)", pid, err)
	}
	recs := jsonLogs(logs)
	killed, exited, shut := logIndex(recs, "provider process did not stop on SIGTERM; killing", ""),
		logIndex(recs, "provider process exited", ""), logIndex(recs, "shut down", "")
	if killed < 0 || !(killed < exited && exited < shut) {
		t.Errorf("log order: killed %d, exited %d, shut down %d; want them in this order", killed, exited, shut)
	}
	if _, err := os.Stat(tokenFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("admin token file left behind: %v", err)
	}
}

// TestShutdownGraceKills: with a short --shutdown-grace and no hook, the
// flag alone brings the deadline: the agent that ignores SIGTERM is killed
// and serve exits 0.
func TestShutdownGraceKills(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	_, adminAddr, logs, stop := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo",
		"--log-format", "json", "--shutdown-grace", "200ms")
	admin := func(args ...string) {
		t.Helper()
		if code, _, stderr := runCLI(context.Background(), map[string]string{},
			append([]string{"admin", "--admin-url", "http://" + adminAddr, "--admin-token-file", tokenFile}, args...)...); code != 0 {
			t.Fatalf("admin %q: exit %d, stderr %s", args, code, stderr)
		}
	}
	admin("instance", "create", "stubborn", "--driver", "exec", "--driver-config", stubbornConfig(t))
	admin("thread", "create", "t1")
	admin("provider-session", "open", "t1", "stubborn")
	waitLog(t, logs, "provider output", "")
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; logs:\n%s", code, logs)
	}
	recs := jsonLogs(logs)
	if logIndex(recs, "provider process did not stop on SIGTERM; killing", "") < 0 || logIndex(recs, "shut down", "") < 0 {
		t.Errorf("no kill, or no clean shutdown, logged:\n%s", logs)
	}
}

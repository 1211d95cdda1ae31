package agentproc_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink the output copiers and the test share.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

func sh(t *testing.T) string {
	t.Helper()
	var c agentproc.Config
	path, err := (&c).Resolve("sh")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLoggedOutputIsRedacted: a secret given at start, and one added
// later, never reach the log; stderr's tail is kept for error messages.
func TestLoggedOutputIsRedacted(t *testing.T) {
	logs := newSyncBuffer()
	p, err := agentproc.Start(agentproc.Spec{
		Path: sh(t), Args: []string{"-c", `echo "first s3cret-one"; read x; echo "then $x" >&2; exit 3`},
		Logger: slog.New(slog.NewTextHandler(logs, nil)), Redact: []string{"s3cret-one"}, Stdio: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	p.Redact("s3cret-two")
	if _, err := io.WriteString(p.Stdin, "s3cret-two\n"); err != nil {
		t.Fatal(err)
	}
	// Stdio: stdout is the caller's, not logged.
	line, err := bufio.NewReader(p.Stdout).ReadString('\n')
	if err != nil || line != "first s3cret-one\n" {
		t.Fatalf("stdout = %q, %v", line, err)
	}
	<-p.Done()
	p.Stdout.Close()
	p.Stdin.Close()
	if got := logs.String(); strings.Contains(got, "s3cret") || !strings.Contains(got, "then [redacted]") {
		t.Errorf("log:\n%s", got)
	}
	if p.Tail() != "then [redacted]" || !strings.Contains(p.Status(), "exit status 3") {
		t.Errorf("tail %q, status %q", p.Tail(), p.Status())
	}
}

// TestStopKillsTheGroup: a process that ignores SIGTERM, and its child,
// are killed once the grace passed.
func TestStopKillsTheGroup(t *testing.T) {
	p, err := agentproc.Start(agentproc.Spec{
		Path: sh(t), Args: []string{"-c", `trap '' TERM; sleep 60 & echo $! ; wait`},
		Stdio: true, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stdout.Close()
	var child int
	if _, err := fmtScan(p.Stdout, &child); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(context.Background(), 100*time.Millisecond); !errors.Is(err, agentproc.ErrKilled) {
		t.Fatalf("Stop = %v, want ErrKilled", err)
	}
	// The group took SIGKILL, which the child cannot ignore; it dies as the
	// kernel gets to it (a moment after its leader was reaped), then is a
	// zombie until its new parent reaps it.
	end := time.Now().Add(10 * time.Second)
	for st := procState(child); st != "" && st != "Z"; st = procState(child) {
		if time.Now().After(end) {
			t.Fatalf("child %d is still running (state %s) after its group's SIGKILL", child, st)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// procState is the state letter of pid in /proc ("" if it is gone).
func procState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return rest[:1]
}

func fmtScan(r io.Reader, v *int) (int, error) {
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		return 0, err
	}
	return 1, json.Unmarshal([]byte(strings.TrimSpace(line)), v)
}

// TestPrivateFiles: the directory is 0700, files written into it 0600,
// and a rewrite replaces the content whole.
func TestPrivateFiles(t *testing.T) {
	dir, err := agentproc.PrivateDir(t.TempDir(), "s-")
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("dir mode %v, %v", fi.Mode(), err)
	}
	path := filepath.Join(dir, "mcp.json")
	for _, content := range []string{"old token", "new"} {
		if err := agentproc.WriteFile(path, []byte(content)); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("file mode %v, %v", fi.Mode(), err)
		}
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Errorf("content %q, want %q", got, content)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("%d entries, want the file alone (no temporary left)", len(entries))
	}
}

// TestConfigRefuses: reserved variables, bad names, a missing command,
// negative durations, unknown fields.
func TestConfigRefuses(t *testing.T) {
	for name, raw := range map[string]string{
		"reserved env":      `{"env":{"MCPRUNTIME_TOKEN":"x"}}`,
		"reserved inherit":  `{"inheritEnv":["RUNTIME_ADMIN_TOKEN"]}`,
		"missing command":   `{"command":"no-such-agent-binary"}`,
		"negative grace":    `{"grace":"-1s"}`,
		"bad server name":   `{"serverName":"a b"}`,
		"negative start":    `{"startTimeout":"-5s"}`,
		"missing configDir": `{"configDir":"/no/such/dir"}`,
	} {
		var c agentproc.Config
		if err := agentproc.Decode("test", json.RawMessage(raw), &c); err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if _, err := c.Resolve("sh"); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	var c agentproc.Config
	if err := agentproc.Decode("test", json.RawMessage(`{"comand":"sh"}`), &c); err == nil {
		t.Error("unknown field accepted")
	}
	if err := agentproc.Decode("test", json.RawMessage(`{} {}`), &c); err == nil {
		t.Error("trailing data accepted")
	}
}

// TestReadLine: lines come without their newline, whole however many
// buffer fills they span; one over the bound is an error, not a cut line;
// the end of the output is io.EOF.
func TestReadLine(t *testing.T) {
	long := strings.Repeat("x", 40)
	br := bufio.NewReaderSize(strings.NewReader("a\n\n"+long+"\n"+long+"y\n"), 16) // 16: bufio's minimum
	for _, want := range []string{"a", "", long} {
		got, err := agentproc.ReadLine(br, len(long)+1) // the bound counts the newline
		if err != nil || string(got) != want {
			t.Fatalf("ReadLine = %q, %v; want %q", got, err, want)
		}
	}
	if got, err := agentproc.ReadLine(br, len(long)+1); err == nil || !strings.Contains(err.Error(), "longer than 41 bytes") {
		t.Fatalf("ReadLine of %d bytes = %q, %v; want the bound's error", len(long)+2, got, err)
	}
	br = bufio.NewReader(strings.NewReader("tail"))
	if got, err := agentproc.ReadLine(br, 100); !errors.Is(err, io.EOF) {
		t.Fatalf("ReadLine at the end = %q, %v; want io.EOF", got, err)
	}
}

//go:build linux

package agenttest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

// TestLeaks: a secret is found in a process's argv, in a file's content or
// name under a scanned directory but not under an allowed one, and in a
// log; nowhere else.
func TestLeaks(t *testing.T) {
	secret := fmt.Sprintf("mcprt_leak_%d_%d", os.Getpid(), time.Now().UnixNano())
	scan, allow := t.TempDir(), t.TempDir()
	write := func(path, data string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(scan, "clean.json"), `{"token":"other"}`)
	if got := agenttest.Leaks(secret, nil, []string{scan}, []byte("a clean log\n")); got != nil {
		t.Fatalf("Leaks with no leak = %q", got)
	}

	write(filepath.Join(scan, "deep", "er", "config.toml"), "token = \""+secret+"\"\n")
	write(filepath.Join(scan, "allowed", "token"), secret)
	write(filepath.Join(allow, "token"), secret)
	write(filepath.Join(scan, "name-"+secret), "clean")
	if err := syscall.Mkfifo(filepath.Join(scan, "fifo"), 0o600); err != nil { // never opened: reading it would block
		t.Fatal(err)
	}
	if err := os.Symlink(allow, filepath.Join(scan, "link")); err != nil { // not followed
		t.Fatal(err)
	}
	big := make([]byte, 16<<20+1)
	copy(big, secret)
	write(filepath.Join(scan, "big.bin"), string(big)) // over 16 MiB: skipped
	write(filepath.Join(scan, "locked", "f"), secret)
	if os.Getuid() != 0 { // root reads it anyway
		if err := os.Chmod(filepath.Join(scan, "locked"), 0); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = os.Chmod(filepath.Join(scan, "locked"), 0o700) })
	}

	// The shell waits in its builtin read, so it forks no child that would
	// carry its argv too (a "sleep" could be seen mid-fork).
	stdin, hold, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, "sh", "-c", "read -r line", "sh-"+secret)
	cmd.Stdin = stdin
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = stdin.Close()
	var wg sync.WaitGroup
	wg.Go(func() { _ = cmd.Wait() })
	t.Cleanup(func() { _ = hold.Close(); cancel(); wg.Wait() })

	got := agenttest.Leaks(secret, []string{allow, filepath.Join(scan, "allowed")}, []string{scan, allow},
		[]byte("clean\n"), []byte("line one\nAuthorization: Bearer "+secret+" sent\nline three"))
	want := []string{
		fmt.Sprintf("argv[3] of process %d (sh)", cmd.Process.Pid),
		"file " + filepath.Join(scan, "deep", "er", "config.toml"),
		"file name " + filepath.Join(scan, "name-[secret]"),
		"log 1: Authorization: Bearer [secret] sent",
	}
	if os.Getuid() == 0 {
		want = append(want, "file "+filepath.Join(scan, "locked", "f"))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("Leaks =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if got := agenttest.Leaks("", nil, nil); len(got) != 1 {
		t.Errorf("Leaks of an empty secret = %q, want it reported", got)
	}
}

// fatalTB records a Fatalf and ends its goroutine, as testing.T does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestBinary: a pinned CLI is found under e2e/agents/node_modules/.bin; a
// missing one fails the test, naming make test-deps.
func TestBinary(t *testing.T) {
	for _, name := range []string{"codex", "claude", "opencode"} {
		path := agenttest.Binary(t, name)
		if !strings.HasSuffix(path, filepath.Join("e2e", "agents", "node_modules", ".bin", name)) || !filepath.IsAbs(path) {
			t.Errorf("Binary(%s) = %s", name, path)
		}
	}
	f := &fatalTB{TB: t}
	done := make(chan string)
	go func() {
		defer func() { done <- f.msg }()
		agenttest.Binary(f, "no-such-agent")
	}()
	if msg := <-done; !strings.Contains(msg, "run make test-deps") {
		t.Errorf("Binary of a missing CLI failed with %q, want it to name make test-deps", msg)
	}
}

// TestHome: a new empty 0700 directory each time.
func TestHome(t *testing.T) {
	a, b := agenttest.Home(t), agenttest.Home(t)
	if a == b {
		t.Fatalf("Home twice = %s", a)
	}
	fi, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	if !fi.IsDir() || fi.Mode().Perm() != 0o700 {
		t.Errorf("Home mode %v, want a 0700 directory", fi.Mode())
	}
	if ents, _ := os.ReadDir(a); len(ents) != 0 {
		t.Errorf("Home holds %v", ents)
	}
}

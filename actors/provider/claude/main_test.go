package claude_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind (every
// session's reader and watcher must be gone once its process is) or an
// Claude Code of its own running.
func TestMain(m *testing.M) {
	// Every test's directories, and so every CLAUDE_CONFIG_DIR of this package's
	// agents, under one directory of this run: the leak check below
	// then finds this package's processes only, not those of a package
	// tested beside it (go test ./... runs packages in parallel).
	root, err := os.MkdirTemp("", "claude-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", root)
	code := m.Run()
	if code == 0 {
		if left := leftAgents(root); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: claude processes left running: %v\n", left)
			code = 1
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: goroutines left: %v\n", err)
			code = 1
		}
	}
	os.RemoveAll(root)
	os.Exit(code)
}

// leftAgents returns the processes (after a short grace for the last
// reaping) whose CLAUDE_CONFIG_DIR is under root, this run's directory.
func leftAgents(root string) []string {
	prefix := []byte("CLAUDE_CONFIG_DIR=" + root + string(filepath.Separator))
	var left []string
	for range 50 {
		left = left[:0]
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			env, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil {
				continue
			}
			for _, v := range bytes.Split(env, []byte{0}) {
				if bytes.HasPrefix(v, prefix) {
					cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
					left = append(left, e.Name()+" "+strings.ReplaceAll(string(cmd), "\x00", " "))
				}
			}
		}
		if len(left) == 0 {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return left
}

package drivertest

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

// Agents names a package's agent processes for Main.
type Agents struct {
	// Kind is the driver's kind, the start of the run's directory's name.
	Kind string
	// Name is what they are called in the failure ("app-servers").
	Name string
	// HomeVar is the variable of an agent's environment that holds a
	// directory under the test's TempDir ("CODEX_HOME").
	HomeVar string
}

// Main runs a package's tests (m.Run) with every test's directories, and
// so every agent's agents.HomeVar, under one directory of this run, and
// fails the package if a test leaves an agent process of its own running
// or a goroutine behind (every session's reader and watcher must be gone
// once its process is). It is the package's TestMain:
//
//	func TestMain(m *testing.M) { drivertest.Main(m, drivertest.Agents{…}) }
func Main(m *testing.M, agents Agents) {
	// One directory of this run: the leak check below then finds this
	// package's processes only, not those of a package tested beside it
	// (go test ./... runs packages in parallel).
	root, err := os.MkdirTemp("", agents.Kind+"-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("TMPDIR", root)
	code := m.Run()
	if code == 0 {
		if left := leftAgents(agents.HomeVar, root); len(left) > 0 {
			fmt.Fprintf(os.Stderr, "FAIL: %s left running: %v\n", agents.Name, left)
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
// reaping) whose variable homeVar is under root, this run's directory.
func leftAgents(homeVar, root string) []string {
	prefix := []byte(homeVar + "=" + root + string(filepath.Separator))
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

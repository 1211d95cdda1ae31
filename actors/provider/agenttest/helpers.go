package agenttest

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// agentsDir is where the pinned CLIs' npm package lives, from the
// repository's root.
const agentsDir = "e2e/agents"

// Binary returns the path of the pinned CLI name ("codex", "claude",
// "opencode") in e2e/agents/node_modules/.bin, and fails the test (it does
// not skip it) if it is not installed there.
func Binary(t testing.TB, name string) string {
	t.Helper()
	root, err := repoRoot()
	if err != nil {
		t.Fatalf("agent CLI %s: %v (run make test-deps)", name, err)
	}
	path := filepath.Join(root, agentsDir, "node_modules", ".bin", name)
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatalf("agent CLI %s is not installed: %v (run make test-deps)", name, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		t.Fatalf("agent CLI %s at %s is not executable (run make test-deps)", name, path)
	}
	return path
}

// repoRoot finds the directory holding e2e/agents/package.json: up from
// the working directory (a test runs in its package's directory, in this
// module or in one nested in the repository), else up from this file.
func repoRoot() (string, error) {
	var starts []string
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		starts = append(starts, filepath.Dir(file))
	}
	for _, dir := range starts {
		for {
			if _, err := os.Stat(filepath.Join(dir, agentsDir, "package.json")); err == nil {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("no %s/package.json above %v", agentsDir, starts)
}

// Home returns a new, empty directory for an agent's HOME (mode 0700,
// removed when the test ends). An agent given it as HOME, with the XDG
// directories under it, writes nothing outside.
func Home(t testing.TB) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "home")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatalf("make HOME: %v", err)
	}
	return dir
}

// maxScan bounds the size of a file Leaks reads: an agent's config, logs
// and session files are far smaller, a larger file is a cache.
const maxScan = 16 << 20

// Leaks returns where secret appears, one description each (the secret
// itself masked in them): the command
// line of any process whose /proc/<pid>/cmdline can be read, any regular
// file (its name or its content) under scanDirs but not under allowDirs
// (unreadable files and files over 16 MiB are skipped, symbolic links are
// not followed), and any of logs. It returns nil if there is none; an
// empty secret is itself reported, since it would be found everywhere.
func Leaks(secret string, allowDirs []string, scanDirs []string, logs ...[]byte) []string {
	if secret == "" {
		return []string{"Leaks: the secret is empty"}
	}
	needle := []byte(secret)
	var out []string
	out = append(out, cmdlineLeaks(needle)...)
	allowed := func(path string) bool {
		for _, a := range allowDirs {
			if a == "" {
				continue
			}
			if rel, err := filepath.Rel(filepath.Clean(a), path); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
				return true
			}
		}
		return false
	}
	for _, dir := range scanDirs {
		if dir == "" {
			continue
		}
		_ = filepath.WalkDir(filepath.Clean(dir), func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				if d != nil && d.IsDir() {
					return fs.SkipDir // unreadable
				}
				return nil
			}
			if allowed(path) {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if strings.Contains(path, secret) {
				out = append(out, "file name "+strings.ReplaceAll(path, secret, "[secret]"))
			}
			if !d.Type().IsRegular() {
				return nil // a directory, link, socket or pipe: nothing to read
			}
			if fi, err := d.Info(); err != nil || fi.Size() > maxScan {
				return nil
			}
			data, err := os.ReadFile(path)
			if err == nil && bytes.Contains(data, needle) {
				out = append(out, "file "+path)
			}
			return nil
		})
	}
	for i, l := range logs {
		if j := bytes.Index(l, needle); j >= 0 {
			out = append(out, fmt.Sprintf("log %d: %s", i, lineAt(l, j, secret)))
		}
	}
	return out
}

// cmdlineLeaks reports the processes whose argv holds needle.
func cmdlineLeaks(needle []byte) []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil // no /proc: not Linux, nothing to read
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() || strings.TrimLeft(e.Name(), "0123456789") != "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !bytes.Contains(data, needle) {
			continue // gone, unreadable, or clean
		}
		args := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
		for i, a := range args {
			if strings.Contains(a, string(needle)) {
				out = append(out, fmt.Sprintf("argv[%d] of process %s (%s)", i, e.Name(), args[0]))
			}
		}
	}
	return out
}

// lineAt is the line of l around offset i, secret masked in it so that
// the report does not spread it further.
func lineAt(l []byte, i int, secret string) string {
	start := bytes.LastIndexByte(l[:i], '\n') + 1
	end := len(l)
	if j := bytes.IndexByte(l[i:], '\n'); j >= 0 {
		end = i + j
	}
	line := strings.ReplaceAll(string(l[start:end]), secret, "[secret]")
	if len(line) > 300 {
		line = line[:300] + "…"
	}
	return line
}

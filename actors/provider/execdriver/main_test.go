package execdriver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/execdriver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// session's reaper and output copiers must be gone once its process is.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadline bounds every poll and every driver call's context; a correct
// implementation is never near it, however busy the machine.
const deadline = time.Minute

const (
	testInstance = "inst-1"
	testEndpoint = "http://127.0.0.1:7331/mcp"
)

// poll calls cond every 10ms until it holds, failing the test after the
// deadline.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// record is one captured log record, its attributes flattened to strings
// (those added with Logger.With included).
type record struct {
	Level slog.Level
	Msg   string
	Attrs map[string]string
}

// capture is a slog.Handler that keeps every record.
type capture struct {
	mu    *sync.Mutex
	recs  *[]record
	attrs []slog.Attr
}

func newCapture() *capture { return &capture{mu: new(sync.Mutex), recs: new([]record)} }

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := record{Level: r.Level, Msg: r.Message, Attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.Attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.recs = append(*c.recs, rec)
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, recs: c.recs, attrs: append(append([]slog.Attr(nil), c.attrs...), as...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c } // the driver uses no groups

func (c *capture) records() []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]record(nil), *c.recs...)
}

// find returns the records with message msg logged for session.
func (c *capture) find(session, msg string) []record {
	var out []record
	for _, r := range c.records() {
		if r.Msg == msg && r.Attrs["session"] == session {
			out = append(out, r)
		}
	}
	return out
}

// lines returns what session wrote on stream, a line per record.
func (c *capture) lines(session, stream string) []string {
	var out []string
	for _, r := range c.find(session, "provider output") {
		if r.Attrs["stream"] == stream {
			out = append(out, r.Attrs["line"])
		}
	}
	return out
}

// waitLine waits until session has written line on stream.
func (c *capture) waitLine(t *testing.T, session, stream, line string) {
	t.Helper()
	poll(t, fmt.Sprintf("%s %s line %q", session, stream, line), func() bool {
		for _, l := range c.lines(session, stream) {
			if l == line {
				return true
			}
		}
		return false
	})
}

// waitPrefix waits for a line of session's stdout starting with prefix and
// returns the rest of it.
func (c *capture) waitPrefix(t *testing.T, session, prefix string) string {
	t.Helper()
	var rest string
	poll(t, fmt.Sprintf("%s stdout line starting %q", session, prefix), func() bool {
		for _, l := range c.lines(session, "stdout") {
			if r, ok := strings.CutPrefix(l, prefix); ok {
				rest = r
				return true
			}
		}
		return false
	})
	return rest
}

// pid returns the pid the driver logged when it started session's process.
func (c *capture) pid(t *testing.T, session string) int {
	t.Helper()
	recs := c.find(session, "provider process started")
	if len(recs) != 1 {
		t.Fatalf("%d \"provider process started\" records for %s, want 1", len(recs), session)
	}
	pid, err := strconv.Atoi(recs[0].Attrs["pid"])
	if err != nil || pid <= 1 {
		t.Fatalf("started record of %s has pid %q", session, recs[0].Attrs["pid"])
	}
	return pid
}

// exited waits for the "provider process exited" record of session and
// returns it.
func (c *capture) exited(t *testing.T, session string) record {
	t.Helper()
	var rec record
	poll(t, session+" exit record", func() bool {
		recs := c.find(session, "provider process exited")
		if len(recs) > 0 {
			rec = recs[0]
		}
		return len(recs) > 0
	})
	if n := len(c.find(session, "provider process exited")); n != 1 {
		t.Fatalf("%d exit records for %s, want 1", n, session)
	}
	return rec
}

// events records what a session reported; the exec driver reports
// deaths only.
type events struct{ providertest.Events }

func (e *events) died() []error { return e.Deaths() }

// waitDied waits for the first Died call and returns its error.
func (e *events) waitDied(t *testing.T) error {
	t.Helper()
	poll(t, "Died", func() bool { return len(e.died()) > 0 })
	return e.died()[0]
}

// script writes an executable /bin/sh script into a fresh directory and
// returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "agent.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// fixture is one driver with a captured log and a config directory of its
// own.
type fixture struct {
	t         *testing.T
	log       *capture
	configDir string
	drv       driver.Driver
}

// newFixture builds a driver for cfg (a JSON object as a map); configDir
// defaults to a fresh temporary directory, startupWait to 50ms, grace to
// 2s. Cleanup checks that the config directory is left empty.
func newFixture(t *testing.T, cfg map[string]any) *fixture {
	t.Helper()
	f := &fixture{t: t, log: newCapture()}
	if _, ok := cfg["configDir"]; !ok {
		f.configDir = t.TempDir()
		cfg["configDir"] = f.configDir
	} else {
		f.configDir, _ = cfg["configDir"].(string)
	}
	if _, ok := cfg["startupWait"]; !ok {
		cfg["startupWait"] = "50ms"
	}
	if _, ok := cfg["grace"]; !ok {
		cfg["grace"] = "2s"
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.drv, err = execdriver.Factory(slog.New(f.log))(testInstance, raw)
	if err != nil {
		t.Fatalf("Factory(%s) = %v", raw, err)
	}
	if f.drv.MultiThread() {
		t.Fatal("exec driver says MultiThread")
	}
	// Registered before any session's cleanup, so it runs after them all.
	t.Cleanup(func() { assertEmptyDir(t, f.configDir) })
	return f
}

// binding returns the binding of thread with token.
func binding(thread, token string) driver.Binding {
	return driver.Binding{
		Thread: thread, Instance: testInstance, CredentialID: "cred-" + thread,
		Endpoint: testEndpoint, Authorization: "Bearer " + token,
	}
}

// open opens a session and registers a cleanup that closes it (unless the
// test did) and checks it left no process and no file behind.
func (f *fixture) open(id string, b driver.Binding, ev *events) driver.Session {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	s, err := f.drv.Open(ctx, driver.OpenRequest{SessionID: id, Instance: testInstance, Binding: b, Events: ev})
	if err != nil {
		f.t.Fatalf("Open(%s) = %v", id, err)
	}
	pid := f.log.pid(f.t, id)
	f.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), deadline)
		defer cancel()
		_ = s.Close(ctx) // a second Close of a closed session is a no-op for this driver
		assertReaped(f.t, pid)
		if left, _ := filepath.Glob(filepath.Join(f.configDir, "mcp-"+id+"-*")); len(left) > 0 {
			f.t.Errorf("session %s left %v behind", id, left)
		}
	})
	return s
}

// closeSession closes s, which must succeed.
func closeSession(t *testing.T, s driver.Session) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.Close(ctx); err != nil {
		t.Fatalf("Close = %v", err)
	}
}

// procState returns the state letter of pid from /proc, or 0 if there is no
// such process.
func procState(pid int) byte {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return 0
	}
	return data[i+2]
}

// assertReaped checks that our child pid is gone: no process, or (the pid
// reused) not a zombie. It is checked at once: the driver reaps before it
// reports.
func assertReaped(t *testing.T, pid int) {
	t.Helper()
	if st := procState(pid); st == 'Z' {
		t.Fatalf("process %d is a zombie", pid)
	} else if st != 0 {
		// The pid may have been reused; it is not ours if it is not in our
		// process group's family. Check its parent.
		if ppid := procPPid(pid); ppid == os.Getpid() {
			t.Fatalf("process %d (state %c) is still alive", pid, st)
		}
	}
}

// assertDead waits until pid (a grandchild, reaped by init) is no longer
// running: gone, or a zombie waiting for its new parent.
func assertDead(t *testing.T, what string, pid int) {
	t.Helper()
	poll(t, fmt.Sprintf("%s (pid %d) to die", what, pid), func() bool {
		st := procState(pid)
		return st == 0 || st == 'Z' || st == 'X'
	})
}

func procPPid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// assertEmptyDir checks that dir holds no file: no MCP config file and no
// temporary file of a rewrite outlives its session.
func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s still holds %v", dir, names)
	}
}

// configFiles returns the files in dir.
func configFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, filepath.Join(dir, e.Name()))
	}
	return out
}

// procEnviron returns the environment pid was started with.
func procEnviron(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("read environment of %d: %v", pid, err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(string(data), "\x00") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		if _, dup := env[k]; dup {
			t.Errorf("variable %s given twice", k)
		}
		env[k] = v
	}
	return env
}

// mcpConfigOf is the file content expected for a binding.
func mcpConfigOf(server string, b driver.Binding) map[string]any {
	return map[string]any{"mcpServers": map[string]any{server: map[string]any{
		"type": "http", "url": b.Endpoint, "headers": map[string]any{"Authorization": b.Authorization},
	}}}
}

// readJSON reads and decodes a JSON file.
func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	return m
}

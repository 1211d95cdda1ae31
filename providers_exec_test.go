//go:build linux

// The exec driver's tests run examples/agent as real processes and check
// on them through /proc, hence Linux only.

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
)

// agentBuild is examples/agent, built once per test binary.
var agentBuild struct {
	once sync.Once
	path string
	err  error
	// file keeps the built binary open after its directory is removed: the
	// driver runs it as /proc/<pid>/fd/<n>, so the build leaves nothing on
	// disk however the test binary ends.
	file *os.File
}

// agentBinary returns the path of examples/agent, building it on first use.
// A failed build fails the test: nothing is skipped.
func agentBinary(t *testing.T) string {
	t.Helper()
	agentBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "mcpruntime-agent-")
		if err != nil {
			agentBuild.err = err
			return
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "agent")
		out, err := exec.Command("go", "build", "-o", bin, "./examples/agent").CombinedOutput()
		if err != nil {
			agentBuild.err = fmt.Errorf("go build ./examples/agent: %v\n%s", err, out)
			return
		}
		f, err := os.Open(bin)
		if err != nil {
			agentBuild.err = err
			return
		}
		agentBuild.file = f
		agentBuild.path = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), f.Fd())
	})
	if agentBuild.err != nil {
		t.Fatal(agentBuild.err)
	}
	return agentBuild.path
}

// logRecord is one captured log record, its attributes (those added with
// Logger.With included) rendered as strings.
type logRecord struct {
	msg   string
	attrs map[string]string
}

// logCapture collects every record logged through its handlers. Safe for
// concurrent use.
type logCapture struct {
	mu   sync.Mutex // guards recs
	recs []logRecord
}

func (c *logCapture) handler() slog.Handler { return &captureHandler{c: c} }

// captureHandler is the slog.Handler of a logCapture; attrs are those of
// Logger.With. Groups are ignored: the runtime uses none.
type captureHandler struct {
	c     *logCapture
	attrs []slog.Attr
}

func (h *captureHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *captureHandler) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{msg: r.Message, attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	h.c.mu.Lock()
	h.c.recs = append(h.c.recs, rec)
	h.c.mu.Unlock()
	return nil
}

func (h *captureHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &captureHandler{c: h.c, attrs: append(slices.Clip(h.attrs), as...)}
}

func (h *captureHandler) WithGroup(string) slog.Handler { return h }

// records returns the records with message msg whose attribute key is
// value.
func (c *logCapture) records(msg, key, value string) []logRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []logRecord
	for _, r := range c.recs {
		if r.msg == msg && r.attrs[key] == value {
			out = append(out, r)
		}
	}
	return out
}

// agentLine is one line examples/agent writes on stdout per call.
type agentLine struct {
	N      int    `json:"n"`
	Tool   string `json:"tool"`
	OK     bool   `json:"ok"`
	Status int    `json:"status"`
	Error  string `json:"error"`
	Result string `json:"result"`
}

// lines returns what the agent of a provider session reported so far, in
// order, from its stdout records.
func (c *logCapture) lines(t *testing.T, session string) []agentLine {
	t.Helper()
	var out []agentLine
	for _, r := range c.records("provider output", "session", session) {
		if r.attrs["stream"] != "stdout" {
			continue
		}
		var l agentLine
		if err := json.Unmarshal([]byte(r.attrs["line"]), &l); err != nil {
			t.Fatalf("session %s: agent stdout line %q: %v", session, r.attrs["line"], err)
		}
		out = append(out, l)
	}
	return out
}

func okCount(lines []agentLine) int {
	n := 0
	for _, l := range lines {
		if l.OK {
			n++
		}
	}
	return n
}

// pids returns the pids of the processes started for a provider session.
func (c *logCapture) pids(t *testing.T, session string) []int {
	t.Helper()
	var out []int
	for _, r := range c.records("provider process started", "session", session) {
		pid, err := strconv.Atoi(r.attrs["pid"])
		if err != nil {
			t.Fatalf("session %s: process started with pid %q: %v", session, r.attrs["pid"], err)
		}
		out = append(out, pid)
	}
	return out
}

// execEnv is a runtime whose MCP endpoint is served by an httptest server
// and whose logs are captured, for exec instances running examples/agent.
type execEnv struct {
	t     *testing.T
	rt    *mcpruntime.Runtime
	logs  *logCapture
	agent string // the examples/agent binary
}

// newExecEnv starts the runtime with Config.Endpoint on a test server. The
// runtime is closed (stopping every process) before the server, so agents
// never outlive the endpoint they call.
func newExecEnv(t *testing.T, cfg mcpruntime.Config) *execEnv {
	t.Helper()
	agent := agentBinary(t)
	ts := httptest.NewUnstartedServer(nil)
	t.Cleanup(ts.Close)
	logs := &logCapture{}
	cfg.Endpoint = "http://" + ts.Listener.Addr().String() + "/mcp"
	cfg.Logger = slog.New(logs.handler())
	rt := newRuntime(t, cfg)
	srv, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	ts.Config.Handler = srv
	ts.Start()
	return &execEnv{t: t, rt: rt, logs: logs, agent: agent}
}

// agentConfig is the exec config of an instance running examples/agent
// every 20 ms against the MCP config file. It calls runtime_capabilities,
// whose answer names the caller's own instance (thread_read names the
// thread's current one), so each line says whose credential made the call.
func (e *execEnv) agentConfig(configDir string) json.RawMessage {
	cfg, err := json.Marshal(map[string]any{
		"command":   e.agent,
		"args":      []string{"-mcp-config", "{mcpConfig}", "-interval", "20ms", "-tool", "runtime_capabilities"},
		"configDir": configDir,
		"grace":     "2s",
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return cfg
}

func (e *execEnv) registerAgent(id, configDir string) {
	e.t.Helper()
	noErr(e.t, e.rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{
		Driver: "exec", Config: e.agentConfig(configDir),
	}))
}

// pid returns the pid of the one process of a provider session.
func (e *execEnv) pid(session string) int {
	e.t.Helper()
	pids := e.logs.pids(e.t, session)
	if len(pids) != 1 {
		e.t.Fatalf("session %s: processes started %v, want exactly one", session, pids)
	}
	return pids[0]
}

// waitCalls waits until each session's agent has made at least two more
// successful calls than when waitCalls was called, and checks that every
// successful call of each was made with the credential of its own
// instance.
func (e *execEnv) waitCalls(what string, sessions map[string]string) {
	e.t.Helper()
	before := map[string]int{}
	for s := range sessions {
		before[s] = okCount(e.logs.lines(e.t, s))
	}
	for s, inst := range sessions {
		waitUntil(e.t, fmt.Sprintf("%s: agent of %s (%s) keeps calling", what, s, inst), func() bool {
			return okCount(e.logs.lines(e.t, s)) >= before[s]+2
		})
		want := `"instance":"` + inst + `"`
		for _, l := range e.logs.lines(e.t, s) {
			if l.OK && (l.Status != 200 || !strings.Contains(l.Result, want)) {
				e.t.Fatalf("%s: agent of %s reported %+v, want status 200 and a result naming %s", what, s, l, want)
			}
		}
	}
}

// waitRefused waits until the agent of session reports a 401 after its
// first `after` lines, and then checks that no call of it succeeds any
// more.
func (e *execEnv) waitRefused(what, session string, after int) {
	e.t.Helper()
	first := -1
	waitUntil(e.t, what+": agent of "+session+" reports 401", func() bool {
		lines := e.logs.lines(e.t, session)
		for i := after; i < len(lines); i++ {
			if lines[i].Status == 401 && !lines[i].OK {
				first = i
				return true
			}
		}
		return false
	})
	waitUntil(e.t, what+": agent of "+session+" keeps reporting", func() bool {
		return len(e.logs.lines(e.t, session)) >= first+3
	})
	for _, l := range e.logs.lines(e.t, session)[first:] {
		if l.OK {
			e.t.Fatalf("%s: agent of %s reported %+v after its first 401", what, session, l)
		}
	}
}

// wantExited waits for the runtime's record that the process of session
// exited, and requires it to say whether it died on its own.
func (e *execEnv) wantExited(what, session string, died bool) {
	e.t.Helper()
	var recs []logRecord
	waitUntil(e.t, what+": process exit logged", func() bool {
		recs = e.logs.records("provider process exited", "session", session)
		return len(recs) > 0
	})
	if len(recs) != 1 || recs[0].attrs["died"] != strconv.FormatBool(died) {
		e.t.Fatalf("%s: exit records %v, want one with died=%v", what, recs, died)
	}
}

// wantReaped requires that pid has exited and was reaped: no process, not
// even a zombie, has it any more.
func wantReaped(t *testing.T, what string, pid int) {
	t.Helper()
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		// "pid (comm) S …": the state follows the last ')'.
		state := "?"
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) {
			state = string(stat[i+2])
		}
		t.Fatalf("%s: process %d still exists (state %s)", what, pid, state)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("%s: kill(%d, 0) = %v, want ESRCH", what, pid, err)
	}
}

// wantEmptyDir requires that dir holds no file (no MCP config left).
func wantEmptyDir(t *testing.T, what, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(ents) != 0 {
		names := make([]string, len(ents))
		for i, e := range ents {
			names[i] = e.Name()
		}
		t.Fatalf("%s: %s holds %v, want nothing", what, dir, names)
	}
}

// configFile returns the one MCP config file of session in dir and its
// content, and checks that only its owner can read it.
func configFile(t *testing.T, dir, session string) (string, string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	noErr(t, err)
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "mcp-"+session+"-") || !strings.HasSuffix(ents[0].Name(), ".json") {
		t.Fatalf("config dir %s holds %v, want one mcp-%s-*.json", dir, ents, session)
	}
	path := filepath.Join(dir, ents[0].Name())
	fi, err := os.Stat(path)
	noErr(t, err)
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("%s has mode %v, want 0600", path, fi.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	noErr(t, err)
	return path, string(data)
}

// TestExecProviderSwitchStory is the provider-switch story with two real
// agent processes of the same command: A → B → A on one thread, both
// calling tools with their own credentials throughout; releasing B kills
// B's process and revokes only B's credential; deleting the thread revokes
// both and both agents get 401; Close stops what is left.
func TestExecProviderSwitchStory(t *testing.T) {
	ctx := context.Background()
	e := newExecEnv(t, mcpruntime.Config{})
	dirA, dirB := t.TempDir(), t.TempDir()
	e.registerAgent("agent-a", dirA)
	e.registerAgent("agent-b", dirB)
	createThreads(t, e.rt, "T")

	// Open A: agent A runs with A's credential.
	a, tokA := openMinted(t, e.rt, "T", "agent-a")
	pidA := e.pid(a.ID)
	if _, content := configFile(t, dirA, a.ID); !strings.Contains(content, a.Authorization) {
		t.Fatalf("A's MCP config %s does not hold A's Authorization", content)
	}
	e.waitCalls("A opened", map[string]string{a.ID: "agent-a"})

	// Switch to B and open it: both agents run, each with its own
	// credential.
	_, err := e.rt.SwitchProvider(ctx, "T", "agent-b")
	noErr(t, err)
	b, tokB := openMinted(t, e.rt, "T", "agent-b")
	if b.CredentialID == a.CredentialID || b.ID == a.ID {
		t.Fatalf("B = %+v shares a session or credential with A = %+v", b, a)
	}
	pidB := e.pid(b.ID)
	if pidB == pidA {
		t.Fatalf("A and B run as the same process %d", pidA)
	}
	if _, content := configFile(t, dirB, b.ID); !strings.Contains(content, b.Authorization) || strings.Contains(content, a.Authorization) {
		t.Fatalf("B's MCP config %s: want B's Authorization and not A's", content)
	}
	e.waitCalls("B opened", map[string]string{a.ID: "agent-a", b.ID: "agent-b"})

	// Back to A: the same session and credential, no new process.
	_, err = e.rt.SwitchProvider(ctx, "T", "agent-a")
	noErr(t, err)
	a2, err := e.rt.OpenProviderSession(ctx, "T", "agent-a")
	noErr(t, err)
	if a2.ID != a.ID || a2.CredentialID != a.CredentialID || !a2.Reused || a2.Authorization != "" {
		t.Fatalf("re-open of A = %+v, want session %s / credential %s reused without a token", a2, a.ID, a.CredentialID)
	}
	if got := e.logs.records("provider process started", "instance", "agent-a"); len(got) != 1 {
		t.Fatalf("agent-a has started %d processes, want 1", len(got))
	}
	e.waitCalls("switched back to A", map[string]string{a.ID: "agent-a", b.ID: "agent-b"})
	assertLive(t, e.rt, "A", tokA)
	assertLive(t, e.rt, "B", tokB)

	// Release B: its process is stopped and reaped, its file removed, only
	// its credential revoked.
	noErr(t, e.rt.ReleaseProviderSession(ctx, b.ID))
	wantReaped(t, "B after release", pidB)
	wantEmptyDir(t, "B after release", dirB)
	assertDead(t, e.rt, "B after release", tokB)
	assertLive(t, e.rt, "A after releasing B", tokA)
	e.wantExited("B after release", b.ID, false)
	e.waitCalls("B released", map[string]string{a.ID: "agent-a"})

	// Re-open B: a fresh credential and a new process.
	b2, tokB2 := openMinted(t, e.rt, "T", "agent-b")
	if b2.ID == b.ID || b2.CredentialID == b.CredentialID {
		t.Fatalf("re-open of B = %+v, want a new session and credential (old %s / %s)", b2, b.ID, b.CredentialID)
	}
	pidB2 := e.pid(b2.ID)
	if pidB2 == pidB || pidB2 == pidA {
		t.Fatalf("B's new process has pid %d (A %d, old B %d)", pidB2, pidA, pidB)
	}
	e.waitCalls("B re-opened", map[string]string{a.ID: "agent-a", b2.ID: "agent-b"})

	// Delete the thread: both credentials are revoked, and both agents,
	// still running, are refused from then on.
	linesA, linesB2 := len(e.logs.lines(t, a.ID)), len(e.logs.lines(t, b2.ID))
	noErr(t, e.rt.DeleteThread(ctx, "T"))
	assertDead(t, e.rt, "A after delete", tokA)
	assertDead(t, e.rt, "B after delete", tokB2)
	e.waitRefused("thread deleted", a.ID, linesA)
	e.waitRefused("thread deleted", b2.ID, linesB2)

	// Close stops the remaining processes and leaves nothing behind.
	noErr(t, e.rt.Close())
	wantReaped(t, "A after Close", pidA)
	wantReaped(t, "B after Close", pidB2)
	wantEmptyDir(t, "A after Close", dirA)
	wantEmptyDir(t, "B after Close", dirB)
	e.wantExited("A after Close", a.ID, false)
	e.wantExited("B after Close", b2.ID, false)
}

// TestExecCrashReleasesAndRevokes: an agent killed from outside is noticed
// (SessionClosed, reason died), its session released and its credential
// revoked; a re-open mints a fresh credential for a new process.
func TestExecCrashReleasesAndRevokes(t *testing.T) {
	e := newExecEnv(t, mcpruntime.Config{})
	evs := subscribeProviderEvents(t, e.rt)
	dir := t.TempDir()
	e.registerAgent("agent", dir)
	createThreads(t, e.rt, "T")

	ps, tok := openMinted(t, e.rt, "T", "agent")
	pid := e.pid(ps.ID)
	e.waitCalls("opened", map[string]string{ps.ID: "agent"})

	noErr(t, syscall.Kill(pid, syscall.SIGKILL))
	ev := evs.waitClosed(t, ps.ID)
	if ev.Reason != provider.ReasonDied || !strings.Contains(ev.Cause, "killed") {
		t.Fatalf("SessionClosed = reason %q, cause %q; want %q with the kill signal", ev.Reason, ev.Cause, provider.ReasonDied)
	}
	if !slices.Equal(ev.Session.Credentials, []string{ps.CredentialID}) {
		t.Fatalf("closed session credentials %v, want [%s]", ev.Session.Credentials, ps.CredentialID)
	}
	// By the time the session is reported closed, the driver has reaped the
	// process and removed its file, and the store has no session.
	wantReaped(t, "killed agent", pid)
	wantEmptyDir(t, "killed agent", dir)
	if _, err := e.rt.ProviderSession(ps.ID); err == nil {
		t.Fatalf("session %s still in the store after it died", ps.ID)
	}
	e.wantExited("killed agent", ps.ID, true)
	waitDead(t, e.rt, "credential of the dead session", tok)
	assertReason(t, e.rt, "credential of the dead session", tok, mcpruntime.AuthRevoked)

	// A re-open mints a fresh credential and starts a new process.
	ps2, tok2 := openMinted(t, e.rt, "T", "agent")
	if ps2.ID == ps.ID || ps2.CredentialID == ps.CredentialID {
		t.Fatalf("re-open = %+v, want a new session and credential (old %s / %s)", ps2, ps.ID, ps.CredentialID)
	}
	pid2 := e.pid(ps2.ID)
	if pid2 == pid {
		t.Fatalf("re-open runs as the dead pid %d", pid)
	}
	e.waitCalls("re-opened", map[string]string{ps2.ID: "agent"})
	assertLive(t, e.rt, "new credential", tok2)
	assertDead(t, e.rt, "old credential after re-open", tok)

	noErr(t, e.rt.Close())
	wantReaped(t, "new agent after Close", pid2)
	wantEmptyDir(t, "after Close", dir)
}

// TestExecBadConfig: a configuration the driver refuses registers nothing;
// an open that cannot start its process fails clearly and leaves no
// credential, session, process or file behind.
func TestExecBadConfig(t *testing.T) {
	ctx := context.Background()
	sh, err := exec.LookPath("sh")
	noErr(t, err)
	dir := t.TempDir()
	notDir := filepath.Join(dir, "file")
	noErr(t, os.WriteFile(notDir, nil, 0o600))

	t.Run("refused at registration", func(t *testing.T) {
		rt := quietRuntime(t, mcpruntime.Config{})
		tests := []struct {
			name   string
			config string
		}{
			{name: "no config", config: ``},
			{name: "null", config: `null`},
			{name: "missing command", config: `{"configDir":"` + dir + `"}`},
			{name: "blank command", config: `{"command":"  "}`},
			{name: "nonexistent path", config: `{"command":"/nonexistent/mcpruntime-agent"}`},
			{name: "not in PATH", config: `{"command":"mcpruntime-no-such-agent"}`},
			{name: "reserved env MCPRUNTIME_", config: `{"command":"` + sh + `","env":{"MCPRUNTIME_AUTHORIZATION":"Bearer x"}}`},
			{name: "reserved env RUNTIME_", config: `{"command":"` + sh + `","env":{"RUNTIME_ADMIN_TOKEN":"x"}}`},
			{name: "reserved inherited env", config: `{"command":"` + sh + `","inheritEnv":["PATH","MCPRUNTIME_URL"]}`},
			{name: "configDir missing", config: `{"command":"` + sh + `","configDir":"` + filepath.Join(dir, "nope") + `"}`},
			{name: "configDir not a directory", config: `{"command":"` + sh + `","configDir":"` + notDir + `"}`},
			{name: "unknown field", config: `{"command":"` + sh + `","cmd":"x"}`},
			{name: "negative grace", config: `{"command":"` + sh + `","grace":"-1s"}`},
			{name: "grace not a duration", config: `{"command":"` + sh + `","grace":5}`},
		}
		for i, test := range tests {
			t.Run(test.name, func(t *testing.T) {
				id := fmt.Sprintf("bad-%d", i)
				err := rt.RegisterInstance(ctx, id, mcpruntime.InstanceSpec{Driver: "exec", Config: json.RawMessage(test.config)})
				if !errors.Is(err, mcpruntime.ErrInvalidDriverConfig) {
					t.Fatalf("RegisterInstance(%s) = %v, want ErrInvalidDriverConfig", test.config, err)
				}
				if _, err := rt.Instance(id); err == nil {
					t.Fatalf("instance %s recorded after a refused registration", id)
				}
				// Nothing holds the id: a good config registers under it.
				good := `{"command":"` + sh + `","configDir":"` + dir + `"}`
				noErr(t, rt.RegisterInstance(ctx, id, mcpruntime.InstanceSpec{Driver: "exec", Config: json.RawMessage(good)}))
			})
		}
	})

	t.Run("open fails", func(t *testing.T) {
		tests := []struct {
			name   string
			config func(dir string) map[string]any
			remove bool     // remove configDir after registration
			want   []string // in the error message
		}{
			{
				name:   "exits at once",
				config: func(dir string) map[string]any { return map[string]any{"command": "false"} },
				want:   []string{"exit status 1"},
			},
			{
				// An agent that ends at once without an error is as useless
				// as one that fails; the message still says how it ended.
				name:   "exits at once with status 0",
				config: func(dir string) map[string]any { return map[string]any{"command": "true"} },
				want:   []string{"exit status 0"},
			},
			{
				name: "exits at once with a message",
				config: func(dir string) map[string]any {
					return map[string]any{"command": sh, "args": []string{"-c", "echo boom >&2; exit 3"}}
				},
				want: []string{"exit status 3", "boom"},
			},
			{
				name: "configDir removed after registration",
				config: func(dir string) map[string]any {
					return map[string]any{"command": sh, "args": []string{"-c", "sleep 60"}}
				},
				remove: true,
				want:   []string{"MCP config file"},
			},
		}
		for _, test := range tests {
			t.Run(test.name, func(t *testing.T) {
				logs := &logCapture{}
				rt := newRuntime(t, mcpruntime.Config{Logger: slog.New(logs.handler())})
				dir := filepath.Join(t.TempDir(), "configs")
				noErr(t, os.Mkdir(dir, 0o700))
				cfg := test.config(dir)
				cfg["configDir"] = dir
				// An exit within startupWait fails the open; make the window
				// wide enough for any machine (a failing open ends at the
				// exit, not at the end of the window).
				cfg["startupWait"] = "10s"
				raw, err := json.Marshal(cfg)
				noErr(t, err)
				noErr(t, rt.RegisterInstance(ctx, "I", mcpruntime.InstanceSpec{Driver: "exec", Config: raw}))
				if test.remove {
					noErr(t, os.Remove(dir))
				}
				createThreads(t, rt, "T")

				_, err = rt.OpenProviderSession(ctx, "T", "I")
				if !errors.Is(err, mcpruntime.ErrProviderOpenFailed) {
					t.Fatalf("OpenProviderSession = %v, want ErrProviderOpenFailed", err)
				}
				for _, w := range test.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("OpenProviderSession error %q does not mention %q", err, w)
					}
				}
				if live := liveCredentials(t, rt, time.Now(), "T", "I"); len(live) != 0 {
					t.Errorf("live credentials of (T, I) after a failed open: %v", live)
				}
				if ss := rt.ProviderSessions("I"); len(ss) != 0 {
					t.Errorf("provider sessions of I after a failed open = %v; want none", ss)
				}
				started := logs.records("provider process started", "instance", "I")
				for _, r := range started {
					pid, err := strconv.Atoi(r.attrs["pid"])
					noErr(t, err)
					wantReaped(t, "process of the failed open", pid)
				}
				if test.remove {
					if len(started) != 0 {
						t.Errorf("a process was started without its MCP config file")
					}
					if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
						t.Errorf("configDir %s was re-created: %v", dir, err)
					}
				} else {
					if len(started) != 1 {
						t.Errorf("%d processes started, want 1", len(started))
					}
					wantEmptyDir(t, "after the failed open", dir)
				}
				// The failure is not sticky: the thread can still try again.
				if _, err := rt.OpenProviderSession(ctx, "T", "I"); !errors.Is(err, mcpruntime.ErrProviderOpenFailed) {
					t.Fatalf("second OpenProviderSession = %v, want ErrProviderOpenFailed", err)
				}
			})
		}
	})
}

// TestExecRotateRewritesConfig: a rotation rewrites the session's MCP
// config file with the new token, in place; the agent, refused with its
// old token, re-reads the file and carries on with the new credential.
func TestExecRotateRewritesConfig(t *testing.T) {
	ctx := context.Background()
	e := newExecEnv(t, mcpruntime.Config{})
	dir := t.TempDir()
	e.registerAgent("agent", dir)
	createThreads(t, e.rt, "T")

	ps, tok := openMinted(t, e.rt, "T", "agent")
	pid := e.pid(ps.ID)
	path, content := configFile(t, dir, ps.ID)
	if !strings.Contains(content, ps.Authorization) {
		t.Fatalf("MCP config %s does not hold the session's Authorization", content)
	}
	e.waitCalls("opened", map[string]string{ps.ID: "agent"})

	before := len(e.logs.lines(t, ps.ID))
	cred, err := e.rt.Rotate(ctx, "T", "agent")
	noErr(t, err)
	if cred.ID == ps.CredentialID || cred.Authorization == "" {
		t.Fatalf("Rotate = %+v, want a new credential", cred)
	}
	assertDead(t, e.rt, "old credential", tok)
	assertLive(t, e.rt, "new credential", bearer(t, cred.Authorization))
	// When Rotate returns the file already holds the new token: same path,
	// still 0600, nothing else left in the directory.
	path2, content2 := configFile(t, dir, ps.ID)
	if path2 != path || !strings.Contains(content2, cred.Authorization) || strings.Contains(content2, ps.Authorization) {
		t.Fatalf("MCP config after Rotate: %s = %s; want %s with the new Authorization only", path2, content2, path)
	}

	// The agent is refused at least once, then succeeds again: with the new
	// credential, the only live one of the pair.
	waitUntil(t, "the agent recovers after a 401", func() bool {
		lines := e.logs.lines(t, ps.ID)
		refused := slices.IndexFunc(lines[before:], func(l agentLine) bool { return l.Status == 401 })
		return refused >= 0 && slices.ContainsFunc(lines[before+refused:], func(l agentLine) bool { return l.OK })
	})
	e.waitCalls("after Rotate", map[string]string{ps.ID: "agent"})
	if live := liveCredentials(t, e.rt, time.Now(), "T", "agent"); !slices.Equal(live, []string{cred.ID}) {
		t.Fatalf("live credentials of the pair %v, want [%s]", live, cred.ID)
	}
	if pids := e.logs.pids(t, ps.ID); !slices.Equal(pids, []int{pid}) {
		t.Fatalf("processes of the session %v, want only %d", pids, pid)
	}

	noErr(t, e.rt.Close())
	wantReaped(t, "agent after Close", pid)
	wantEmptyDir(t, "after Close", dir)
}

// TestExecCloseKillsGroup: a process that ignores SIGTERM is killed after
// the grace period, and so is every process of its group: no child
// outlives a released session.
func TestExecCloseKillsGroup(t *testing.T) {
	ctx := context.Background()
	logs := &logCapture{}
	rt := newRuntime(t, mcpruntime.Config{Logger: slog.New(logs.handler())})
	sh, err := exec.LookPath("sh")
	noErr(t, err)
	dir := t.TempDir()
	// The ignored SIGTERM is inherited by the background sleep too.
	raw, err := json.Marshal(map[string]any{
		"command":   sh,
		"args":      []string{"-c", `trap "" TERM; sleep 60 & echo "child $!"; wait`},
		"configDir": dir,
		"grace":     "200ms",
	})
	noErr(t, err)
	noErr(t, rt.RegisterInstance(ctx, "I", mcpruntime.InstanceSpec{Driver: "exec", Config: raw}))
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "I")

	var child int
	waitUntil(t, "the child's pid on stdout", func() bool {
		for _, r := range logs.records("provider output", "session", ps.ID) {
			if c, ok := strings.CutPrefix(r.attrs["line"], "child "); ok {
				child, err = strconv.Atoi(c)
				return err == nil
			}
		}
		return false
	})
	started := logs.records("provider process started", "session", ps.ID)
	if len(started) != 1 {
		t.Fatalf("%d processes started, want 1", len(started))
	}
	leader, err := strconv.Atoi(started[0].attrs["pid"])
	noErr(t, err)

	noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
	wantReaped(t, "the leader that ignored SIGTERM", leader)
	if len(logs.records("provider process did not stop on SIGTERM; killing", "session", ps.ID)) != 1 {
		t.Errorf("no record of the SIGKILL after the grace period")
	}
	// The child is not the runtime's to reap (it was re-parented when the
	// leader died), but it was sent SIGKILL with the group: it must be dead
	// (gone, or a zombie) once the kernel delivered that, within moments.
	var stat []byte
	deadline := time.Now().Add(hangAfter)
	for {
		var err error
		stat, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			break // gone
		}
		if i := strings.LastIndexByte(string(stat), ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d of the released session still runs %v after release: %s", child, hangAfter, stat)
		}
		time.Sleep(10 * time.Millisecond)
	}
	assertDead(t, rt, "credential of the released session", tok)
	wantEmptyDir(t, "after release", dir)
}

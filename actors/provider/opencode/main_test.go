package opencode_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/opencode"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// session's loops, stream and connections must be gone once it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of the tests: OpenCode starts in a few seconds
// and a scripted turn takes a few more, on a loaded 2-core machine too.
const wait = 45 * time.Second

// apiKeyVar is the runtime's variable the tests hand the model key in.
const apiKeyVar = "OPENCODE_TEST_MODEL_KEY"

// record is one captured log record, its attributes flattened to strings.
type record struct {
	Msg   string
	Attrs map[string]string
}

// capture is a slog.Handler that keeps every record, and every record's
// text for the leak checks.
type capture struct {
	mu    *sync.Mutex
	recs  *[]record
	text  *bytes.Buffer
	attrs []slog.Attr
}

func newCapture() *capture {
	return &capture{mu: new(sync.Mutex), recs: new([]record), text: new(bytes.Buffer)}
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	rec := record{Msg: r.Message, Attrs: map[string]string{}}
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
	fmt.Fprintf(c.text, "%s %v\n", rec.Msg, rec.Attrs)
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	return &capture{mu: c.mu, recs: c.recs, text: c.text, attrs: append(slices.Clip(c.attrs), as...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c }

func (c *capture) find(msg, key, value string) []record {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []record
	for _, r := range *c.recs {
		if r.Msg == msg && r.Attrs[key] == value {
			out = append(out, r)
		}
	}
	return out
}

// bytes is every record logged so far, as text.
func (c *capture) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.text.Bytes())
}

// recorder wraps the opencode driver so that a test reaches the sessions
// the runtime opened (to call their Turner directly) and what they
// reported, while the runtime still gets every report.
type recorder struct {
	mu       sync.Mutex // guards sessions
	sessions map[string]*recorded
}

type recorded struct {
	driver.Session
	ev *providertest.Events
}

func (r *recorder) factory(inner driver.Factory) driver.Factory {
	return func(instance string, raw json.RawMessage) (driver.Driver, error) {
		d, err := inner(instance, raw)
		if err != nil {
			return nil, err
		}
		return &recDriver{Driver: d, r: r}, nil
	}
}

type recDriver struct {
	driver.Driver
	r *recorder
}

func (d *recDriver) CloseBudget() time.Duration {
	return d.Driver.(driver.CloseBudgeter).CloseBudget()
}

func (d *recDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	ev := &providertest.Events{}
	req.Events = tee{ev, req.Events}
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	d.r.mu.Lock()
	defer d.r.mu.Unlock()
	if d.r.sessions == nil {
		d.r.sessions = map[string]*recorded{}
	}
	d.r.sessions[req.SessionID] = &recorded{Session: s, ev: ev}
	return s, nil
}

func (r *recorder) session(t *testing.T, id string) *recorded {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.sessions[id]
	if s == nil {
		t.Fatalf("no session %s was opened", id)
	}
	return s
}

// tee reports to both.
type tee [2]driver.Events

func (e tee) Died(err error)              { e[0].Died(err); e[1].Died(err) }
func (e tee) Status(s driver.Status)      { e[0].Status(s); e[1].Status(s) }
func (e tee) Event(ev driver.Event)       { e[0].Event(ev); e[1].Event(ev) }
func (e tee) TurnEnded(te driver.TurnEnd) { e[0].TurnEnded(te); e[1].TurnEnded(te) }

// env is a real runtime serving MCP on loopback, with the opencode
// driver registered (recorded), and the scripted model.
type env struct {
	t     *testing.T
	rt    *mcpruntime.Runtime
	log   *capture
	model *agenttest.Model
	rec   *recorder
	key   string // the model API key, in apiKeyVar
	url   string // the runtime's MCP endpoint
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, log: newCapture(), model: agenttest.NewModel(t), rec: &recorder{}}
	e.key = "model-key-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	t.Setenv(apiKeyVar, e.key)
	ts := httptest.NewUnstartedServer(nil)
	t.Cleanup(ts.Close) // after the runtime's Close: no agent outlives its endpoint
	rt, err := mcpruntime.New(mcpruntime.Config{
		Endpoint:    "http://" + ts.Listener.Addr().String() + "/mcp",
		Logger:      slog.New(e.log),
		OpenTimeout: wait,
		Drivers:     map[string]driver.Factory{opencode.Kind: e.rec.factory(opencode.Factory(slog.New(e.log)))},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("runtime Close: %v", err)
		}
	})
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts.Config.Handler = h
	ts.Start()
	e.rt, e.url = rt, ts.URL+"/mcp"
	return e
}

// instance is a registered opencode instance and its directories.
type instance struct {
	id        string
	configDir string // where its sessions' private directories go
	workDir   string // OpenCode's project
}

// config is the instance configuration the tests use: the real CLI, the
// scripted model over Chat Completions, offline npm (OpenCode installs
// its plugin package into its config directory at start).
func (e *env) config(in instance) json.RawMessage {
	raw, err := json.Marshal(map[string]any{
		"command":   agenttest.Binary(e.t, "opencode"),
		"dir":       in.workDir,
		"configDir": in.configDir,
		"env":       map[string]string{"npm_config_offline": "true"},
		"grace":     "5s",
		"baseURL":   e.model.URL + "/v1",
		"model":     "scripted",
		"apiKeyEnv": apiKeyVar,
	})
	if err != nil {
		e.t.Fatal(err)
	}
	return raw
}

func (e *env) register(id string) instance {
	e.t.Helper()
	in := instance{id: id, configDir: e.t.TempDir(), workDir: e.t.TempDir()}
	if err := e.rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{Driver: opencode.Kind, Config: e.config(in)}); err != nil {
		e.t.Fatalf("RegisterInstance(%s): %v", id, err)
	}
	return in
}

// opened is a provider session the runtime opened on a thread.
type opened struct {
	mcpruntime.ProviderSession
	thread   string
	instance string
	*recorded
	pid  int
	took time.Duration // OpenProviderSession's time: OpenCode up and connected
}

// open creates thread (if new) and opens inst's session on it.
func (e *env) open(thread string, in instance) *opened {
	e.t.Helper()
	ctx := context.Background()
	if _, err := e.rt.Thread(ctx, thread); err != nil {
		if _, err := e.rt.CreateThread(ctx, thread, mcpruntime.ThreadOptions{Instance: in.id}); err != nil {
			e.t.Fatalf("CreateThread(%s): %v", thread, err)
		}
	}
	start := time.Now()
	ps, err := e.rt.OpenProviderSession(ctx, thread, in.id)
	if err != nil {
		e.t.Fatalf("OpenProviderSession(%s, %s): %v", thread, in.id, err)
	}
	took := time.Since(start)
	if ps.Authorization == "" {
		e.t.Fatalf("OpenProviderSession(%s, %s) minted no token: %+v", thread, in.id, ps)
	}
	recs := e.log.find("provider process started", "session", ps.ID)
	if len(recs) != 1 {
		e.t.Fatalf("%d process start records for %s, want 1", len(recs), ps.ID)
	}
	pid, err := strconv.Atoi(recs[0].Attrs["pid"])
	if err != nil {
		e.t.Fatal(err)
	}
	return &opened{ProviderSession: ps, thread: thread, instance: in.id, recorded: e.rec.session(e.t, ps.ID), pid: pid, took: took}
}

// turn runs input as the agent's turn of a new run (the runtime's
// StartTurn), waits for the turn's end and for the runtime to end the run
// with it, and returns the run id and the end.
func (e *env) turn(s *opened, input string) (string, driver.TurnEnd) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	run, err := e.rt.StartTurn(ctx, s.thread, s.instance, input)
	if err != nil {
		e.t.Fatalf("StartTurn(%s, %s, %q): %v", s.thread, s.instance, input, err)
	}
	end := s.waitEnd(e.t, run)
	e.waitNoRun(s.thread)
	return run, end
}

// waitEnd waits for the end of turn.
func (s *opened) waitEnd(t *testing.T, turn string) driver.TurnEnd {
	t.Helper()
	end, ok := s.ev.TurnEnd(turn, wait)
	if !ok {
		t.Fatalf("turn %s did not end; events %+v", turn, s.ev.Events())
	}
	return end
}

// direct sends input to s's agent as turn id, outside the runtime (no
// run), and waits for the turn's end.
func (s *opened) direct(t *testing.T, id, input string) driver.TurnEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Session.(driver.Turner).StartTurn(ctx, driver.Turn{Thread: s.thread, ID: id, Input: input}); err != nil {
		t.Fatalf("StartTurn(%s, %q): %v", id, input, err)
	}
	return s.waitEnd(t, id)
}

// waitNoRun waits until thread has no active run.
func (e *env) waitNoRun(thread string) {
	e.t.Helper()
	end := time.Now().Add(wait)
	for {
		th, err := e.rt.Thread(context.Background(), thread)
		if err != nil {
			e.t.Fatal(err)
		}
		if th.Run == nil {
			return
		}
		if time.Now().After(end) {
			e.t.Fatalf("thread %s still has run %+v", thread, th.Run)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// chatBodies are the bodies of the model's Chat Completions requests.
func (e *env) chatBodies() []string {
	var out []string
	for _, r := range e.model.Requests() {
		if r.Format == agenttest.FormatChat {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// events returns the events s reported during turn.
func (s *opened) events(turn string) []driver.Event {
	var out []driver.Event
	for _, e := range s.ev.Events() {
		if e.Turn == turn {
			out = append(out, e)
		}
	}
	return out
}

// waitStatus waits until the last status s reported is state.
func (s *opened) waitStatus(t *testing.T, state string) driver.Status {
	t.Helper()
	var last driver.Status
	if !s.ev.Wait(wait, func(ev *providertest.Events) bool {
		st := ev.Statuses()
		if len(st) == 0 {
			return false
		}
		last = st[len(st)-1]
		return last.State == state
	}) {
		t.Fatalf("last status %+v, want %s; all %+v", last, state, s.ev.Statuses())
	}
	return last
}

// privateDir returns the one private directory under configDir.
func privateDir(t *testing.T, configDir string) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(configDir, "opencode-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("private directories in %s: %v (%v), want one", configDir, dirs, err)
	}
	return dirs[0]
}

// wantEmpty requires that dir holds nothing.
func wantEmpty(t *testing.T, what, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s: %s holds %v", what, dir, names)
	}
}

// group returns the live processes of process group pgid.
func group(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(data, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 3 || f[0] == "Z" || f[0] == "X" {
			continue
		}
		if g, _ := strconv.Atoi(f[2]); g == pgid {
			out = append(out, pid)
		}
	}
	return out
}

// rssKiB is the resident memory of the processes of group pgid.
func rssKiB(pgid int) int {
	total := 0
	for _, pid := range group(pgid) {
		data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				total += n
			}
		}
	}
	return total
}

// wantGone waits until no process of group pgid is left and pid is
// reaped.
func wantGone(t *testing.T, what string, pgid int) {
	t.Helper()
	end := time.Now().Add(wait)
	for len(group(pgid)) > 0 {
		if time.Now().After(end) {
			t.Fatalf("%s: processes %v of group %d still run", what, group(pgid), pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(pgid, 0); err == nil {
		t.Fatalf("%s: process %d still exists", what, pgid)
	}
}

// procEnviron is the environment pid was started with.
func procEnviron(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environment of %d: %v", pid, err)
	}
	return string(data)
}

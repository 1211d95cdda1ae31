package claude_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/claude"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// deadline bounds every wait; a correct driver is never near it.
const deadline = 45 * time.Second

// apiKeyVar is the runtime's variable the instances take the model key
// from (Config.APIKeyEnv), and apiKey its value: a secret like the token.
const (
	apiKeyVar = "CLAUDE_TEST_MODEL_KEY"
	apiKey    = "model-key-8c1a2b"
)

// env is a runtime on loopback with claude instances whose model is the
// scripted one, its log captured.
type env struct {
	t        *testing.T
	rt       *mcpruntime.Runtime
	model    *agenttest.Model
	logs     *capture
	rec      *recorder
	endpoint string

	authMu sync.Mutex          // guards auths and log
	auths  map[string]int      // Authorization header → requests the endpoint got with it
	log    map[string][]string // Authorization header → each request's HTTP method, MCP method and status ("?" until answered), in order
}

// requestLog is what the endpoint got with authorization, in order.
func (e *env) requestLog(authorization string) []string {
	e.authMu.Lock()
	defer e.authMu.Unlock()
	return slices.Clone(e.log[authorization])
}

// statusWriter keeps a response's status.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestsWith is how many requests the endpoint got with authorization.
func (e *env) requestsWith(authorization string) int {
	e.authMu.Lock()
	defer e.authMu.Unlock()
	return e.auths[authorization]
}

func newEnv(t *testing.T) *env {
	t.Helper()
	t.Setenv(apiKeyVar, apiKey)
	// The test's first TempDir registers the removal of all of them: first,
	// so that it runs last, once rt.Close stopped every Claude Code (one
	// still writing into its HOME would make the removal fail).
	_ = t.TempDir()
	e := &env{t: t, model: agenttest.NewModel(t), logs: &capture{}}
	logger := slog.New(e.logs)
	e.rec = &recorder{inner: claude.Factory(logger), opened: map[string]*opened{}}
	ts := httptest.NewUnstartedServer(nil)
	t.Cleanup(ts.Close)
	e.endpoint = "http://" + ts.Listener.Addr().String() + "/mcp"
	rt, err := mcpruntime.New(mcpruntime.Config{
		Endpoint: e.endpoint, Logger: logger,
		Drivers: map[string]driver.Factory{claude.Kind: e.rec.factory},
	})
	if err != nil {
		t.Fatalf("mcpruntime.New: %v", err)
	}
	t.Cleanup(func() { rt.Close() }) // before ts.Close: agents end before their endpoint
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	e.auths, e.log = map[string]int{}, map[string][]string{}
	ts.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		// Logged as the request comes (its status once it is answered), so
		// the log's order is the requests'.
		e.authMu.Lock()
		e.auths[auth]++
		i := len(e.log[auth])
		e.log[auth] = append(e.log[auth], r.Method+" "+m.Method+" ?")
		e.authMu.Unlock()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		e.authMu.Lock()
		e.log[auth][i] = fmt.Sprintf("%s %s %d", r.Method, m.Method, sw.status)
		e.authMu.Unlock()
	})
	ts.Start()
	e.rt = rt
	return e
}

// config is a claude instance's configuration against the scripted model,
// its sessions' directories under configDir.
func (e *env) config(configDir string, extra map[string]any) json.RawMessage {
	c := map[string]any{
		"command":    agenttest.Binary(e.t, "claude"),
		"inheritEnv": []string{"PATH"},
		"configDir":  configDir,
		"baseURL":    e.model.URL,
		"apiKeyEnv":  apiKeyVar,
		"grace":      "3s",
	}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		e.t.Fatal(err)
	}
	return raw
}

// register registers a claude instance and creates a thread on it.
func (e *env) register(instance, thread, configDir string, extra map[string]any) {
	e.t.Helper()
	ctx := context.Background()
	if err := e.rt.RegisterInstance(ctx, instance, mcpruntime.InstanceSpec{Driver: claude.Kind, Config: e.config(configDir, extra)}); err != nil {
		e.t.Fatalf("RegisterInstance(%s): %v", instance, err)
	}
	if _, err := e.rt.CreateThread(ctx, thread, mcpruntime.ThreadOptions{Instance: instance}); err != nil {
		e.t.Fatalf("CreateThread(%s): %v", thread, err)
	}
}

// open opens the provider session of (thread, instance) and returns it with
// what the driver recorded of it.
func (e *env) open(thread, instance string) (mcpruntime.ProviderSession, *opened) {
	e.t.Helper()
	ps, err := e.rt.OpenProviderSession(context.Background(), thread, instance)
	if err != nil {
		e.t.Fatalf("OpenProviderSession(%s, %s): %v", thread, instance, err)
	}
	if ps.Authorization == "" {
		e.t.Fatalf("OpenProviderSession(%s, %s) = %+v, want a new credential", thread, instance, ps)
	}
	return ps, e.rec.get(e.t, ps.ID)
}

// pid is the process (group) id of the Claude Code processes started for a session,
// in order.
func (e *env) pids(session string) []int {
	e.t.Helper()
	var out []int
	for _, r := range e.logs.find("claude started", "session", session) {
		pid, err := strconv.Atoi(r.attrs["pid"])
		if err != nil {
			e.t.Fatalf("pid %q: %v", r.attrs["pid"], err)
		}
		out = append(out, pid)
	}
	return out
}

// lastPid is the process group of a session's Claude Code.
func (e *env) lastPid(session string) int {
	e.t.Helper()
	pids := e.pids(session)
	if len(pids) == 0 {
		e.t.Fatalf("session %s started no claude", session)
	}
	return pids[len(pids)-1]
}

// messages returns the thread's messages.
func (e *env) messages(thread string) []mcpruntime.Message {
	e.t.Helper()
	th, err := e.rt.Thread(context.Background(), thread)
	if err != nil {
		e.t.Fatalf("Thread(%s): %v", thread, err)
	}
	return th.Messages
}

// credential returns the thread's credential id.
func (e *env) credential(thread, id string) mcpruntime.CredentialInfo {
	e.t.Helper()
	for _, c := range e.rt.Credentials(thread) {
		if c.ID == id {
			return c
		}
	}
	e.t.Fatalf("thread %s has no credential %s", thread, id)
	return mcpruntime.CredentialInfo{}
}

// turn starts a turn on the recorded session and waits for its end.
func (e *env) turn(o *opened, thread, run, input string) (driver.TurnEnd, time.Duration) {
	e.t.Helper()
	start := time.Now()
	tr, ok := o.session.(driver.Turner)
	if !ok {
		e.t.Fatalf("the claude session %T is no driver.Turner", o.session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	before := len(turnEnds(o.events, run)) // a run may span several turns
	if err := tr.StartTurn(ctx, driver.Turn{Thread: thread, ID: run, Input: input}); err != nil {
		e.t.Fatalf("StartTurn(%q): %v", input, err)
	}
	if !o.events.Wait(deadline, func(ev *providertest.Events) bool { return len(turnEnds(ev, run)) > before }) {
		e.t.Fatalf("turn %s (%q) did not end; events %+v", run, input, o.events.Events())
	}
	return turnEnds(o.events, run)[before], time.Since(start)
}

// turnEnds returns the ends reported for turn id, in order.
func turnEnds(ev *providertest.Events, turn string) []driver.TurnEnd {
	var out []driver.TurnEnd
	for _, t := range ev.TurnsEnded() {
		if t.Turn == turn {
			out = append(out, t)
		}
	}
	return out
}

// runTurn starts a run whose input is the agent's turn through the
// runtime (Runtime.StartTurn) and waits for the turn's end.
func (e *env) runTurn(o *opened, thread, instance, input string) (string, driver.TurnEnd, time.Duration) {
	e.t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	run, err := e.rt.StartTurn(ctx, thread, instance, input)
	if err != nil {
		e.t.Fatalf("StartTurn(%s, %s, %q): %v", thread, instance, input, err)
	}
	end, ok := o.events.TurnEnd(run, deadline)
	if !ok {
		e.t.Fatalf("turn %s (%q) did not end; events %+v", run, input, o.events.Events())
	}
	return run, end, time.Since(start)
}

// waitNoRun waits until the thread has no active run.
func (e *env) waitNoRun(thread string) {
	e.t.Helper()
	end := time.Now().Add(deadline)
	for {
		th, err := e.rt.Thread(context.Background(), thread)
		if err != nil {
			e.t.Fatal(err)
		}
		if th.Run == nil {
			return
		}
		if time.Now().After(end) {
			e.t.Fatalf("thread %s still runs %+v", thread, th.Run)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder wraps the claude driver factory: it keeps each session the
// driver opens and records its events (besides handing them on to the
// runtime), so a test can drive the session's turns directly.
type recorder struct {
	inner driver.Factory

	mu     sync.Mutex // guards opened
	opened map[string]*opened
}

// opened is one session the driver was asked to open.
type opened struct {
	session driver.Session // nil if the open failed
	events  *providertest.Events
}

func (r *recorder) factory(instance string, raw json.RawMessage) (driver.Driver, error) {
	d, err := r.inner(instance, raw)
	if err != nil {
		return nil, err
	}
	return &recDriver{Driver: d, r: r}, nil
}

func (r *recorder) get(t *testing.T, session string) *opened {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.opened[session]
	if o == nil || o.session == nil {
		t.Fatalf("the driver opened no session %s", session)
	}
	return o
}

type recDriver struct {
	driver.Driver
	r *recorder
}

func (d *recDriver) CloseBudget() time.Duration {
	return d.Driver.(driver.CloseBudgeter).CloseBudget()
}

func (d *recDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	o := &opened{events: &providertest.Events{}}
	d.r.mu.Lock()
	d.r.opened[req.SessionID] = o
	d.r.mu.Unlock()
	req.Events = tee{req.Events, o.events}
	s, err := d.Driver.Open(ctx, req)
	if err == nil {
		d.r.mu.Lock()
		o.session = s
		d.r.mu.Unlock()
	}
	return s, err
}

// tee hands every report to both.
type tee struct{ a, b driver.Events }

func (t tee) Died(err error)              { t.a.Died(err); t.b.Died(err) }
func (t tee) Status(s driver.Status)      { t.a.Status(s); t.b.Status(s) }
func (t tee) Event(e driver.Event)        { t.a.Event(e); t.b.Event(e) }
func (t tee) TurnEnded(te driver.TurnEnd) { t.a.TurnEnded(te); t.b.TurnEnded(te) }

// hasStatus reports whether a Status of state was reported.
func hasStatus(ev *providertest.Events, state string) bool {
	for _, s := range ev.Statuses() {
		if s.State == state {
			return true
		}
	}
	return false
}

// kinds returns the kinds of the events of turn, in order.
func kinds(ev *providertest.Events, turn string) []string {
	var out []string
	for _, e := range ev.Events() {
		if e.Turn == turn {
			out = append(out, e.Kind)
		}
	}
	return out
}

// record is one captured log record, its attributes (those of
// Logger.With included) flattened to strings.
type record struct {
	msg   string
	attrs map[string]string
}

// capture is a slog.Handler that keeps every record. Safe for concurrent
// use; the zero value is ready.
type capture struct {
	mu    *sync.Mutex
	recs  *[]record
	attrs []slog.Attr
	once  sync.Once
}

func (c *capture) init() {
	c.once.Do(func() {
		if c.mu == nil {
			c.mu, c.recs = new(sync.Mutex), new([]record)
		}
	})
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }

func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.init()
	rec := record{msg: r.Message, attrs: map[string]string{}}
	for _, a := range c.attrs {
		rec.attrs[a.Key] = a.Value.Resolve().String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.Resolve().String()
		return true
	})
	c.mu.Lock()
	defer c.mu.Unlock()
	*c.recs = append(*c.recs, rec)
	return nil
}

func (c *capture) WithAttrs(as []slog.Attr) slog.Handler {
	c.init()
	return &capture{mu: c.mu, recs: c.recs, attrs: append(slices.Clip(c.attrs), as...)}
}

func (c *capture) WithGroup(string) slog.Handler { return c } // no groups are used

func (c *capture) records() []record {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(*c.recs)
}

// find returns the records with message msg whose attribute key is value.
func (c *capture) find(msg, key, value string) []record {
	var out []record
	for _, r := range c.records() {
		if r.msg == msg && r.attrs[key] == value {
			out = append(out, r)
		}
	}
	return out
}

// text is every record, a line each, for agenttest.Leaks.
func (c *capture) text() []byte {
	var b bytes.Buffer
	for _, r := range c.records() {
		b.WriteString(r.msg)
		for k, v := range r.attrs {
			fmt.Fprintf(&b, " %s=%q", k, v)
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// group returns the pids of the processes in process group pgid.
func group(pgid int) []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, ent := range ents {
		pid, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", ent.Name(), "stat"))
		if err != nil {
			continue
		}
		// "pid (comm) state ppid pgrp …": the fields after the last ')'.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(stat[i+1:]))
		if len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			out = append(out, pid)
		}
	}
	return out
}

// rssKiB is the resident memory of the processes, summed, in KiB.
func rssKiB(pids []int) int {
	total := 0
	for _, pid := range pids {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(status), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
				total += n
			}
		}
	}
	return total
}

// environ is the environment of a process, NUL-separated.
func environ(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
	if err != nil {
		t.Fatalf("environ of %d: %v", pid, err)
	}
	return string(b)
}

// waitGone waits until no process is left in group pgid.
func waitGone(t *testing.T, what string, pgid int) {
	t.Helper()
	end := time.Now().Add(deadline)
	for {
		left := group(pgid)
		if len(left) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("%s: processes %v of group %d still exist", what, left, pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// token is the bare token of an Authorization value.
func token(authorization string) string { return strings.TrimPrefix(authorization, "Bearer ") }

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return n
}

// claudeBinary is the pinned Claude Code CLI.
func claudeBinary(t *testing.T) string { return agenttest.Binary(t, "claude") }

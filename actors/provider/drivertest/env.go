package drivertest

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// Options is what a driver's tests set of their Env.
type Options struct {
	// Kind is the driver's kind, the key of Factory in the runtime's
	// drivers.
	Kind string
	// Factory makes the driver's factory with the runtime's logger.
	Factory func(*slog.Logger) driver.Factory
	// Config is an instance's configuration (before Env.Config adds the
	// test's extra keys) for its sessions' directories under configDir.
	// Nil: Env.Config and Env.Register fail the test.
	Config func(e *Env, configDir string) map[string]any
	// Started is the message the driver logs when it started an agent
	// process, with attributes session and pid (Env.Pids).
	Started string
	// Deadline bounds every wait.
	Deadline time.Duration
	// APIKeyVar is the runtime's variable the instances take the model key
	// from, set to APIKey for the test. Empty: none is set.
	APIKeyVar, APIKey string
	// OpenTimeout is the runtime's Config.OpenTimeout; zero is its default.
	OpenTimeout time.Duration
	// Handler wraps the runtime's MCP handler; nil serves it as it is.
	Handler func(http.Handler) http.Handler
	// StrictClose fails the test if the runtime's Close returns an error;
	// false ignores it.
	StrictClose bool
}

// Env is a runtime on loopback with one driver, whose model is the scripted
// one, its log captured.
type Env struct {
	T        *testing.T
	RT       *mcpruntime.Runtime
	Model    *agenttest.Model
	Logs     *Capture
	Endpoint string // the runtime's MCP endpoint

	opts Options
	rec  *recorder
}

// New starts an Env for t; its Cleanup closes the runtime, then the server.
func New(t *testing.T, opts Options) *Env {
	t.Helper()
	if opts.APIKeyVar != "" {
		t.Setenv(opts.APIKeyVar, opts.APIKey)
	}
	// The test's first TempDir registers the removal of all of them: first,
	// so that it runs last, once rt.Close stopped every agent (one still
	// writing into its directories would make the removal fail).
	_ = t.TempDir()
	e := &Env{T: t, Model: agenttest.NewModel(t), Logs: &Capture{}, opts: opts}
	logger := slog.New(e.Logs)
	e.rec = &recorder{inner: opts.Factory(logger), opened: map[string]*Opened{}}
	ts := httptest.NewUnstartedServer(nil)
	t.Cleanup(ts.Close)
	e.Endpoint = "http://" + ts.Listener.Addr().String() + "/mcp"
	rt, err := mcpruntime.New(mcpruntime.Config{
		Endpoint: e.Endpoint, Logger: logger, OpenTimeout: opts.OpenTimeout,
		Drivers: map[string]driver.Factory{opts.Kind: e.rec.factory},
	})
	if err != nil {
		t.Fatalf("mcpruntime.New: %v", err)
	}
	t.Cleanup(func() { // before ts.Close: agents end before their endpoint
		if err := rt.Close(); err != nil && opts.StrictClose {
			t.Errorf("runtime Close: %v", err)
		}
	})
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	var handler http.Handler = h
	if opts.Handler != nil {
		handler = opts.Handler(h)
	}
	ts.Config.Handler = handler
	ts.Start()
	e.RT = rt
	return e
}

// Config is an instance's configuration (Options.Config) with extra's keys
// set, its sessions' directories under configDir.
func (e *Env) Config(configDir string, extra map[string]any) json.RawMessage {
	e.T.Helper()
	if e.opts.Config == nil {
		e.T.Fatalf("the %s Env has no Options.Config", e.opts.Kind)
	}
	c := e.opts.Config(e, configDir)
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		e.T.Fatal(err)
	}
	return raw
}

// Register registers an instance of the driver and creates a thread on it.
func (e *Env) Register(instance, thread, configDir string, extra map[string]any) {
	e.T.Helper()
	ctx := context.Background()
	if err := e.RT.RegisterInstance(ctx, instance, mcpruntime.InstanceSpec{Driver: e.opts.Kind, Config: e.Config(configDir, extra)}); err != nil {
		e.T.Fatalf("RegisterInstance(%s): %v", instance, err)
	}
	if _, err := e.RT.CreateThread(ctx, thread, mcpruntime.ThreadOptions{Instance: instance}); err != nil {
		e.T.Fatalf("CreateThread(%s): %v", thread, err)
	}
}

// Open opens the provider session of (thread, instance) and returns it with
// what the driver recorded of it; a reused credential fails the test.
func (e *Env) Open(thread, instance string) (mcpruntime.ProviderSession, *Opened) {
	e.T.Helper()
	ps, err := e.RT.OpenProviderSession(context.Background(), thread, instance)
	if err != nil {
		e.T.Fatalf("OpenProviderSession(%s, %s): %v", thread, instance, err)
	}
	if ps.Authorization == "" {
		e.T.Fatalf("OpenProviderSession(%s, %s) = %+v, want a new credential", thread, instance, ps)
	}
	return ps, e.Session(ps.ID)
}

// Session is what the driver recorded of the session it opened as id; an
// open that was not asked for or failed fails the test.
func (e *Env) Session(id string) *Opened {
	e.T.Helper()
	return e.rec.get(e.T, id)
}

// Pids are the process (group) ids of the agents started for a session, in
// order: the pid attributes of its Options.Started records.
func (e *Env) Pids(session string) []int {
	e.T.Helper()
	var out []int
	for _, r := range e.Logs.Find(e.opts.Started, "session", session) {
		pid, err := strconv.Atoi(r.Attrs["pid"])
		if err != nil {
			e.T.Fatalf("pid %q: %v", r.Attrs["pid"], err)
		}
		out = append(out, pid)
	}
	return out
}

// LastPid is the process group of a session's current agent.
func (e *Env) LastPid(session string) int {
	e.T.Helper()
	pids := e.Pids(session)
	if len(pids) == 0 {
		e.T.Fatalf("session %s started no %s agent", session, e.opts.Kind)
	}
	return pids[len(pids)-1]
}

// Messages returns the thread's messages.
func (e *Env) Messages(thread string) []mcpruntime.Message {
	e.T.Helper()
	th, err := e.RT.Thread(context.Background(), thread)
	if err != nil {
		e.T.Fatalf("Thread(%s): %v", thread, err)
	}
	return th.Messages
}

// Credential returns the thread's credential id.
func (e *Env) Credential(thread, id string) mcpruntime.CredentialInfo {
	e.T.Helper()
	for _, c := range e.RT.Credentials(thread) {
		if c.ID == id {
			return c
		}
	}
	e.T.Fatalf("thread %s has no credential %s", thread, id)
	return mcpruntime.CredentialInfo{}
}

// Turn starts a turn on the recorded session, outside the runtime (no run),
// and waits for its end.
func (e *Env) Turn(o *Opened, thread, run, input string) (driver.TurnEnd, time.Duration) {
	e.T.Helper()
	start := time.Now()
	tr, ok := o.Session.(driver.Turner)
	if !ok {
		e.T.Fatalf("the %s session %T is no driver.Turner", e.opts.Kind, o.Session)
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Deadline)
	defer cancel()
	before := len(TurnEnds(o.Events, run)) // a run may span several turns
	if err := tr.StartTurn(ctx, driver.Turn{Thread: thread, ID: run, Input: input}); err != nil {
		e.T.Fatalf("StartTurn(%q): %v", input, err)
	}
	if !o.Events.Wait(e.opts.Deadline, func(ev *providertest.Events) bool { return len(TurnEnds(ev, run)) > before }) {
		e.T.Fatalf("turn %s (%q) did not end; events %+v", run, input, o.Events.Events())
	}
	return TurnEnds(o.Events, run)[before], time.Since(start)
}

// RunTurn starts a run whose input is the agent's turn through the
// runtime (Runtime.StartTurn) and waits for the turn's end.
func (e *Env) RunTurn(o *Opened, thread, instance, input string) (string, driver.TurnEnd, time.Duration) {
	e.T.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), e.opts.Deadline)
	defer cancel()
	run, err := e.RT.StartTurn(ctx, thread, instance, input)
	if err != nil {
		e.T.Fatalf("StartTurn(%s, %s, %q): %v", thread, instance, input, err)
	}
	end, ok := o.Events.TurnEnd(run, e.opts.Deadline)
	if !ok {
		e.T.Fatalf("turn %s (%q) did not end; events %+v", run, input, o.Events.Events())
	}
	return run, end, time.Since(start)
}

// WaitNoRun waits until the thread has no active run.
func (e *Env) WaitNoRun(thread string) {
	e.T.Helper()
	end := time.Now().Add(e.opts.Deadline)
	for {
		th, err := e.RT.Thread(context.Background(), thread)
		if err != nil {
			e.T.Fatal(err)
		}
		if th.Run == nil {
			return
		}
		if time.Now().After(end) {
			e.T.Fatalf("thread %s still runs %+v", thread, th.Run)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

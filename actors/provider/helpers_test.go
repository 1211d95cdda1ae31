package provider_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestMain fails the package if a test leaves a goroutine behind: actors,
// driver calls and the actor system must all be gone after cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// env is one test's actor system, store and driver.
type env struct {
	t      *testing.T
	sys    *actor.ActorSystem
	root   *actor.RootContext
	store  *memdb.Store
	inproc *providertest.Inproc
	clock  *actortest.Clock
	base   context.Context
	work   *sync.WaitGroup

	opTimeout time.Duration
	// idleRelease is the IdleRelease of the instances spawned from now on.
	idleRelease time.Duration

	mu        sync.Mutex // guards events and allEvents
	events    []*provider.SessionClosed
	allEvents []provider.Event // every provider event, in publication order
	notify    chan struct{}    // receives a value after each event, never blocks
}

func newEnv(t *testing.T) *env {
	t.Helper()
	store := actortest.NewStore(t)
	sys := actortest.NewSystem(t)
	base, cancel := context.WithCancel(context.Background())
	e := &env{
		t:         t,
		sys:       sys,
		root:      sys.Root,
		store:     store,
		inproc:    &providertest.Inproc{},
		clock:     actortest.NewClock(actortest.T0),
		base:      base,
		work:      &sync.WaitGroup{},
		opTimeout: actortest.Timeout,
		notify:    make(chan struct{}, 1),
	}
	sub := sys.EventStream.Subscribe(func(evt any) {
		pe, ok := evt.(provider.Event)
		if !ok {
			return
		}
		e.mu.Lock()
		e.allEvents = append(e.allEvents, pe)
		if ev, ok := pe.(*provider.SessionClosed); ok {
			e.events = append(e.events, ev)
		}
		e.mu.Unlock()
		select {
		case e.notify <- struct{}{}:
		default:
		}
	})
	t.Cleanup(func() {
		cancel()
		e.work.Wait()
		sys.EventStream.Unsubscribe(sub)
	})
	return e
}

// spawn starts the actor of instance id with driver d.
func (e *env) spawn(id string, d driver.Driver, caps ...string) *actor.PID {
	e.t.Helper()
	props := provider.Props(provider.Config{
		Instance:     memdb.Instance{ID: id, Driver: driver.InprocKind, Capabilities: caps, Created: actortest.T0},
		Driver:       d,
		Store:        e.store,
		Now:          e.clock.Now,
		OpTimeout:    e.opTimeout,
		ActorTimeout: actortest.Timeout,
		IdleRelease:  e.idleRelease,
		Work:         e.work,
		Base:         e.base,
		Logger:       slog.New(slog.DiscardHandler),
	})
	pid, err := e.root.SpawnNamed(props, names.Instance(id))
	if err != nil {
		e.t.Fatalf("spawn provider/%s: %v", id, err)
	}
	actortest.StopAtEnd(e.t, e.root, pid)
	e.sessions(pid) // barrier: the instance record is written
	return pid
}

// spawnInproc starts instance id on the in-process driver with config.
func (e *env) spawnInproc(id string, config json.RawMessage) *actor.PID {
	e.t.Helper()
	d, err := e.inproc.Factory()(id, config)
	if err != nil {
		e.t.Fatalf("inproc factory(%q, %s) = %v", id, config, err)
	}
	return e.spawn(id, d)
}

func (e *env) open(pid *actor.PID, sessionID string, b driver.Binding) *provider.OpenSessionResult {
	e.t.Helper()
	return actortest.Ask[*provider.OpenSessionResult](e.t, e.root, pid, &provider.OpenSession{SessionID: sessionID, Binding: b})
}

func (e *env) mustOpen(pid *actor.PID, sessionID string, b driver.Binding) string {
	e.t.Helper()
	res := e.open(pid, sessionID, b)
	if res.Err() != nil {
		e.t.Fatalf("OpenSession(%q, %s) = %v", sessionID, b.Thread, res.Err())
	}
	return res.SessionID
}

func (e *env) sessions(pid *actor.PID) []memdb.ProviderSession {
	e.t.Helper()
	return actortest.Ask[*provider.Sessions](e.t, e.root, pid, &provider.GetSessions{}).Sessions
}

func (e *env) record(id string) (*memdb.ProviderSession, error) {
	return e.store.Read().ProviderSession(id)
}

// acquire asks pid for a session serving b.Thread with b's credential.
func (e *env) acquire(pid *actor.PID, b driver.Binding) *provider.SessionAcquired {
	e.t.Helper()
	b.Authorization = ""
	return actortest.Ask[*provider.SessionAcquired](e.t, e.root, pid, &provider.AcquireSession{Binding: b})
}

// rebind asks pid to give the sessions serving b.Thread b's credential in
// place of replaces.
func (e *env) rebind(pid *actor.PID, b driver.Binding, replaces ...string) *provider.ThreadRebound {
	e.t.Helper()
	return actortest.Ask[*provider.ThreadRebound](e.t, e.root, pid, &provider.RebindThread{Binding: b, Replaces: replaces})
}

// threadStub stands in for the actor of a thread (it is spawned under the
// thread's name): it records every ReleaseCredentials it gets, calls
// onRelease on its turn, and answers with fault (zero: every credential
// released) — at once, or, with hold, once it gets a stubAnswer.
type threadStub struct {
	onRelease func(*provider.ReleaseCredentials)
	fault     fault.Fault
	hold      bool
	held      []*actor.PID

	mu  sync.Mutex // guards got
	got []provider.ReleaseCredentials
}

// stubAnswer makes a holding threadStub answer what it holds.
type stubAnswer struct{}

// stubBarrier is answered, once every message the stub got before it was
// handled, with the ReleaseCredentials it got so far.
type stubBarrier struct{}

func (s *threadStub) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *provider.ReleaseCredentials:
		s.mu.Lock()
		s.got = append(s.got, *msg)
		s.mu.Unlock()
		if s.onRelease != nil {
			s.onRelease(msg)
		}
		if s.hold {
			s.held = append(s.held, ctx.Sender())
			return
		}
		ctx.Respond(s.answer(msg.Credentials))
	case *stubAnswer:
		for _, p := range s.held {
			ctx.Send(p, s.answer(nil))
		}
		s.held = nil
	case *stubBarrier:
		ctx.Respond(s.releases())
	}
}

func (s *threadStub) answer(creds []string) *provider.CredentialsReleased {
	res := &provider.CredentialsReleased{Fault: s.fault}
	if s.fault.OK() {
		res.Revoked = slices.Clone(creds)
	}
	return res
}

// releases returns the ReleaseCredentials the stub got, in order.
func (s *threadStub) releases() []provider.ReleaseCredentials {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.got)
}

// releasesOf returns what the stub at pid was asked to release, once it
// handled every message already in its mailbox.
func (e *env) releasesOf(pid *actor.PID) []provider.ReleaseCredentials {
	e.t.Helper()
	return actortest.Ask[[]provider.ReleaseCredentials](e.t, e.root, pid, &stubBarrier{})
}

// stubThread spawns s under the name of thread id and returns its PID.
func (e *env) stubThread(id string, s *threadStub) *actor.PID {
	e.t.Helper()
	pid, err := e.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return s }), names.Thread(id))
	if err != nil {
		e.t.Fatalf("spawn %s: %v", names.Thread(id), err)
	}
	actortest.StopAtEnd(e.t, e.root, pid)
	return pid
}

// eventually polls cond until it holds; only for effects that are
// asynchronous by design (driver calls, death).
var eventually = actortest.Eventually

// waitEvents waits until n SessionClosed events were published and returns
// them.
func (e *env) waitEvents(n int) []*provider.SessionClosed {
	e.t.Helper()
	deadline := time.After(actortest.Timeout)
	for {
		e.mu.Lock()
		got := slices.Clone(e.events)
		e.mu.Unlock()
		if len(got) >= n {
			return got
		}
		select {
		case <-e.notify:
		case <-deadline:
			e.t.Fatalf("got %d SessionClosed events, want %d", len(got), n)
		}
	}
}

// suspend holds pid's user messages (system messages still run) until
// resume.
func suspend(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) {
	t.Helper()
	proc, ok := sys.ProcessRegistry.Get(pid)
	if !ok {
		t.Fatalf("no process %s", pid.Id)
	}
	proc.SendSystemMessage(pid, &actor.SuspendMailbox{})
}

func resume(t *testing.T, sys *actor.ActorSystem, pid *actor.PID) {
	t.Helper()
	proc, ok := sys.ProcessRegistry.Get(pid)
	if !ok {
		t.Fatalf("no process %s", pid.Id)
	}
	proc.SendSystemMessage(pid, &actor.ResumeMailbox{})
}

func binding(thread, cred string) driver.Binding {
	return driver.Binding{
		Thread:        thread,
		Instance:      "a",
		CredentialID:  cred,
		Endpoint:      "http://127.0.0.1:7331/mcp",
		Authorization: "Bearer tok-" + cred,
		Capabilities:  []string{"thread.read", "thread.post"},
	}
}

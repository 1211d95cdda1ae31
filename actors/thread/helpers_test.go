package thread_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/principal"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestMain fails the package if a test leaves a goroutine behind: actors,
// driver calls and the actor system must all be gone after cleanup.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const endpoint = "http://127.0.0.1:7331/mcp"

// env is one test's actor system, store, driver and clock.
type env struct {
	t      *testing.T
	sys    *actor.ActorSystem
	root   *actor.RootContext
	store  *memdb.Store
	inproc *providertest.Inproc
	clock  *actortest.Clock
	base   context.Context
	work   *sync.WaitGroup
	cfg    thread.Config // template of every thread actor's config
}

func newEnv(t *testing.T, opts ...func(*thread.Config)) *env {
	t.Helper()
	store := actortest.NewStore(t)
	discard := slog.New(slog.DiscardHandler)
	sys := actortest.NewSystem(t)
	base, cancel := context.WithCancel(context.Background())
	e := &env{
		t:      t,
		sys:    sys,
		root:   sys.Root,
		store:  store,
		inproc: &providertest.Inproc{},
		clock:  actortest.NewClock(actortest.T0),
		base:   base,
		work:   &sync.WaitGroup{},
	}
	e.cfg = thread.Config{
		Store:       store,
		Now:         e.clock.Now,
		Window:      time.Hour,
		Endpoint:    endpoint,
		MessageLog:  8,
		RevokedKept: 16,
		Timeout:     actortest.Timeout,
		Logger:      discard,
	}
	for _, o := range opts {
		o(&e.cfg)
	}
	t.Cleanup(func() {
		cancel()
		e.work.Wait()
	})
	return e
}

// addInstance starts the actor of provider instance id with driver d.
func (e *env) addInstance(id string, d driver.Driver, caps ...string) *actor.PID {
	e.t.Helper()
	props := provider.Props(provider.Config{
		Instance:     memdb.Instance{ID: id, Driver: driver.InprocKind, Capabilities: caps, Created: actortest.T0},
		Driver:       d,
		Store:        e.store,
		Now:          e.clock.Now,
		OpTimeout:    actortest.Timeout,
		ActorTimeout: actortest.Timeout,
		Work:         e.work,
		Base:         e.base,
		Logger:       slog.New(slog.DiscardHandler),
	})
	pid, err := e.root.SpawnNamed(props, names.Instance(id))
	if err != nil {
		e.t.Fatalf("spawn provider/%s: %v", id, err)
	}
	actortest.StopAtEnd(e.t, e.root, pid)
	actortest.Ask[*provider.Sessions](e.t, e.root, pid, &provider.GetSessions{}) // its record is written
	return pid
}

// addInproc starts instance id on the in-process driver; config "" is none.
func (e *env) addInproc(id, config string, caps ...string) *actor.PID {
	e.t.Helper()
	return e.addInstance(id, e.inprocDriver(id, config), caps...)
}

func (e *env) inprocDriver(id, config string) driver.Driver {
	e.t.Helper()
	var raw []byte
	if config != "" {
		raw = []byte(config)
	}
	d, err := e.inproc.Factory()(id, raw)
	if err != nil {
		e.t.Fatalf("inproc factory(%q, %q) = %v", id, config, err)
	}
	return d
}

// spawnThread starts the actor of thread id with initial instance.
func (e *env) spawnThread(id, instance string) *actor.PID {
	e.t.Helper()
	cfg := e.cfg
	cfg.ID, cfg.Instance = id, instance
	pid, err := e.root.SpawnNamed(thread.Props(cfg), names.Thread(id))
	if err != nil {
		e.t.Fatalf("spawn thread/%s: %v", id, err)
	}
	actortest.StopAtEnd(e.t, e.root, pid)
	e.thread(pid) // its record is written
	return pid
}

func (e *env) thread(pid *actor.PID) *memdb.Thread {
	e.t.Helper()
	info := actortest.Ask[*thread.ThreadInfo](e.t, e.root, pid, &thread.GetThread{})
	if info.Err() != nil {
		e.t.Fatalf("GetThread(%s) = %v", pid.Id, info.Err())
	}
	return &info.Thread
}

func (e *env) open(pid *actor.PID, instance string) *thread.OpenProviderSessionResult {
	e.t.Helper()
	return actortest.Ask[*thread.OpenProviderSessionResult](e.t, e.root, pid, &thread.OpenProviderSession{Instance: instance})
}

func (e *env) mustOpen(pid *actor.PID, instance string) *thread.OpenProviderSessionResult {
	e.t.Helper()
	res := e.open(pid, instance)
	if res.Err() != nil {
		e.t.Fatalf("OpenProviderSession(%s, %s) = %v", pid.Id, instance, res.Err())
	}
	return res
}

func (e *env) rotate(pid *actor.PID, instance string) *thread.RotateResult {
	e.t.Helper()
	res := actortest.Ask[*thread.RotateResult](e.t, e.root, pid, &thread.Rotate{Instance: instance})
	if res.Err() != nil {
		e.t.Fatalf("Rotate(%s, %s) = %v", pid.Id, instance, res.Err())
	}
	return res
}

func (e *env) startRun(pid *actor.PID, instance string) string {
	e.t.Helper()
	res := actortest.Ask[*thread.StartRunResult](e.t, e.root, pid, &thread.StartRun{Instance: instance})
	if res.Err() != nil {
		e.t.Fatalf("StartRun(%s, %s) = %v", pid.Id, instance, res.Err())
	}
	return res.RunID
}

func (e *env) cred(id string) *memdb.Credential {
	e.t.Helper()
	c, err := e.store.Read().Credential(id)
	if err != nil {
		e.t.Fatalf("Credential(%s) = %v", id, err)
	}
	return c
}

func (e *env) creds(threadID string) []*memdb.Credential {
	e.t.Helper()
	cs, err := e.store.Read().CredentialsByThread(threadID)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func (e *env) pairCreds(threadID, instance string) []*memdb.Credential {
	e.t.Helper()
	cs, err := e.store.Read().CredentialsByThreadInstance(threadID, instance)
	if err != nil {
		e.t.Fatal(err)
	}
	return cs
}

func (e *env) record(id string) *memdb.ProviderSession {
	e.t.Helper()
	r, err := e.store.Read().ProviderSession(id)
	if err != nil {
		e.t.Fatalf("ProviderSession(%s) = %v", id, err)
	}
	return r
}

func (e *env) write(fn func(w *memdb.Writer) error) {
	e.t.Helper()
	if err := e.store.Write(fn); err != nil {
		e.t.Fatal(err)
	}
}

// eventually polls cond until it holds; only for effects that are
// asynchronous by design (driver calls).
var eventually = actortest.Eventually

// sendSystem sends a system message to pid: actor.SuspendMailbox holds its
// user messages until actor.ResumeMailbox.
func sendSystem(t *testing.T, sys *actor.ActorSystem, pid *actor.PID, msg any) {
	t.Helper()
	proc, ok := sys.ProcessRegistry.Get(pid)
	if !ok {
		t.Fatalf("no process %s", pid.Id)
	}
	proc.SendSystemMessage(pid, msg)
}

func bearer(t *testing.T, authorization string) string {
	t.Helper()
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || !token.Valid(tok) {
		t.Fatalf("Authorization %q is not a bearer token", authorization)
	}
	return tok
}

// errOf returns the error a thread actor reply carries.
func errOf(res any) error {
	switch r := res.(type) {
	case *thread.ThreadInfo:
		return r.Err()
	case *thread.OpenProviderSessionResult:
		return r.Err()
	case *provider.CredentialsReleased:
		return r.Err()
	case *thread.SwitchProviderResult:
		return r.Err()
	case *thread.RotateResult:
		return r.Err()
	case *thread.StartRunResult:
		return r.Err()
	case *thread.EndRunResult:
		return r.Err()
	case *thread.TouchResult:
		return r.Err()
	case *thread.MutateResult:
		return r.Err()
	case *thread.DetachResult:
		return r.Err()
	case *thread.ArchiveResult:
		return r.Err()
	case *thread.DeleteResult:
		return r.Err()
	case *thread.RevokeAllResult:
		return r.Err()
	}
	return fmt.Errorf("unexpected reply %T", res)
}

// everyMessage is one of each message a thread actor answers.
func everyMessage() []any {
	return []any{
		&thread.GetThread{},
		&thread.OpenProviderSession{Instance: "a"},
		&provider.ReleaseCredentials{SessionID: "ps_x", Credentials: []string{"cred_x"}},
		&thread.SwitchProvider{Instance: "a"},
		&thread.Rotate{Instance: "a"},
		&thread.StartRun{Instance: "a"},
		&thread.EndRun{},
		&thread.Touch{},
		&thread.Mutate{Caller: principal.Principal{CredentialID: "cred_x"}, Effect: &thread.AppendMessage{Text: "x"}},
		&thread.Detach{},
		&thread.Archive{},
		&thread.Delete{},
		&thread.RevokeAll{Reason: credential.ReasonShutdown},
	}
}

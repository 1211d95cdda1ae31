package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/execdriver"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// Runtime is the session runtime: the actors, the store, and the API that
// drives them. It is safe for concurrent use. Create it with New and end it
// with Close.
type Runtime struct {
	cfg     Config
	store   *memdb.Store
	system  *actor.ActorSystem
	root    *actor.RootContext
	drivers provider.Registry
	inproc  *provider.Inproc
	base    context.Context
	cancel  context.CancelFunc
	work    sync.WaitGroup // driver goroutines
	tools   toolRegistry

	mu        sync.Mutex // guards the fields below
	closed    bool
	threads   map[string]*actor.PID
	instances map[string]*actor.PID
	// closeTimeouts bounds, per instance, one Close of its driver's
	// sessions (provider.CloseTimeout).
	closeTimeouts map[string]time.Duration
	clients       map[string]*actor.PID
	servers       []*transport.Server
}

// New starts a runtime.
func New(cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	store, err := memdb.New()
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
			// protoactor's own info logs (system started, dead letters) are noise
			// for an embedder; its warnings and errors are not.
			return slog.New(minLevel{Handler: logger.Handler(), min: slog.LevelWarn}).With("lib", "protoactor")
		}),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	base, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		cfg:           cfg,
		store:         store,
		system:        system,
		root:          system.Root,
		inproc:        &provider.Inproc{},
		base:          base,
		cancel:        cancel,
		threads:       map[string]*actor.PID{},
		instances:     map[string]*actor.PID{},
		closeTimeouts: map[string]time.Duration{},
		clients:       map[string]*actor.PID{},
	}
	r.drivers.Register(provider.InprocKind, r.inproc.Factory())
	r.drivers.Register(execdriver.Kind, execdriver.Factory(logger))
	for kind, f := range cfg.Drivers {
		r.drivers.Register(kind, f)
	}
	for _, t := range r.builtinTools() {
		if err := r.RegisterTool(t); err != nil {
			r.Close()
			return nil, fmt.Errorf("register built-in tool: %w", err)
		}
	}
	return r, nil
}

// Inproc returns the built-in in-process driver, to inspect what its
// sessions were given. For testing and examples.
func (r *Runtime) Inproc() *provider.Inproc { return r.inproc }

// Store returns the runtime's store, for reading. Writing to it bypasses
// the actors that own its tables and breaks the runtime's guarantees.
func (r *Runtime) Store() *memdb.Store { return r.store }

// SubscribeProviderEvents calls fn with every provider event
// (*provider.SessionOpened, *provider.ThreadAttached,
// *provider.ThreadDetached, *provider.SessionClosed), from the goroutine of
// the actor that published it: fn must not block. The returned function
// unsubscribes.
func (r *Runtime) SubscribeProviderEvents(fn func(provider.Event)) (unsubscribe func()) {
	sub := r.system.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(provider.Event); ok {
			fn(e)
		}
	})
	return func() { r.system.EventStream.Unsubscribe(sub) }
}

// credentialsByThread groups credential ids by the thread they belong to.
// Credentials already removed (their thread was deleted) are skipped.
func (r *Runtime) credentialsByThread(ids []string) map[string][]string {
	rd := r.store.Read()
	out := map[string][]string{}
	for _, id := range ids {
		if c, err := rd.Credential(nil, id); err == nil && c.Kind == memdb.KindProvider {
			out[c.Thread] = append(out[c.Thread], id)
		}
	}
	return out
}

// Close revokes every credential and client token, closes every provider
// session, stops every actor and waits for driver goroutines. After Close
// every method returns ErrClosed and every token fails to authenticate.
// Calling Close again does nothing. Close is Shutdown without a deadline:
// provider sessions get their drivers' whole close budget (exec: its grace).
func (r *Runtime) Close() error { return r.Shutdown(context.Background()) }

// Shutdown is Close within ctx's deadline. In order: MCP sessions end;
// every credential and client token is revoked; provider sessions are
// closed; actors stop. When ctx is done, every driver call still running
// has its context cancelled — the exec driver kills its process at once
// instead of waiting out its grace — and Shutdown returns once those calls
// have returned. Only the first Close or Shutdown does anything.
func (r *Runtime) Shutdown(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	threads, instances, clients := pids(r.threads), pids(r.instances), pids(r.clients)
	servers := r.servers
	budget := r.cfg.OpenTimeout
	for _, d := range r.closeTimeouts {
		budget = max(budget, d)
	}
	r.mu.Unlock()
	// The deadline reaches every driver call through the base context.
	defer context.AfterFunc(ctx, r.cancel)()

	// MCP sessions first: their streams close and their calls are cancelled.
	for _, srv := range servers {
		srv.Close()
	}

	var errs []error
	wait := func(pids []*actor.PID, msg any, timeout time.Duration) {
		fs := make([]*actor.Future, len(pids))
		for i, pid := range pids {
			fs[i] = r.root.RequestFuture(pid, msg, timeout)
		}
		for i, f := range fs {
			if _, err := f.Result(); err != nil {
				errs = append(errs, fmt.Errorf("close %s: %w", pids[i].Id, err))
			}
		}
	}
	// Revocation first: from here on no token authenticates.
	wait(threads, &thread.RevokeAll{Reason: thread.ReasonShutdown}, r.cfg.ActorTimeout)
	wait(clients, &client.Revoke{}, r.cfg.ActorTimeout)
	// Then the provider sessions; CloseAll answers once they have stopped,
	// at the latest shortly after the deadline cancelled their drivers.
	if d, ok := ctx.Deadline(); ok {
		budget = min(budget, time.Until(d))
	}
	wait(instances, &provider.CloseAll{Reason: provider.ReasonShutdown}, max(budget, 0)+r.cfg.ActorTimeout)
	r.cancel()
	r.work.Wait()
	for _, group := range [][]*actor.PID{threads, clients, instances} {
		for _, pid := range group {
			if err := r.root.StopFuture(pid).Wait(); err != nil {
				errs = append(errs, fmt.Errorf("stop %s: %w", pid.Id, err))
			}
		}
	}
	r.system.Shutdown()
	return errors.Join(errs...)
}

func pids(m map[string]*actor.PID) []*actor.PID {
	out := make([]*actor.PID, 0, len(m))
	for _, pid := range m {
		out = append(out, pid)
	}
	return out
}

// Actor names. Every actor is addressed by a name derived from its id, so
// that a later cluster can route by identity instead of by local PID.
const (
	threadPrefix   = "thread/"
	instancePrefix = "provider/"
	clientPrefix   = "client/"
)

func (r *Runtime) threadPID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.threads[id]
}

func (r *Runtime) instancePID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pid := r.instances[id]; pid != nil {
		return pid
	}
	// Unknown instances get a PID that dead-letters: the request fails fast.
	return r.system.NewLocalPID(instancePrefix + id)
}

func (r *Runtime) clientPID(id string) *actor.PID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clients[id]
}

// checkOpen returns ErrClosed after Close.
func (r *Runtime) checkOpen() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	return nil
}

// validID accepts 1 to 128 characters of [A-Za-z0-9._:@-], except dots
// alone. Ids name actors and appear in logs and URLs, so nothing else is
// allowed: "." and ".." would be path segments that no admin route can
// name.
func validID(kind, id string) error {
	ok := len(id) > 0 && len(id) <= 128
	dots := true
	for i := 0; ok && i < len(id); i++ {
		c := id[i]
		ok = c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == '.' || c == '_' || c == ':' || c == '@' || c == '-'
		dots = dots && c == '.'
	}
	if !ok || dots {
		return fmt.Errorf("%s id %q: %w", kind, id, ErrInvalidID)
	}
	return nil
}

// ask sends msg to pid and waits for the reply, bounded by the actor
// timeout and ctx's deadline.
func ask[R any](ctx context.Context, r *Runtime, pid *actor.PID, msg any, timeout time.Duration) (R, error) {
	var zero R
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	res, err := r.root.RequestFuture(pid, msg, timeout).Result()
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return zero, cerr
		}
		if errors.Is(err, actor.ErrDeadLetter) {
			// The actor stopped between lookup and request (a racing delete
			// or revoke): answer as if the lookup had missed.
			return zero, fmt.Errorf("request %T to %s: %w", msg, pid.Id, goneError(pid.Id))
		}
		return zero, fmt.Errorf("request %T to %s: %w", msg, pid.Id, err)
	}
	out, ok := res.(R)
	if !ok {
		return zero, fmt.Errorf("request %T to %s: unexpected reply %T", msg, pid.Id, res)
	}
	return out, nil
}

// goneError is the not-found sentinel of the kind of actor named id.
func goneError(id string) error {
	switch {
	case strings.HasPrefix(id, threadPrefix):
		return ErrUnknownThread
	case strings.HasPrefix(id, clientPrefix):
		return ErrUnknownClient
	case strings.HasPrefix(id, instancePrefix):
		return ErrUnknownInstance
	}
	return actor.ErrDeadLetter
}

// RegisterInstance registers a provider instance and starts its actor.
func (r *Runtime) RegisterInstance(ctx context.Context, id string, spec InstanceSpec) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	if err := validID("instance", id); err != nil {
		return err
	}
	drv, err := r.drivers.Build(spec.Driver, id, spec.Config)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err // nothing started
	}
	props := provider.Props(provider.Config{
		Instance: &memdb.Instance{
			ID: id, Driver: spec.Driver, Config: slices.Clone(spec.Config),
			Capabilities: slices.Clone(spec.Capabilities), Created: r.cfg.Now(),
		},
		Driver:      drv,
		Store:       r.store,
		Now:         r.cfg.Now,
		OpTimeout:   r.cfg.OpenTimeout,
		Release:     r.releaseCredentials,
		IdleRelease: r.cfg.ProviderIdle,
		Work:        &r.work,
		Base:        r.base,
		Logger:      r.cfg.Logger,
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ErrClosed
	}
	if r.instances[id] != nil {
		r.mu.Unlock()
		return fmt.Errorf("instance %q: %w", id, ErrInstanceExists)
	}
	pid, err := r.root.SpawnNamed(props, instancePrefix+id)
	if err == nil {
		r.instances[id] = pid
		r.closeTimeouts[id] = provider.CloseTimeout(drv, r.cfg.OpenTimeout)
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("start instance %q: %w", id, err)
	}
	// The actor writes its record when it starts; wait for that.
	_, err = ask[*provider.Sessions](ctx, r, pid, &provider.GetSessions{}, r.cfg.ActorTimeout)
	return err
}

// CreateThread creates a thread and starts its actor.
func (r *Runtime) CreateThread(ctx context.Context, id string, opts ThreadOptions) (Thread, error) {
	if err := r.checkOpen(); err != nil {
		return Thread{}, err
	}
	if err := validID("thread", id); err != nil {
		return Thread{}, err
	}
	if opts.Instance != "" {
		if _, err := r.store.Read().Instance(nil, opts.Instance); err != nil {
			return Thread{}, fmt.Errorf("create thread %s: instance %q: %w", id, opts.Instance, ErrUnknownInstance)
		}
	}
	if err := ctx.Err(); err != nil {
		return Thread{}, err // nothing started
	}
	props := thread.Props(thread.Config{
		ID:           id,
		Instance:     opts.Instance,
		Store:        r.store,
		Now:          r.cfg.Now,
		Window:       r.cfg.CredentialWindow,
		Endpoint:     r.cfg.Endpoint,
		MessageLog:   r.cfg.MessageLog,
		RevokedKept:  r.cfg.RevokedKept,
		OpenTimeout:  r.cfg.OpenTimeout + r.cfg.ActorTimeout,
		ActorTimeout: r.cfg.ActorTimeout,
		Provider:     r.instancePID,
		Logger:       r.cfg.Logger,
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return Thread{}, ErrClosed
	}
	if r.threads[id] != nil {
		r.mu.Unlock()
		return Thread{}, fmt.Errorf("thread %s: %w", id, ErrThreadExists)
	}
	if len(r.threads) >= r.cfg.MaxThreads {
		r.mu.Unlock()
		return Thread{}, fmt.Errorf("create thread %s: %d threads exist (Config.MaxThreads): %w", id, r.cfg.MaxThreads, ErrTooManyThreads)
	}
	pid, err := r.root.SpawnNamed(props, threadPrefix+id)
	if err == nil {
		r.threads[id] = pid
	}
	r.mu.Unlock()
	if errors.Is(err, actor.ErrNameExists) {
		// A delete of the same id is still stopping its actor.
		return Thread{}, fmt.Errorf("thread %s is being deleted: %w", id, ErrThreadExists)
	}
	if err != nil {
		return Thread{}, fmt.Errorf("start thread %s: %w", id, err)
	}
	info, err := ask[*thread.ThreadInfo](ctx, r, pid, &thread.GetThread{}, r.cfg.ActorTimeout)
	if err != nil {
		return Thread{}, err
	}
	if info.Err != nil {
		return Thread{}, info.Err
	}
	return threadFromRecord(info.Thread), nil
}

// thread returns the actor of a live thread.
func (r *Runtime) thread(id string) (*actor.PID, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	if err := validID("thread", id); err != nil {
		return nil, err
	}
	pid := r.threadPID(id)
	if pid == nil {
		return nil, fmt.Errorf("thread %s: %w", id, ErrUnknownThread)
	}
	return pid, nil
}

// Thread returns a snapshot of a thread, read from the store.
func (r *Runtime) Thread(ctx context.Context, id string) (Thread, error) {
	if err := r.checkOpen(); err != nil {
		return Thread{}, err
	}
	if err := validID("thread", id); err != nil {
		return Thread{}, err
	}
	t, err := r.store.Read().Thread(nil, id)
	if errors.Is(err, memdb.ErrNotFound) {
		return Thread{}, fmt.Errorf("thread %s: %w", id, ErrUnknownThread)
	}
	if err != nil {
		return Thread{}, err
	}
	return threadFromRecord(t), nil
}

// Threads returns a snapshot of every thread, ordered by id: up to
// Config.MaxThreads of them, with their messages. ListThreads pages.
func (r *Runtime) Threads(ctx context.Context) ([]Thread, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	ts, err := r.store.Read().Threads(nil)
	if err != nil {
		return nil, err
	}
	out := make([]Thread, len(ts))
	for i, t := range ts {
		out[i] = threadFromRecord(t)
	}
	return out, nil
}

// OpenProviderSession opens a provider session of instance for thread, or
// returns the one the pair already has (SPEC §3).
func (r *Runtime) OpenProviderSession(ctx context.Context, threadID, instance string) (ProviderSession, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return ProviderSession{}, err
	}
	if err := validID("instance", instance); err != nil {
		return ProviderSession{}, err
	}
	res, err := ask[*thread.OpenProviderSessionResult](ctx, r, pid,
		&thread.OpenProviderSession{Instance: instance}, r.cfg.OpenTimeout+2*r.cfg.ActorTimeout)
	if err != nil {
		return ProviderSession{}, err
	}
	if res.Err != nil {
		return ProviderSession{}, res.Err
	}
	return ProviderSession{
		ID:            res.SessionID,
		CredentialID:  res.CredentialID,
		Endpoint:      res.Endpoint,
		Authorization: res.Authorization,
		Capabilities:  res.Capabilities,
		Reused:        res.Reused,
	}, nil
}

// ReleaseProviderSession closes a provider session and revokes the
// credentials it recorded, except those another open provider session
// holds. The revocation comes first: the session's record is removed and
// its tokens stop authenticating before the driver's Close is called, so
// an agent given a grace to stop can do nothing more with them. It
// returns once the driver's Close returned (exec: the process is gone).
func (r *Runtime) ReleaseProviderSession(ctx context.Context, id string) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	rec, err := r.store.Read().ProviderSession(nil, id)
	if err != nil {
		return fmt.Errorf("provider session %q: %w", id, ErrUnknownProviderSession)
	}
	res, err := ask[*provider.CloseSessionResult](ctx, r, r.instancePID(rec.Instance),
		&provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased}, r.closeTimeout(rec.Instance)) // waits for the driver's Close
	if err != nil {
		return err
	}
	return res.Err
}

// closeTimeout bounds a request that waits for the driver's Close of one of
// instance's sessions, its revocation first: the driver's close budget,
// and the actor round trips around it.
func (r *Runtime) closeTimeout(instance string) time.Duration {
	r.mu.Lock()
	d, ok := r.closeTimeouts[instance]
	r.mu.Unlock()
	if !ok {
		d = r.cfg.OpenTimeout
	}
	return d + 2*r.cfg.ActorTimeout
}

// releaseCredentials revokes the credentials a closing provider session
// recorded, except those another open session holds, and returns once
// they no longer authenticate. It is every instance's provider.Config.Release:
// the instance calls it before the driver's Close.
func (r *Runtime) releaseCredentials(ctx context.Context, closed *memdb.ProviderSession) error {
	var errs []error
	for t, creds := range r.credentialsByThread(closed.Credentials) {
		pid := r.threadPID(t)
		if pid == nil {
			continue
		}
		rel, err := ask[*thread.ReleaseCredentialsResult](ctx, r, pid,
			&thread.ReleaseCredentials{SessionID: closed.ID, Credentials: creds}, r.cfg.ActorTimeout)
		switch {
		case err != nil:
			errs = append(errs, err)
		case rel.Err != nil && !errors.Is(rel.Err, ErrUnknownThread):
			errs = append(errs, rel.Err)
		}
	}
	return errors.Join(errs...)
}

// ReleaseIdleProviderSessions releases, now, every provider session idle
// for at least Config.ProviderIdle (instances also do it on their own
// timers, within a quarter of that time) and returns their ids, sorted.
// As with ReleaseProviderSession, their credentials stop authenticating
// (except those another open session holds) before their driver sessions
// are closed; it returns once those are closed.
func (r *Runtime) ReleaseIdleProviderSessions(ctx context.Context) ([]string, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	r.mu.Lock()
	ids := slices.Sorted(maps.Keys(r.instances))
	r.mu.Unlock()
	var (
		released []string
		errs     []error
	)
	for _, id := range ids {
		res, err := ask[*provider.ReleaseIdleResult](ctx, r, r.instancePID(id), &provider.ReleaseIdle{}, r.closeTimeout(id))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, s := range res.Sessions {
			released = append(released, s.ID)
		}
		errs = append(errs, res.Err)
	}
	ids = released
	slices.Sort(ids)
	return ids, errors.Join(errs...)
}

// SwitchProvider makes instance the thread's current provider instance.
// No credential changes; an active run of the previous instance ends.
func (r *Runtime) SwitchProvider(ctx context.Context, threadID, instance string) (SwitchResult, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return SwitchResult{}, err
	}
	if err := validID("instance", instance); err != nil {
		return SwitchResult{}, err
	}
	res, err := ask[*thread.SwitchProviderResult](ctx, r, pid, &thread.SwitchProvider{Instance: instance}, r.cfg.ActorTimeout)
	if err != nil {
		return SwitchResult{}, err
	}
	return SwitchResult{Previous: res.Previous, EndedRun: res.EndedRun}, res.Err
}

// Rotate mints a new credential for (thread, instance) and revokes the
// previous one. A provider session serving the pair is re-bound to it.
func (r *Runtime) Rotate(ctx context.Context, threadID, instance string) (Credential, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return Credential{}, err
	}
	if err := validID("instance", instance); err != nil {
		return Credential{}, err
	}
	res, err := ask[*thread.RotateResult](ctx, r, pid, &thread.Rotate{Instance: instance}, r.cfg.OpenTimeout+2*r.cfg.ActorTimeout)
	if err != nil {
		return Credential{}, err
	}
	if res.Err != nil {
		return Credential{}, res.Err
	}
	return Credential{ID: res.CredentialID, Authorization: res.Authorization}, nil
}

// StartRun starts a run of instance on the thread and refreshes the
// liveness of the thread's credentials (a turn start). It returns the run id.
func (r *Runtime) StartRun(ctx context.Context, threadID, instance string) (string, error) {
	pid, err := r.thread(threadID)
	if err != nil {
		return "", err
	}
	if err := validID("instance", instance); err != nil {
		return "", err
	}
	res, err := ask[*thread.StartRunResult](ctx, r, pid, &thread.StartRun{Instance: instance}, r.cfg.ActorTimeout)
	if err != nil {
		return "", err
	}
	return res.RunID, res.Err
}

// EndRun ends the thread's active run; runID "" ends whichever is active.
func (r *Runtime) EndRun(ctx context.Context, threadID, runID string) error {
	pid, err := r.thread(threadID)
	if err != nil {
		return err
	}
	res, err := ask[*thread.EndRunResult](ctx, r, pid, &thread.EndRun{RunID: runID}, r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

// Touch refreshes the liveness of the thread's live credentials.
func (r *Runtime) Touch(ctx context.Context, threadID string) error {
	pid, err := r.thread(threadID)
	if err != nil {
		return err
	}
	res, err := ask[*thread.TouchResult](ctx, r, pid, &thread.Touch{}, r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

// Detach unbinds the thread from its provider sessions and revokes
// nothing: a handoff. Re-opening the pair re-attaches the same session.
func (r *Runtime) Detach(ctx context.Context, threadID string) error {
	pid, err := r.thread(threadID)
	if err != nil {
		return err
	}
	res, err := ask[*thread.DetachResult](ctx, r, pid, &thread.Detach{}, 2*r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

// Archive revokes every credential of the thread, across all instances,
// ends its run and makes it read-only.
func (r *Runtime) Archive(ctx context.Context, threadID string) error {
	pid, err := r.thread(threadID)
	if err != nil {
		return err
	}
	res, err := ask[*thread.ArchiveResult](ctx, r, pid, &thread.Archive{}, 2*r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

// DeleteThread revokes every credential of the thread, removes it and stops
// its actor. The id may be used again afterwards.
func (r *Runtime) DeleteThread(ctx context.Context, threadID string) error {
	pid, err := r.thread(threadID)
	if err != nil {
		return err
	}
	// Claim the thread first: of two racing deletes exactly one proceeds,
	// and calls that start from now on find no thread.
	r.mu.Lock()
	if r.threads[threadID] != pid {
		r.mu.Unlock()
		return fmt.Errorf("thread %s: %w", threadID, ErrUnknownThread)
	}
	delete(r.threads, threadID)
	r.mu.Unlock()
	res, err := ask[*thread.DeleteResult](ctx, r, pid, &thread.Delete{}, 2*r.cfg.ActorTimeout)
	if err == nil {
		err = res.Err
	}
	if err != nil && !errors.Is(err, ErrUnknownThread) {
		// Not deleted (a timeout, a cancelled context): the thread stays
		// reachable, so its credentials can still be revoked.
		r.mu.Lock()
		if r.threads[threadID] == nil {
			r.threads[threadID] = pid
		}
		r.mu.Unlock()
		return err
	}
	// The id is free for CreateThread once the actor is gone.
	if serr := r.root.StopFuture(pid).Wait(); serr != nil {
		r.cfg.Logger.Warn("wait for thread actor to stop", "thread", threadID, "err", serr)
	}
	return err
}

// IssueClient creates a client grant with access "read-only" or
// "read-write" and returns its first token.
func (r *Runtime) IssueClient(ctx context.Context, label, access string) (ClientToken, error) {
	if err := r.checkOpen(); err != nil {
		return ClientToken{}, err
	}
	if access != memdb.AccessReadOnly && access != memdb.AccessReadWrite {
		return ClientToken{}, fmt.Errorf("access %q (want %q or %q): %w", access, memdb.AccessReadOnly, memdb.AccessReadWrite, ErrInvalidArgument)
	}
	if len(label) > 256 {
		return ClientToken{}, fmt.Errorf("label of %d bytes (max 256): %w", len(label), ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return ClientToken{}, err // nothing started
	}
	id := token.NewID("cl_")
	props := client.Props(client.Config{
		ID: id, Label: label, Access: access, Store: r.store, Now: r.cfg.Now,
		TTL: r.cfg.ClientTokenTTL, RevokedKept: r.cfg.RevokedKept, Logger: r.cfg.Logger,
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ClientToken{}, ErrClosed
	}
	pid, err := r.root.SpawnNamed(props, clientPrefix+id)
	if err == nil {
		r.clients[id] = pid
	}
	r.mu.Unlock()
	if err != nil {
		return ClientToken{}, fmt.Errorf("start client grant: %w", err)
	}
	tok, err := r.issueToken(ctx, pid, false)
	if err != nil {
		// The caller never learns the id: remove the grant rather than leave
		// one nobody can revoke.
		r.root.Send(pid, &client.Revoke{})
		r.mu.Lock()
		delete(r.clients, id)
		r.mu.Unlock()
		return ClientToken{}, err
	}
	return ClientToken{ClientID: id, Token: tok}, nil
}

// RefreshClient issues a new token for the grant; it shares the grant's
// namespace, so it keeps using the grant's MCP sessions. The previous
// tokens stay valid until their own expiry unless revokePrevious.
func (r *Runtime) RefreshClient(ctx context.Context, clientID string, revokePrevious bool) (string, error) {
	if err := r.checkOpen(); err != nil {
		return "", err
	}
	pid := r.clientPID(clientID)
	if pid == nil {
		return "", fmt.Errorf("client %q: %w", clientID, ErrUnknownClient)
	}
	return r.issueToken(ctx, pid, revokePrevious)
}

func (r *Runtime) issueToken(ctx context.Context, pid *actor.PID, revokePrevious bool) (string, error) {
	res, err := ask[*client.TokenIssued](ctx, r, pid, &client.IssueToken{RevokePrevious: revokePrevious}, r.cfg.ActorTimeout)
	if err != nil {
		return "", err
	}
	return res.Token, res.Err
}

// RevokeClient revokes every token of the grant and removes it.
func (r *Runtime) RevokeClient(ctx context.Context, clientID string) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	// Claim the grant first: of two racing revokes, exactly one finds it.
	r.mu.Lock()
	pid := r.clients[clientID]
	delete(r.clients, clientID)
	r.mu.Unlock()
	if pid == nil {
		return fmt.Errorf("client %q: %w", clientID, ErrUnknownClient)
	}
	res, err := ask[*client.Revoked](ctx, r, pid, &client.Revoke{}, r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

// Authenticate resolves a bearer token to its principal: a shape check,
// one hash, one lock-free store read, and a liveness check against the
// clock. It is what the transport calls on every request. Failures are
// *AuthError values matching ErrUnauthenticated.
func (r *Runtime) Authenticate(tok string) (Principal, error) {
	if !token.Valid(tok) {
		return Principal{}, &AuthError{Reason: AuthMalformed}
	}
	c, err := r.store.Read().CredentialByTokenHash(nil, token.Hash(tok))
	if err != nil {
		return Principal{}, &AuthError{Reason: AuthUnknown}
	}
	if c.State != memdb.StateLive {
		if c.RevokeReason == thread.ReasonExpired {
			return Principal{}, &AuthError{Reason: AuthExpired}
		}
		return Principal{}, &AuthError{Reason: AuthRevoked}
	}
	if !c.LiveAt(r.cfg.Now()) {
		return Principal{}, &AuthError{Reason: AuthExpired}
	}
	return principalFromRecord(c), nil
}

// Post appends text to a thread's message log on behalf of caller: the
// built-in thread_post mutation (SPEC §4). threadID "" means the caller's
// own thread. The caller must be live (own its thread's active run) at the
// moment the message is appended; the target must exist and be active.
func (r *Runtime) Post(ctx context.Context, caller Principal, threadID, text string) (Message, error) {
	v, err := r.Mutate(ctx, caller, threadID, &thread.AppendMessage{Text: text})
	if err != nil {
		if errors.Is(err, thread.ErrInvalidMessage) {
			return Message{}, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
		}
		return Message{}, err
	}
	return messageFromRecord(v.(memdb.Message)), nil
}

// Mutate applies effect to a thread on behalf of caller, checking in the
// same store transaction that the caller is live (SPEC §4 mutate class).
// threadID "" means the caller's own thread.
func (r *Runtime) Mutate(ctx context.Context, caller Principal, threadID string, effect thread.Effect) (any, error) {
	if threadID == "" {
		if !caller.Provider() {
			return nil, fmt.Errorf("mutation without a thread: %w", ErrCredentialRequired)
		}
		threadID = caller.Thread
	}
	pid, err := r.thread(threadID)
	if err != nil {
		return nil, err
	}
	res, err := ask[*thread.MutateResult](ctx, r, pid, &thread.Mutate{
		Caller: thread.Caller{
			Kind: caller.Kind, CredentialID: caller.CredentialID, Namespace: caller.Namespace,
			Thread: caller.Thread, Instance: caller.Instance, Access: caller.Access,
		},
		Effect: effect,
	}, r.cfg.ActorTimeout)
	if err != nil {
		return nil, err
	}
	return res.Value, res.Err
}

// minLevel drops records below min.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{Handler: h.Handler.WithAttrs(as), min: h.min}
}

func (h minLevel) WithGroup(name string) slog.Handler {
	return minLevel{Handler: h.Handler.WithGroup(name), min: h.min}
}

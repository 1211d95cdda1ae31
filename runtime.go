package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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
	servers       []*MCPEndpoint
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

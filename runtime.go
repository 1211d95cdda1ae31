package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/eventstream"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/execdriver"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/durable"
	"github.com/agenthost/mcpruntime/internal/oauth"
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
	drivers driver.Registry
	base    context.Context
	cancel  context.CancelFunc
	work    sync.WaitGroup // driver goroutines
	tools   catalog[*registeredTool]
	// resources, templates and prompts are the MCP features besides tools.
	resources catalog[*registeredResource]
	templates catalog[*registeredTemplate]
	prompts   catalog[*registeredPrompt]
	oauth     *oauth.Server   // the authorization server; nil when off
	jwt       *oauth.Verifier // the resource-server mode's verifier; nil when off
	cluster   *clusterNode    // several nodes (SPEC §5d); nil on one
	journal   *journal        // the provider records (Records)
	state     *durable.Log    // the state file (SPEC §3.8); nil in memory
	stateHist *stateHistogram // its commits' latencies (StateStats)
	shut      atomic.Bool     // Close began: every token is refused (AuthRevoked)
	watch     *eventstream.Subscription
	// unhookChanges removes the journal's hook on the store (changed).
	unhookChanges func()

	mu        sync.Mutex // guards the fields below
	closed    bool
	threads   map[string]*actor.PID
	instances map[string]*actor.PID
	// closeTimeouts bounds, per instance, one Close of its driver's
	// sessions (driver.CloseTimeout).
	closeTimeouts map[string]time.Duration
	clients       map[string]*actor.PID
	servers       []*MCPEndpoint
	testFeeds     []changeFeed // for testing: feeds that are not endpoints
}

// New starts a runtime.
func New(cfg Config) (*Runtime, error) {
	cfg = cfg.withDefaults()
	omit, err := checkOmitBuiltins(cfg.OmitBuiltins)
	if err != nil {
		return nil, err
	}
	var cluster *clusterNode
	var store *memdb.Store
	if cfg.Cluster != nil {
		c, err := joinCluster(cfg.Cluster, cfg)
		if err != nil {
			return nil, err
		}
		cluster, store = c, c.Store()
	} else {
		s, err := memdb.New()
		if err != nil {
			return nil, err
		}
		store = s
	}
	hist := &stateHistogram{}
	var state *durable.Log
	if cfg.StateFile != "" {
		l, err := openState(cfg, store, hist)
		if err != nil {
			if cluster != nil {
				cluster.Close()
			}
			return nil, err
		}
		state = l
	}
	logger := cfg.Logger
	system := newSystem(logger)
	base, cancel := context.WithCancel(context.Background())
	r := &Runtime{
		cfg:           cfg,
		store:         store,
		cluster:       cluster,
		system:        system,
		root:          system.Root,
		base:          base,
		cancel:        cancel,
		threads:       map[string]*actor.PID{},
		instances:     map[string]*actor.PID{},
		closeTimeouts: map[string]time.Duration{},
		clients:       map[string]*actor.PID{},
		journal:       newJournal(cfg.Journal),
		state:         state,
		stateHist:     hist,
	}
	if err := r.newOAuth(); err != nil {
		r.Close()
		return nil, err
	}
	r.drivers.Register(driver.InprocKind, driver.InprocFactory)
	r.drivers.Register(execdriver.Kind, execdriver.Factory(logger))
	for kind, f := range cfg.Drivers {
		r.drivers.Register(kind, f)
	}
	for _, t := range r.builtinTools() {
		if omit[t.Name] {
			continue
		}
		if err := r.RegisterTool(t); err != nil {
			r.Close()
			return nil, fmt.Errorf("register built-in tool: %w", err)
		}
	}
	if !omit[TranscriptName] {
		if err := r.registerBuiltinResources(); err != nil {
			r.Close()
			return nil, fmt.Errorf("register built-in resources: %w", err)
		}
	}
	r.watch = r.system.EventStream.Subscribe(r.heard)
	if r.state != nil {
		if err := r.restore(); err != nil {
			r.Close()
			return nil, fmt.Errorf("%s: restore: %w", cfg.StateFile, err)
		}
	}
	if r.cluster != nil {
		r.cluster.rt.Store(r)
		r.adopt() // before New returns: a restarted node's threads answer at once
		r.work.Add(1)
		go r.adoptLoop()
	}
	// After the restore and the adoption: what the journal tells is what
	// happens from here on, not the state a node starts with.
	r.unhookChanges = r.store.OnChanges(r.changed)
	return r, nil
}

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

// closeWindow is how many actors Shutdown asks at once.
const closeWindow = 1024

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
	r.shut.Store(true)
	threads, instances, clients := pids(r.threads), pids(r.instances), pids(r.clients)
	servers := r.servers
	r.mu.Unlock()
	// The deadline reaches every driver call through the base context.
	defer context.AfterFunc(ctx, r.cancel)()

	// MCP sessions first: their streams close and their calls are cancelled.
	for _, srv := range servers {
		srv.Close()
	}

	var errs []error
	wait := func(pids []*actor.PID, msg request, dl time.Time) {
		msg.SetDeadline(dl)
		fs := make([]*actor.Future, len(pids))
		for i, pid := range pids {
			fs[i] = r.root.RequestFuture(pid, msg, deadline.Left(dl))
		}
		for i, f := range fs {
			if _, err := f.Result(); err != nil {
				if errors.Is(err, actor.ErrTimeout) {
					err = ErrTimeout
				}
				errs = append(errs, fmt.Errorf("close %s: %w", pids[i].Id, err))
			}
		}
	}
	// A window of actors at a time, each window with a budget of its own:
	// a runtime of 100 000 threads closes in as many rounds, not against
	// one deadline for all.
	inWindows := func(pids []*actor.PID, msg func() request, budget time.Duration) {
		for w := range slices.Chunk(pids, closeWindow) {
			wait(w, msg(), time.Now().Add(budget))
		}
	}
	// Revocation first: from here on no token authenticates.
	inWindows(threads, func() request { return &thread.RevokeAll{Reason: credential.ReasonShutdown} }, r.budget(opActor, ""))
	if r.state == nil && r.cluster == nil {
		// In memory a grant ends with the process; a state file keeps it,
		// and its tokens authenticate again after the restart (SPEC §3.8);
		// on several nodes a survivor adopts it, its tokens live (an OAuth
		// sign-in outlives a rolling restart, SPEC §5d.5).
		inWindows(clients, func() request { return &client.Revoke{Reason: credential.ReasonShutdown} }, r.budget(opActor, ""))
	}
	// Then the provider sessions; CloseAll answers once they have stopped,
	// at the latest an actor round trip after ctx's deadline cancelled their
	// drivers.
	dl := time.Now().Add(r.budget(opCloseAll, ""))
	if d, ok := ctx.Deadline(); ok && d.Before(dl) {
		dl = d
	}
	wait(instances, &provider.CloseAll{Reason: provider.ReasonShutdown}, dl.Add(r.cfg.ActorTimeout))
	r.journal.close() // after the sessions' closes were heard
	if r.unhookChanges != nil {
		r.unhookChanges()
	}
	r.cancel()
	if r.watch != nil {
		r.system.EventStream.Unsubscribe(r.watch)
	}
	r.work.Wait()
	for _, group := range [][]*actor.PID{threads, clients, instances} {
		for w := range slices.Chunk(group, closeWindow) {
			fs := make([]*actor.Future, len(w))
			for i, pid := range w {
				fs[i] = r.root.StopFuture(pid)
			}
			for i, f := range fs {
				if err := f.Wait(); err != nil {
					errs = append(errs, fmt.Errorf("stop %s: %w", w[i].Id, err))
				}
			}
		}
	}
	r.system.Shutdown()
	if r.state != nil {
		if err := r.state.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close state file: %w", err))
		}
	}
	if r.cluster != nil {
		if err := r.cluster.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// Authenticate resolves a bearer token to its principal: a shape check,
// one hash, one lock-free store read, and a liveness check against the
// clock (internal/credential). It is what the MCP endpoint calls on every
// request. Failures are *AuthError values matching ErrUnauthenticated. In
// the resource-server mode (OAuthConfig.Issuer) a JWT is verified the
// first time it is seen and recorded as a token of its subject's client
// grant; from then on it authenticates like any other token.
func (r *Runtime) Authenticate(tok string) (Principal, error) {
	if r.shut.Load() {
		// After Close every token is refused as revoked, on a state file
		// too, where client grants stay on disk for the next process.
		return Principal{}, &AuthError{Reason: AuthRevoked}
	}
	if !r.serving() {
		return Principal{}, ErrNodeUnavailable
	}
	if r.jwt != nil && oauth.LooksLikeJWT(tok) {
		return r.authenticateJWT(tok)
	}
	if !token.Valid(tok) {
		return Principal{}, &AuthError{Reason: AuthMalformed}
	}
	return credential.AuthenticateRow(r.store.CredentialForDigest(token.Sum(tok)), r.cfg.Now())
}

// Stats is a snapshot of what the runtime holds, for metrics and for leak
// checks (SPEC §6.7).
type Stats struct {
	Threads          int // thread actors
	Instances        int // provider instance actors
	Clients          int // client-grant actors
	ProviderSessions int // open provider sessions (store)
	MCPSessions      int // live MCP sessions of the runtime's endpoints (their session tables)
	ListenStreams    int // open 2026-07-28 listen streams of the runtime's endpoints
	ModernCalls      int // 2026-07-28 requests of the runtime's endpoints being answered
	LiveCredentials  int // credential rows in state live (expired ones included until revoked)
	// Processes counts every process of the actor system: all actors
	// (provider and MCP session actors included) and the futures of
	// requests in flight.
	Processes int
}

// Stats returns a snapshot of the runtime's counts.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	s := Stats{Threads: len(r.threads), Instances: len(r.instances), Clients: len(r.clients)}
	r.mu.Unlock()
	rd := r.store.Read()
	if ps, err := rd.ProviderSessionsByState(memdb.SessionOpen); err == nil {
		s.ProviderSessions = len(ps)
	}
	s.MCPSessions = r.mcpSessions()
	s.ListenStreams, s.ModernCalls = r.modernCounts()
	s.LiveCredentials, _ = rd.CountCredentialsByState(memdb.StateLive)
	for _, bucket := range r.system.ProcessRegistry.LocalPIDs.LocalPIDs {
		s.Processes += bucket.Count()
	}
	return s
}

package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/memdb"
)

// Key prefixes in etcd. Every replicated table's row is at
// Prefix + table + "/" + id (TableKey).
const (
	Prefix            = "/mcpruntime/"
	CredentialsPrefix = Prefix + memdb.TableCredentials + "/"
	ServingPrefix     = Prefix + "serving/"
)

// TableKey is the etcd key of a replicated row.
func TableKey(table, id string) string { return Prefix + table + "/" + id }

// Defaults of [Config].
const (
	DefaultFence    = 500 * time.Millisecond
	DefaultInterval = 100 * time.Millisecond
	DefaultLeaseTTL = 3 // seconds
	DefaultDrift    = 0.01
	DefaultMargin   = 5 * time.Millisecond
	DefaultCommit   = 5 * time.Second
)

// TestHookStarted, when set, is called with every node Start starts,
// before it serves: the multi-node tests (tests/cluster) reach the replica of
// a runtime's node through it, to pause or stall it. For testing.
var TestHookStarted func(*Node)

// ErrStopped is returned by [Node.WaitApplied] (and the writes that wait
// on it) once the node's applier has stopped: the node was closed, or its
// watch failed and the node fails closed.
var ErrStopped = errors.New("replica: node stopped applying")

// Config configures a [Node].
type Config struct {
	// Client is the node's etcd client; required. The node does not close it.
	Client *clientv3.Client
	// Node is the node's id, unique in the cluster; required.
	Node string
	// Fence is F, how long a confirmation of the replica lets the node
	// serve. Zero: DefaultFence.
	Fence time.Duration
	// Interval is the period of the fence check. Zero: DefaultInterval.
	Interval time.Duration
	// LeaseTTL is the serving lease's TTL in seconds. Zero: DefaultLeaseTTL.
	LeaseTTL int64
	// Drift is ρ, the bound on the clock-rate difference between nodes.
	// Zero: DefaultDrift.
	Drift float64
	// Margin is added to the revoker's wait and taken off the lease
	// deadline. Zero: DefaultMargin.
	Margin time.Duration
	// Confirmer asks other nodes to confirm a revision. Nil: none is
	// asked, and a revoke waits the full bound for every other listed node.
	Confirmer Confirmer
	// Secret is the cluster's node-to-node secret. With it, and no
	// Confirmer, the node asks other nodes to confirm over HTTP at the URL
	// their registrations publish ([ConfirmPath], [NodeAuth]).
	Secret string
	// HTTPClient makes those requests. Nil: a client of its own.
	HTTPClient *http.Client
	// URL is where other nodes reach this node's internal listener; it is
	// published in the node's registration ([Member]). Empty: nowhere.
	URL string
	// Commit bounds one write through the store (its etcd transaction, and
	// the wait for the replicas it needs). Zero: DefaultCommit.
	Commit time.Duration
	// OnUnavailable, when set, is called (on a goroutine of the node's)
	// each time the node stops serving — its confirmation aged past F, its
	// lease neared its end, or it stopped for good — at most Interval/2
	// after it happened: the runtime closes its streams then.
	OnUnavailable func()
	// Logger receives the node's events. Nil: discarded.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Fence == 0 {
		c.Fence = DefaultFence
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = DefaultLeaseTTL
	}
	if c.Drift == 0 {
		c.Drift = DefaultDrift
	}
	if c.Margin == 0 {
		c.Margin = DefaultMargin
	}
	if c.Commit == 0 {
		c.Commit = DefaultCommit
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Node is one node's replica, fence and registration. Its methods are
// safe for concurrent use. The store it feeds is written only by its
// applier; everyone else reads it.
type Node struct {
	cfg        Config
	cli        *clientv3.Client
	store      *memdb.Store
	servingKey string
	base       time.Time // origin of mono; carries the monotonic clock

	ctx     context.Context // cancelled by Close
	cancel  context.CancelFunc
	wmu     sync.Mutex         // guards wctx and wcancel
	wctx    context.Context    // the current watch's context; RequestProgress must use it
	wcancel context.CancelFunc // ends the current watch
	wg      sync.WaitGroup

	applied atomic.Int64  // the revision the replica has applied
	advMu   sync.Mutex    // guards adv
	adv     chan struct{} // closed and replaced at every advance of applied

	stopOnce sync.Once
	stopped  chan struct{} // closed when the applier stops (Close or failure)
	closed   atomic.Bool

	confirmed  atomic.Int64 // mono of t0 of the latest confirmation; 0: none
	latest     atomic.Int64 // the revision Q of the latest fence read
	leaseUntil atomic.Int64 // mono before which the lease is surely valid
	lease      atomic.Int64 // the serving lease; 0: not registered (fence loop writes it)

	membersMu sync.RWMutex // guards members
	members   map[string]Member
	// membersGone gets a signal (dropped when one is pending) each time a
	// member leaves.
	membersGone chan struct{}

	// applyGate and fenceGate are held for reading by each applier and
	// fence step, and for writing while paused (for testing).
	applyGate, fenceGate sync.RWMutex
	pauseMu              sync.Mutex // guards the two fields below
	applyPaused          bool
	fencePaused          bool
}

// Start loads the replica at a revision R0, starts its watch from R0+1,
// registers the node under a new lease and starts the fence loop. The
// node serves after its first confirmation; see [Node.Serving].
func Start(ctx context.Context, cfg Config) (*Node, error) {
	cfg = cfg.withDefaults()
	if cfg.Client == nil || cfg.Node == "" || strings.Contains(cfg.Node, "/") {
		return nil, fmt.Errorf("replica: start: a client and a node id without '/' are required")
	}
	store, err := memdb.New()
	if err != nil {
		return nil, fmt.Errorf("replica: start %s: %w", cfg.Node, err)
	}
	n := &Node{
		cfg:         cfg,
		cli:         cfg.Client,
		store:       store,
		servingKey:  ServingPrefix + cfg.Node,
		base:        time.Now(),
		adv:         make(chan struct{}),
		stopped:     make(chan struct{}),
		members:     map[string]Member{},
		membersGone: make(chan struct{}, 1),
	}
	store.SetLog(n)
	if cfg.Confirmer == nil && cfg.Secret != "" {
		client := cfg.HTTPClient
		if client == nil {
			client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
		}
		n.cfg.Confirmer = &httpConfirmer{node: n, client: client, secret: cfg.Secret}
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())

	r0, err := n.loadSnapshot(ctx)
	if err != nil {
		n.cancel()
		return nil, fmt.Errorf("replica: start %s: %w", cfg.Node, err)
	}
	wch := n.watch(r0 + 1)
	if err := n.register(ctx); err != nil {
		n.cancel()
		return nil, fmt.Errorf("replica: start %s: %w", cfg.Node, err)
	}
	if TestHookStarted != nil {
		TestHookStarted(n)
	}
	n.wg.Add(3)
	go n.applyLoop(wch)
	go n.fenceLoop()
	go n.watchLoop()
	return n, nil
}

// Store is the node's replica. It is written only by the node's applier.
func (n *Node) Store() *memdb.Store { return n.store }

// ID is the node's id.
func (n *Node) ID() string { return n.cfg.Node }

// Fence is the node's F.
func (n *Node) Fence() time.Duration { return n.cfg.Fence }

// Applied is the revision the replica has applied: every credential write
// at or below it is in the store and its commit hooks have run.
func (n *Node) Applied() int64 { return n.applied.Load() }

// Serving reports whether the node may serve: its replica was proved
// current within F and its serving lease is surely valid, by its
// monotonic clock.
func (n *Node) Serving() bool {
	if n.closed.Load() {
		return false
	}
	select {
	case <-n.stopped:
		return false
	default:
	}
	now := n.mono()
	c := n.confirmed.Load()
	return c != 0 && now-c <= int64(n.cfg.Fence) && now < n.leaseUntil.Load()
}

// Status is a node's replica and fence, for operators' metrics.
type Status = membership.Status

// Status returns the node's status now.
func (n *Node) Status() Status {
	st := Status{Serving: n.Serving(), Applied: n.applied.Load(), SinceConfirmed: -1}
	st.Lag = max(n.latest.Load()-st.Applied, 0)
	if c := n.confirmed.Load(); c != 0 {
		st.SinceConfirmed = time.Duration(n.mono() - c)
	}
	return st
}

// WaitApplied returns once the replica has applied rev, or ctx's error,
// or ErrStopped if the applier stopped first.
func (n *Node) WaitApplied(ctx context.Context, rev int64) error {
	for {
		if n.applied.Load() >= rev {
			return nil
		}
		n.advMu.Lock()
		ch := n.adv
		n.advMu.Unlock()
		if n.applied.Load() >= rev {
			return nil
		}
		select {
		case <-ch:
		case <-n.stopped:
			if n.applied.Load() >= rev {
				return nil
			}
			return ErrStopped
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Pause stops the applier and the fence loop at their next step, as a
// stalled process would: events queue, no confirmation is made, the lease
// is not renewed. It returns once neither is mid-step. For testing.
func (n *Node) Pause() {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	if !n.fencePaused {
		n.fenceGate.Lock()
		n.fencePaused = true
	}
	n.stallLocked()
}

// StallApplier stops only the applier, as a slow or cut watch would: the
// fence loop keeps renewing the lease and checking, and its checks fail
// because the replica cannot reach the revision they read. For testing.
func (n *Node) StallApplier() {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	n.stallLocked()
}

func (n *Node) stallLocked() {
	if !n.applyPaused {
		n.applyGate.Lock()
		n.applyPaused = true
	}
}

// Resume undoes Pause and StallApplier. For testing.
func (n *Node) Resume() {
	n.pauseMu.Lock()
	defer n.pauseMu.Unlock()
	if n.applyPaused {
		n.applyPaused = false
		n.applyGate.Unlock()
	}
	if n.fencePaused {
		n.fencePaused = false
		n.fenceGate.Unlock()
	}
}

// Close stops serving, stops the applier and the fence loop, and revokes
// the serving lease (its key goes with it; a lease that lapsed already is
// no error).
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	n.cancel()
	n.Resume()
	n.wg.Wait()
	n.stop()
	if id := n.lease.Load(); id != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := n.cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
			return fmt.Errorf("replica: close %s: revoke lease: %w", n.cfg.Node, err)
		}
	}
	return nil
}

// mono is the node's monotonic clock, in nanoseconds, never 0.
func (n *Node) mono() int64 { return int64(time.Since(n.base)) + 1 }

func (n *Node) stop() { n.stopOnce.Do(func() { close(n.stopped) }) }

// fail stops the applier for good: the node fails closed.
func (n *Node) fail(err error) {
	if n.ctx.Err() == nil {
		n.cfg.Logger.Error("replica stopped; node no longer serves", "node", n.cfg.Node, "err", err)
	}
	n.stop()
}

func (n *Node) advance(rev int64) {
	n.advMu.Lock()
	defer n.advMu.Unlock()
	if rev <= n.applied.Load() {
		return
	}
	n.applied.Store(rev)
	close(n.adv)
	n.adv = make(chan struct{})
}

package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

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
// before it serves: the multi-node tests (cluster/) reach the replica of
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
type Status struct {
	Serving bool
	Applied int64 // the revision the replica has applied
	// Lag is how many revisions the replica was behind etcd at the
	// latest fence read (0 when it had caught up by then).
	Lag int64
	// SinceConfirmed is the age of the latest proof that the replica is
	// current; negative when there is none.
	SinceConfirmed time.Duration
}

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
// the serving lease (its key goes with it).
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
		if _, err := n.cli.Revoke(ctx, clientv3.LeaseID(id)); err != nil {
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

// loadSnapshot reads every replicated row and registration at one
// revision R0 into the store and returns R0.
func (n *Node) loadSnapshot(ctx context.Context) (int64, error) {
	resp, err := n.cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("load snapshot: %w", err)
	}
	err = n.store.Apply(func(w *memdb.Writer) error {
		for _, kv := range resp.Kvs {
			if err := n.applyKV(w, clientv3.EventTypePut, kv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("load snapshot at %d: %w", resp.Header.Revision, err)
	}
	n.advance(resp.Header.Revision)
	return resp.Header.Revision, nil
}

func (n *Node) applyLoop(wch clientv3.WatchChan) {
	defer n.wg.Done()
	backoff := n.cfg.Interval
	for {
		err := n.applyWatch(wch)
		if n.ctx.Err() != nil {
			return
		}
		var wr *watchError
		if !errors.As(err, &wr) || wr.compacted {
			// The replica cannot be brought up to date from here (an
			// event the store refused, or history compacted away): fail
			// closed for good; a new Node loads a fresh snapshot.
			n.fail(err)
			return
		}
		// The watch ended (etcd lost its leader, the connection broke):
		// watch again from the next revision. Meanwhile the fence cannot
		// confirm, so the node does not serve.
		n.cfg.Logger.Warn("replica watch ended; watching again", "node", n.cfg.Node, "applied", n.applied.Load(), "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		wch = n.watch(n.applied.Load() + 1)
	}
}

// watch watches every key of the layout from rev, in a context of its
// own.
func (n *Node) watch(rev int64) clientv3.WatchChan {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if n.wcancel != nil {
		n.wcancel()
	}
	ctx, cancel := context.WithCancel(n.ctx)
	n.wctx, n.wcancel = clientv3.WithRequireLeader(ctx), cancel
	return n.cli.Watch(n.wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
}

// watchContext is the current watch's context.
func (n *Node) watchContext() context.Context {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.wctx
}

// CancelWatch ends the replica's watch as a lost etcd leader or a broken
// stream would; the applier watches again from the revision after the
// one it applied. For testing.
func (n *Node) CancelWatch() {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.wcancel()
}

// watchError is a watch that ended; compacted when the revisions it
// needed are gone.
type watchError struct {
	err       error
	compacted bool
}

func (e *watchError) Error() string { return "watch: " + e.err.Error() }
func (e *watchError) Unwrap() error { return e.err }

// applyWatch applies wch until it ends: a *watchError when the watch
// ended, another error when a response could not be applied.
func (n *Node) applyWatch(wch clientv3.WatchChan) error {
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return &watchError{err: err, compacted: wr.CompactRevision != 0}
		}
		n.applyGate.RLock()
		err := n.apply(wr)
		n.applyGate.RUnlock()
		if err != nil {
			return err
		}
	}
	return &watchError{err: errors.New("watch channel closed")}
}

// apply applies one watch response: its events in one store write, then
// the applied revision.
func (n *Node) apply(wr clientv3.WatchResponse) error {
	if wr.IsProgressNotify() {
		n.advance(wr.Header.Revision)
		return nil
	}
	if len(wr.Events) == 0 {
		return nil
	}
	// etcd sends the events of one revision in one response (its watch
	// batches by revision, and fragmenting is off), so the last event's
	// revision is applied whole.
	err := n.store.Apply(func(w *memdb.Writer) error {
		for _, ev := range wr.Events {
			if err := n.applyKV(w, ev.Type, ev.Kv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("apply revision %d: %w", wr.Events[len(wr.Events)-1].Kv.ModRevision, err)
	}
	n.advance(wr.Events[len(wr.Events)-1].Kv.ModRevision)
	return nil
}

// applyKV applies one key's put or delete: a replicated row into the
// store with its revision, or a registration into the member list. Keys
// of neither kind are ignored (a later version's tables).
func (n *Node) applyKV(w *memdb.Writer, typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) error {
	rest, ok := strings.CutPrefix(string(kv.Key), Prefix)
	if !ok {
		return nil
	}
	table, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" {
		return nil
	}
	if table == "serving" {
		n.applyMember(typ, id, kv.Value)
		return nil
	}
	if !memdb.Replicated(table) {
		return nil
	}
	if typ == clientv3.EventTypeDelete {
		if err := w.Delete(table, id); err != nil && !errors.Is(err, memdb.ErrNotFound) {
			return err
		}
		return w.SetRevision(table, id, 0)
	}
	rec, err := decodeRow(table, id, kv.Value)
	if err != nil {
		return err
	}
	if err := w.Put(table, rec); err != nil {
		return err
	}
	return w.SetRevision(table, id, kv.ModRevision)
}

// decodeRow decodes a row's value and checks that it is the row its key
// names.
func decodeRow(table, id string, value []byte) (any, error) {
	rec, err := memdb.NewRecord(table)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(value, rec); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", table, id, err)
	}
	if got := memdb.RowID(rec); got != id {
		return nil, fmt.Errorf("decode %s/%s: row id %q does not match its key", table, id, got)
	}
	return rec, nil
}

// register grants a new serving lease and writes the serving key under it.
func (n *Node) register(ctx context.Context) error {
	s := n.mono()
	g, err := n.cli.Grant(ctx, n.cfg.LeaseTTL)
	if err != nil {
		return fmt.Errorf("register: grant: %w", err)
	}
	val, err := json.Marshal(Member{ID: n.cfg.Node, URL: n.cfg.URL})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	if _, err := n.cli.Put(ctx, n.servingKey, string(val), clientv3.WithLease(g.ID)); err != nil {
		return fmt.Errorf("register: %w", err)
	}
	n.lease.Store(int64(g.ID))
	n.leaseUntil.Store(n.leaseDeadline(s, g.TTL))
	return nil
}

// leaseDeadline is s + TTL(1−ρ) − margin: the lease, renewed for ttl by a
// request sent at s, is surely valid before it.
func (n *Node) leaseDeadline(s, ttl int64) int64 {
	d := time.Duration(float64(time.Duration(ttl)*time.Second)*(1-n.cfg.Drift)) - n.cfg.Margin
	return s + int64(d)
}

// watchLoop calls OnUnavailable at each change from serving to not.
func (n *Node) watchLoop() {
	defer n.wg.Done()
	t := time.NewTicker(max(n.cfg.Interval/2, time.Millisecond))
	defer t.Stop()
	was := false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := n.Serving()
		if was && !now {
			n.cfg.Logger.Warn("node stopped serving", "node", n.cfg.Node, "applied", n.applied.Load())
			if n.cfg.OnUnavailable != nil {
				n.cfg.OnUnavailable()
			}
		}
		was = now
	}
}

func (n *Node) fenceLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.stopped:
			return
		case <-t.C:
		}
		n.fenceGate.RLock()
		if err := n.check(); err != nil && n.ctx.Err() == nil {
			n.cfg.Logger.Debug("fence check failed", "node", n.cfg.Node, "err", err)
		}
		n.fenceGate.RUnlock()
	}
}

// check renews the lease, then proves the replica current: a
// linearizable read of the serving key at revision Q, then the replica at
// ≥ Q. On success the confirmation time is t0, taken before the read.
func (n *Node) check() error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Fence)
	defer cancel()
	id := clientv3.LeaseID(n.lease.Load())
	s := n.mono()
	ka, err := n.cli.KeepAliveOnce(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		n.lost()
		return fmt.Errorf("lease lapsed: %w", err)
	case err != nil:
		return fmt.Errorf("renew lease: %w", err)
	case ka.TTL > 0:
		n.leaseUntil.Store(n.leaseDeadline(s, ka.TTL))
	}
	t0 := n.mono()
	resp, err := n.cli.Get(ctx, n.servingKey)
	if err != nil {
		return fmt.Errorf("read serving key: %w", err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != id {
		n.lost()
		return errors.New("serving key gone")
	}
	q := resp.Header.Revision
	n.latest.Store(q)
	if n.applied.Load() < q {
		if err := n.cli.RequestProgress(n.watchContext()); err != nil {
			return fmt.Errorf("request progress: %w", err)
		}
		if err := n.WaitApplied(ctx, q); err != nil {
			return fmt.Errorf("replica to %d: %w", q, err)
		}
	}
	if t0 > n.confirmed.Load() {
		n.confirmed.Store(t0) // only this loop writes it
	}
	return nil
}

// lost ends the node's membership for good: its lease lapsed, or its
// serving key is gone, so a revoker may already have left it out of a
// barrier. The node fails closed and stays so; it rejoins only as a new
// [Node] (a restart), which loads its replica afresh (SPEC §5d.2).
func (n *Node) lost() {
	n.confirmed.Store(0)
	n.leaseUntil.Store(0)
	n.fail(errors.New("membership lost"))
}

// Stopped is closed once the node no longer serves for good: it was
// closed, its watch failed, or it lost its membership.
func (n *Node) Stopped() <-chan struct{} { return n.stopped }

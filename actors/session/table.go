package session

import (
	"errors"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Entry is one MCP session as its endpoint's Table holds it: its id and
// owner, fixed at initialize, when it was created, the PID of its actor,
// and its Calls, shared by the HTTP path and the actor.
//
// An idle session holds one per session, so it is kept to 160 bytes (a
// size class): the creation time as unix nanoseconds, the parts an idle
// session does not use made at their first use, and its subscriptions in
// the Table's index rather than here.
type Entry struct {
	id      string
	owner   Owner
	created int64      // unix nanoseconds; see Created
	pid     *actor.PID // set by Commit, before the entry is findable; nil while reserved
	// version and caps are what initialize negotiated and declared: set by
	// SetProtocol before Commit, read-only once the entry is findable.
	version string
	caps    *mcp.ClientCapabilities
	Calls
	// streams and asks (see Streams and Asks) are made at their first use:
	// an idle session never streamed nor asked, and pays a pointer each.
	streams atomic.Pointer[Streams]
	asks    atomic.Pointer[Asks]
	limits  *StreamLimits // the Table's, for streams
}

// Created returns when the session was reserved (its initialize).
func (e *Entry) Created() time.Time { return time.Unix(0, e.created) }

// Streams returns the session's SSE streams and the events kept for their
// resumption, shared with the HTTP path like Calls; made at the first call.
func (e *Entry) Streams() *Streams {
	if ss := e.streams.Load(); ss != nil {
		return ss
	}
	e.streams.CompareAndSwap(nil, &Streams{limits: e.limits})
	return e.streams.Load()
}

// closedStreams and closedAsks are the Streams and Asks of every session
// that ended without ever having had its own: closed, shared, never
// changed (every method of a closed one refuses or reports nothing), so
// an ending session makes none just to close it.
var (
	closedStreams = &Streams{closed: true}
	closedAsks    = &Asks{closed: true}
)

// closeShared closes the session's Streams and Asks as it ends, so that
// none starts afterwards: those it has, or the closed shared ones.
func (e *Entry) closeShared() {
	if !e.streams.CompareAndSwap(nil, closedStreams) {
		e.streams.Load().close()
	}
	if !e.asks.CompareAndSwap(nil, closedAsks) {
		e.asks.Load().close()
	}
}

// streamsIfAny returns the session's Streams if it has ever had one, else
// nil: a session that never streamed has no stream to notify.
func (e *Entry) streamsIfAny() *Streams { return e.streams.Load() }

// Asks returns the session's pending requests to its client, shared with
// the HTTP path like Calls; made at the first call.
func (e *Entry) Asks() *Asks {
	if a := e.asks.Load(); a != nil {
		return a
	}
	e.asks.CompareAndSwap(nil, &Asks{})
	return e.asks.Load()
}

// Notify hands data to the session's open standalone stream, as
// Streams.Notify; a session that never streamed has none (sent false).
func (e *Entry) Notify(data []byte, check string) (sent bool, dropped uint64) {
	ss := e.streamsIfAny()
	if ss == nil {
		return false, 0
	}
	return ss.Notify(data, check)
}

// ID returns the session's id (Mcp-Session-Id).
func (e *Entry) ID() string { return e.id }

// Owner returns who the session is bound to.
func (e *Entry) Owner() Owner { return e.owner }

// PID returns the session's actor.
func (e *Entry) PID() *actor.PID { return e.pid }

// SetProtocol records what initialize negotiated: the protocol version
// and the client's declared capabilities (nil: none declared). The
// endpoint calls it once, before Commit makes the entry findable.
func (e *Entry) SetProtocol(version string, caps *mcp.ClientCapabilities) {
	e.version, e.caps = version, caps
}

// Version returns the protocol version the session negotiated.
func (e *Entry) Version() string { return e.version }

// ClientCapabilities returns the capabilities the client declared at
// initialize; never nil. The value is shared: read-only.
func (e *Entry) ClientCapabilities() *mcp.ClientCapabilities {
	if e.caps == nil {
		return noCapabilities
	}
	return e.caps
}

// noCapabilities is the capabilities of a client that declared none.
var noCapabilities = &mcp.ClientCapabilities{}

// The errors of Table.Reserve.
var (
	// ErrFull: the endpoint holds MaxSessions (503).
	ErrFull = errors.New("session limit reached")
	// ErrNamespaceFull: the namespace holds MaxSessionsPerNamespace and none
	// of them is idle to evict (429).
	ErrNamespaceFull = errors.New("namespace session limit reached")
	// ErrClosing: the endpoint is closing; no session starts (503).
	ErrClosing = errors.New("endpoint closing")
)

// Table is the MCP sessions of one endpoint: their slots against the caps,
// lookup by id and owner, the least recently active idle session of a full
// namespace, the idle ones, the count and the listing. It is read on every
// request, off the mailboxes. A slot is reserved before initialize runs, so
// concurrent initializes cannot overshoot a cap (SPEC §5.3). Its methods are
// safe for concurrent use.
type Table struct {
	streams StreamLimits  // every session's
	subs    subscriptions // resources/subscribe, by session and by URI

	mu       sync.RWMutex // guards the fields below
	max      int
	maxPerNS int
	reserved int                          // slots held: live sessions and initializes in progress
	perNS    map[string]int               // same, by namespace
	starting map[string]*Entry            // reserved, not committed yet
	byID     map[string]*Entry            // live sessions
	byNS     map[string]map[string]*Entry // live sessions by namespace
	closed   bool
}

// NewTable returns a table of at most max sessions, maxPerNS per namespace,
// each keeping at most what streams allows of its streams' events.
func NewTable(max, maxPerNS int, streams StreamLimits) *Table {
	return &Table{
		max: max, maxPerNS: maxPerNS, streams: streams,
		perNS:    map[string]int{},
		starting: map[string]*Entry{},
		byID:     map[string]*Entry{},
		byNS:     map[string]map[string]*Entry{},
	}
}

// Reserve holds a slot for session id of owner, created at now, and returns
// its entry. When the namespace is full it evicts its least recently active
// idle session, returned so the caller can end it; with none idle it fails
// with ErrNamespaceFull. Commit makes the entry live; Unreserve gives the
// slot back.
func (t *Table) Reserve(id string, owner Owner, now time.Time) (e, evicted *Entry, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, nil, ErrClosing
	}
	ns := owner.Namespace
	if t.perNS[ns] >= t.maxPerNS {
		for _, c := range t.byNS[ns] {
			if c.Busy() {
				continue
			}
			if evicted == nil || c.Last().Before(evicted.Last()) {
				evicted = c
			}
		}
		if evicted == nil {
			return nil, nil, ErrNamespaceFull
		}
		t.removeLocked(evicted)
	}
	if evicted == nil && t.reserved >= t.max {
		return nil, nil, ErrFull
	}
	t.reserved++
	t.perNS[ns]++
	e = &Entry{id: id, owner: owner, created: now.UnixNano()}
	e.limits = &t.streams
	e.last.Store(now.UnixNano())
	t.starting[id] = e
	return e, evicted, nil
}

// Unreserve gives back the slot of a session whose initialize failed.
func (t *Table) Unreserve(e *Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.starting[e.id] != e {
		return
	}
	delete(t.starting, e.id)
	t.freeLocked(e.owner.Namespace)
}

// Commit turns a reservation into a live session whose actor is pid. It
// reports false when the table was closed since the reservation: CloseAll
// did not return this session, so whoever closes the endpoint will not end
// it, and the caller must (the session is live until its actor ends it, as
// every other).
func (t *Table) Commit(e *Entry, pid *actor.PID) (open bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.starting, e.id)
	e.pid = pid
	t.byID[e.id] = e
	if t.byNS[e.owner.Namespace] == nil {
		t.byNS[e.owner.Namespace] = map[string]*Entry{}
	}
	t.byNS[e.owner.Namespace][e.id] = e
	return !t.closed
}

// Release frees the slot of a session that ended. The session's actor calls
// it as it ends, before a DELETE is answered; a session already removed by
// eviction is ignored.
func (t *Table) Release(e *Entry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byID[e.id] == e {
		t.removeLocked(e)
	}
}

func (t *Table) removeLocked(e *Entry) {
	t.dropAllLocked(e)
	delete(t.byID, e.id)
	delete(t.byNS[e.owner.Namespace], e.id)
	if len(t.byNS[e.owner.Namespace]) == 0 {
		delete(t.byNS, e.owner.Namespace)
	}
	t.freeLocked(e.owner.Namespace)
}

func (t *Table) freeLocked(ns string) {
	t.reserved--
	if t.perNS[ns]--; t.perNS[ns] <= 0 {
		delete(t.perNS, ns)
	}
}

// Lookup returns the live session id if namespace owns it (SPEC §5 step
// 3). Unknown, ended and foreign sessions are all nil, and nothing about
// them is touched: the caller answers them alike.
func (t *Table) Lookup(id, namespace string) *Entry {
	t.mu.RLock()
	e := t.byID[id]
	t.mu.RUnlock()
	if e == nil || !e.owner.Owns(namespace) {
		return nil
	}
	return e
}

// Live reports whether e is still a live session of the table.
func (t *Table) Live(e *Entry) bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.byID[e.id] == e
}

// entry returns the entry of a session, reserved or live: what its
// actor finds at Start.
func (t *Table) entry(id string) *Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	if e := t.starting[id]; e != nil {
		return e
	}
	return t.byID[id]
}

// Idle returns the live sessions that have been idle for d at now (see
// Calls): those the sweep asks to end.
func (t *Table) Idle(now time.Time, d time.Duration) []*Entry {
	t.mu.RLock()
	defer t.mu.RUnlock()
	var out []*Entry
	for _, e := range t.byID {
		if e.idle(now, d) {
			out = append(out, e)
		}
	}
	return out
}

// Count returns the number of live sessions: the one count of them, which
// the endpoint's gauge and the runtime's Stats read.
func (t *Table) Count() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.byID)
}

// CloseAll refuses new sessions and returns the live ones.
func (t *Table) CloseAll() []*Entry {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	out := make([]*Entry, 0, len(t.byID))
	for _, e := range t.byID {
		out = append(out, e)
	}
	return out
}

// Summary describes one live MCP session, for operators: the one view of
// a live session, built by Summaries from its Entry. It carries no token
// and no credential secret. The module root serves it as MCPSessionInfo,
// in the admin API's JSON too.
type Summary struct {
	ID         string    `json:"id"`
	Owner      string    `json:"owner"` // namespace
	Created    time.Time `json:"created,omitzero"`
	LastActive time.Time `json:"lastActive,omitzero"`
	Busy       bool      `json:"busy"` // a call in flight or a stream open
}

// Summaries lists the live sessions, ordered by id.
func (t *Table) Summaries() []Summary {
	t.mu.RLock()
	entries := make([]*Entry, 0, len(t.byID))
	for _, e := range t.byID {
		entries = append(entries, e)
	}
	t.mu.RUnlock()
	out := make([]Summary, 0, len(entries))
	for _, e := range entries {
		out = append(out, Summary{ID: e.id, Owner: e.owner.Namespace, Created: e.Created(), LastActive: e.Last(), Busy: e.Busy()})
	}
	slices.SortFunc(out, func(a, b Summary) int { return strings.Compare(a.ID, b.ID) })
	return out
}

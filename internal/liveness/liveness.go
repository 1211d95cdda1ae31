// Package liveness tells its watchers when a credential, or every
// credential of a namespace, stops being live — revoked, removed or
// expired — without a goroutine or a watch set per watcher.
//
// One [Monitor] serves any number of watchers. It learns of revocations
// from the store's commit hook ([memdb.Store.OnCredentialsChanged]): the
// write that revoked a credential tells the monitor, which re-reads only
// the keys that write touched and someone watches. Expiry needs no write,
// so the monitor keeps one timer for the earliest expiry among the watched
// keys. A watcher costs a map entry, whatever the number of watchers, and
// an ended watch leaves nothing behind: a key with no watcher left leaves
// the timer heap with it, however far off its expiry is.
//
// The MCP endpoint (transport) uses it so that an MCP session ends
// when its owner namespace has no live credential left, and a stream ends
// when the credential it was opened with dies (SPEC §5).
package liveness

import (
	"container/heap"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

// kind says what a key names.
type kind uint8

const (
	kindNamespace  kind = iota // "cred:<id>" or "client:<grant>"
	kindCredential             // a credential id
)

type keyID struct {
	kind kind
	name string
}

// key is one watched namespace or credential. It is in the timer heap
// while it has a scheduled expiry, and in the heap only while it is in
// Monitor.keys: dropping a key removes its heap entry.
type key struct {
	id       keyID
	watchers map[*watcher]struct{}
	deadline time.Time // its scheduled expiry, while index >= 0
	index    int       // its position in Monitor.due; -1: not scheduled
}

type watcher struct {
	k    *key
	dead func()
}

// Monitor watches credentials and namespaces of one store. Its methods are
// safe for concurrent use.
type Monitor struct {
	store  *memdb.Store
	now    func() time.Time
	unhook func()

	mu     sync.Mutex // guards the fields below
	keys   map[keyID]*key
	due    deadlines   // the keys with a scheduled expiry, earliest first
	timer  *time.Timer // fires at the earliest expiry; nil when none
	closed bool
}

// New returns a monitor of store reading the time from now. Close it when
// done.
func New(store *memdb.Store, now func() time.Time) *Monitor {
	m := &Monitor{store: store, now: now, keys: map[keyID]*key{}}
	m.unhook = store.OnCredentialsChanged(m.changed)
	return m
}

// Close unregisters the monitor; watchers are never called afterwards.
func (m *Monitor) Close() {
	m.unhook()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	if m.timer != nil {
		m.timer.Stop()
		m.timer = nil
	}
	clear(m.keys)
	for _, k := range m.due {
		k.index = -1
	}
	m.due = nil
}

// WatchNamespace calls dead once namespace has no live credential: a provider
// namespace ("cred:<id>") is one credential, a client namespace
// ("client:<grant>") every token of the grant. If it has none now, dead is
// called before Namespace returns. dead is called at most once, from a
// writer's or a timer's goroutine: it must not block. stop, which may be
// called any number of times, cancels the watch.
func (m *Monitor) WatchNamespace(namespace string, dead func()) (stop func()) {
	return m.watch(keyID{kindNamespace, namespace}, dead)
}

// WatchCredential calls dead once the credential with id is revoked,
// removed or expired; see [Monitor.WatchNamespace].
func (m *Monitor) WatchCredential(id string, dead func()) (stop func()) {
	return m.watch(keyID{kindCredential, id}, dead)
}

// EndCredentialWatches calls the dead of every credential watcher, as if
// each credential had died, and forgets those watches; namespace watches
// stay. It is for an owner that can no longer tell whether its credentials
// are live (a node whose replica is not proven current): what every
// credential's death would end ends, and nothing a namespace's would.
// Watches made after it are watched as usual.
func (m *Monitor) EndCredentialWatches() {
	var fire []func()
	m.mu.Lock()
	for id, k := range m.keys {
		if id.kind != kindCredential {
			continue
		}
		for w := range k.watchers {
			fire = append(fire, w.dead)
		}
		clear(k.watchers)
		m.dropLocked(k)
	}
	m.mu.Unlock()
	call(fire)
}

func (m *Monitor) watch(id keyID, dead func()) (stop func()) {
	w := &watcher{dead: dead}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return func() {}
	}
	k := m.keys[id]
	if k == nil {
		k = &key{id: id, watchers: map[*watcher]struct{}{}, index: -1}
		m.keys[id] = k
	}
	w.k = k
	k.watchers[w] = struct{}{}
	// Registered first, then read: a revocation committed after the read
	// finds the watcher through the hook.
	fire := m.evaluateLocked(m.store.Read(), k)
	m.mu.Unlock()
	call(fire)
	return func() { m.unwatch(w) }
}

func (m *Monitor) unwatch(w *watcher) {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := w.k
	if _, ok := k.watchers[w]; !ok {
		return
	}
	delete(k.watchers, w)
	if len(k.watchers) == 0 && m.keys[k.id] == k {
		m.dropLocked(k)
	}
}

// dropLocked forgets k, which is in m.keys, and its scheduled expiry.
func (m *Monitor) dropLocked(k *key) {
	delete(m.keys, k.id)
	if k.index >= 0 {
		heap.Remove(&m.due, k.index)
	}
}

// changed is the store's commit hook.
func (m *Monitor) changed(creds []*memdb.Credential) {
	var fire []func()
	m.mu.Lock()
	if len(m.keys) > 0 {
		r := m.store.Read()
		for _, c := range creds {
			for _, id := range []keyID{{kindNamespace, c.Namespace}, {kindCredential, c.ID}} {
				if k := m.keys[id]; k != nil {
					fire = append(fire, m.evaluateLocked(r, k)...)
				}
			}
		}
	}
	m.mu.Unlock()
	call(fire)
}

// evaluateLocked reads k's liveness. Dead: k is dropped and its watchers'
// callbacks returned, to be called once the lock is released. Live until a
// known expiry: the expiry is scheduled.
func (m *Monitor) evaluateLocked(r *memdb.Reader, k *key) []func() {
	live, until := m.liveLocked(r, k.id)
	if !live {
		fire := make([]func(), 0, len(k.watchers))
		for w := range k.watchers {
			fire = append(fire, w.dead)
		}
		clear(k.watchers)
		m.dropLocked(k)
		return fire
	}
	// A later expiry than the scheduled one (a refresh) is left to the
	// scheduled tick, which re-reads the key and schedules it again.
	switch {
	case until.IsZero():
	case k.index < 0:
		k.deadline = until
		heap.Push(&m.due, k)
		m.armLocked()
	case until.Before(k.deadline):
		k.deadline = until
		heap.Fix(&m.due, k.index)
		m.armLocked()
	}
	return nil
}

// liveLocked reports whether the key is live now and, if it is, until when
// (zero: no expiry). A namespace lives until its last credential expires.
func (m *Monitor) liveLocked(r *memdb.Reader, id keyID) (bool, time.Time) {
	now := m.now()
	if id.kind == kindCredential {
		return credential.Live(r, id.name, now)
	}
	return credential.NamespaceLive(r, id.name, now)
}

// armLocked sets the timer to the earliest scheduled expiry. The clock may
// be a test's, so the wait is its distance on that clock, at least 1 ms.
func (m *Monitor) armLocked() {
	if m.closed || len(m.due) == 0 {
		return
	}
	d := max(m.due[0].deadline.Sub(m.now()), time.Millisecond)
	if m.timer == nil {
		m.timer = time.AfterFunc(d, m.expire)
		return
	}
	m.timer.Reset(d)
}

// expire re-reads the keys whose scheduled expiry has come.
func (m *Monitor) expire() {
	var fire []func()
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	now := m.now()
	// Take every due entry off first, then evaluate: a key found live again
	// is rescheduled for a later tick, never re-examined in this loop (a
	// clock that disagrees with itself cannot spin it).
	var due []*key
	for len(m.due) > 0 && !m.due[0].deadline.After(now) {
		due = append(due, heap.Pop(&m.due).(*key))
	}
	r := m.store.Read()
	for _, k := range due {
		fire = append(fire, m.evaluateLocked(r, k)...)
	}
	m.armLocked()
	m.mu.Unlock()
	call(fire)
}

func call(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// deadlines is a min-heap of keys by scheduled expiry (container/heap),
// indexed: each key knows its position, so dropping one is heap.Remove.
type deadlines []*key

func (d deadlines) Len() int           { return len(d) }
func (d deadlines) Less(i, j int) bool { return d[i].deadline.Before(d[j].deadline) }
func (d deadlines) Swap(i, j int) {
	d[i], d[j] = d[j], d[i]
	d[i].index, d[j].index = i, j
}

func (d *deadlines) Push(x any) {
	k := x.(*key)
	k.index = len(*d)
	*d = append(*d, k)
}

func (d *deadlines) Pop() any {
	old := *d
	k := old[len(old)-1]
	old[len(old)-1] = nil // no reference kept past the heap's length
	k.index = -1
	*d = old[:len(old)-1]
	return k
}

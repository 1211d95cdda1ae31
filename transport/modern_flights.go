package transport

import (
	"container/heap"
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/memdb"
)

// flights is the 2026-07-28 calls in flight, by the credential that
// authenticated each, so a revocation or removal committed while one runs
// cancels it (SPEC §6.9). It is the per-request counterpart of the
// liveness monitor, which sessions and listen streams use: a stateless call
// lives for one request, so registering it must cost no allocation and no
// global lock. A flight is an intrusive list node (it lives in its
// modernWriter); the shards' maps hold each credential's first flight.
//
// The store's commit hook (Server.credentialsChanged) first moves credGen,
// then scans: a flight registered after the scan sees credGen moved
// (Server.deadSince), one registered before it is found by the scan.
type flights struct {
	seed   maphash.Seed
	now    func() time.Time // the endpoint's clock, which expiries are on
	shards [flightShards]flightShard
}

const flightShards = 64

type flightShard struct {
	mu    sync.Mutex
	heads map[string]*flight
	// due are the shard's flights whose credential expires, a min-heap by
	// expiry; timer fires at the first one's (made once, then reset).
	due   dueHeap
	timer *time.Timer
}

// flight is one call in flight: its credential, when that expires (Unix
// nanoseconds, 0: never; a word, not a time.Time: it lives in every
// call's writer) and how to cancel it.
type flight struct {
	credential string
	expires    int64
	cancel     context.CancelCauseFunc
	prev, next *flight
	due        int32 // its index in its shard's due heap; -1: not there
}

// expiryOf is a credential's expiry as a flight keeps it.
func expiryOf(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func newFlights(now func() time.Time) *flights {
	f := &flights{seed: maphash.MakeSeed(), now: now}
	for i := range f.shards {
		f.shards[i].heads = map[string]*flight{}
	}
	return f
}

func (f *flights) shard(credential string) *flightShard {
	return &f.shards[maphash.String(f.seed, credential)%flightShards]
}

// add registers fl, whose credential, expiry and cancel are set: a
// revocation of its credential, or its expiry, cancels it.
func (f *flights) add(fl *flight) {
	sh := f.shard(fl.credential)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if head := sh.heads[fl.credential]; head != nil {
		fl.next, head.prev = head, fl
	}
	sh.heads[fl.credential] = fl
	fl.due = -1
	if fl.expires != 0 {
		heap.Push(&sh.due, fl)
		if sh.due[0] == fl {
			f.armLocked(sh)
		}
	}
}

// armLocked sets sh's timer for its first expiry, on the endpoint's clock
// (at least a millisecond on: a clock that runs behind real time, a
// test's, is waited for again when the timer fires early).
func (f *flights) armLocked(sh *flightShard) {
	d := max(time.Duration(sh.due[0].expires-f.now().UnixNano()), time.Millisecond)
	if sh.timer == nil {
		sh.timer = time.AfterFunc(d, func() { f.expire(sh) })
		return
	}
	sh.timer.Reset(d)
}

// expire cancels sh's flights whose credential has expired (the call ends
// as a revoked one does, SPEC §5a.5), and sets the timer for the next.
func (f *flights) expire(sh *flightShard) {
	var cancels []context.CancelCauseFunc
	sh.mu.Lock()
	now := f.now().UnixNano()
	for len(sh.due) > 0 && sh.due[0].expires <= now {
		fl := heap.Pop(&sh.due).(*flight)
		cancels = append(cancels, fl.cancel)
	}
	if len(sh.due) > 0 {
		f.armLocked(sh)
	}
	sh.mu.Unlock()
	for _, cancel := range cancels {
		cancel(errCredentialDead)
	}
}

// stop stops the shards' expiry timers (the endpoint closed).
func (f *flights) stop() {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		if sh.timer != nil {
			sh.timer.Stop()
		}
		sh.mu.Unlock()
	}
}

// remove unregisters fl, which add registered; once is enough.
func (f *flights) remove(fl *flight) {
	sh := f.shard(fl.credential)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if fl.due >= 0 {
		heap.Remove(&sh.due, int(fl.due)) // the timer may fire for nothing: expire finds nothing due
	}
	switch {
	case fl.prev != nil:
		fl.prev.next = fl.next
	case fl.next != nil:
		sh.heads[fl.credential] = fl.next
	default:
		delete(sh.heads, fl.credential)
	}
	if fl.next != nil {
		fl.next.prev = fl.prev
	}
	fl.prev, fl.next = nil, nil
}

// changed cancels the flights of each credential in rows that no longer
// authenticates by dead. It runs on the committing writer's goroutine; a
// row's own fields cannot tell a deletion (a deleted row comes as it
// was), so dead reads the store, and only for credentials with flights.
func (f *flights) changed(rows []*memdb.Credential, dead func(id string) bool) {
	for _, c := range rows {
		sh := f.shard(c.ID)
		sh.mu.Lock()
		head := sh.heads[c.ID]
		sh.mu.Unlock()
		if head == nil || !dead(c.ID) {
			continue
		}
		var cancels []context.CancelCauseFunc
		sh.mu.Lock()
		for fl := sh.heads[c.ID]; fl != nil; fl = fl.next {
			cancels = append(cancels, fl.cancel)
		}
		sh.mu.Unlock()
		for _, cancel := range cancels {
			cancel(errCredentialDead)
		}
	}
}

// cancelAll cancels every flight with cause: the endpoint is closing.
func (f *flights) cancelAll(cause error) {
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		for _, fl := range sh.heads {
			for ; fl != nil; fl = fl.next {
				fl.cancel(cause)
			}
		}
		sh.mu.Unlock()
	}
}

// count is how many flights are registered (tests).
func (f *flights) count() int {
	n := 0
	for i := range f.shards {
		sh := &f.shards[i]
		sh.mu.Lock()
		for _, fl := range sh.heads {
			for ; fl != nil; fl = fl.next {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// dueHeap is a shard's flights with an expiry, earliest first; each knows
// its index (flight.due).
type dueHeap []*flight

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].expires < h[j].expires }
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].due, h[j].due = int32(i), int32(j)
}
func (h *dueHeap) Push(x any) {
	fl := x.(*flight)
	fl.due = int32(len(*h))
	*h = append(*h, fl)
}
func (h *dueHeap) Pop() any {
	old := *h
	fl := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	fl.due = -1
	return fl
}

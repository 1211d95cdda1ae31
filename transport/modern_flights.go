package transport

import (
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
	shards [flightShards]flightShard
}

const flightShards = 64

type flightShard struct {
	mu    sync.Mutex
	heads map[string]*flight
}

// flight is one call in flight: its credential and how to cancel it.
type flight struct {
	credential string
	cancel     context.CancelCauseFunc
	prev, next *flight
}

func newFlights() *flights {
	f := &flights{seed: maphash.MakeSeed()}
	for i := range f.shards {
		f.shards[i].heads = map[string]*flight{}
	}
	return f
}

func (f *flights) shard(credential string) *flightShard {
	return &f.shards[maphash.String(f.seed, credential)%flightShards]
}

// add registers fl, whose credential and cancel are set.
func (f *flights) add(fl *flight) {
	sh := f.shard(fl.credential)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if head := sh.heads[fl.credential]; head != nil {
		fl.next, head.prev = head, fl
	}
	sh.heads[fl.credential] = fl
}

// remove unregisters fl, which add registered; once is enough.
func (f *flights) remove(fl *flight) {
	sh := f.shard(fl.credential)
	sh.mu.Lock()
	defer sh.mu.Unlock()
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

// expiryWatch cancels a call when its credential expires, on the
// endpoint's clock: the timer waits the distance on that clock (a test's
// may run behind real time) and, fired before the clock says so, waits
// again, as the liveness monitor does.
type expiryWatch struct {
	mu     sync.Mutex
	t      *time.Timer
	at     time.Time
	now    func() time.Time
	cancel context.CancelCauseFunc
}

func (e *expiryWatch) start(at time.Time, now func() time.Time, cancel context.CancelCauseFunc) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.at, e.now, e.cancel = at, now, cancel
	e.t = time.AfterFunc(max(at.Sub(now()), time.Millisecond), e.fire)
}

func (e *expiryWatch) fire() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d := e.at.Sub(e.now()); d > 0 {
		e.t.Reset(max(d, time.Millisecond))
		return
	}
	e.cancel(errCredentialDead)
}

func (e *expiryWatch) stop() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.t.Stop()
}

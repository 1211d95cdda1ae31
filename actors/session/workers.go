package session

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// Workers is the session actors' dispatcher: it runs a mailbox's turn on
// one of a few long-lived goroutines when one is idle, and on a goroutine
// of its own otherwise, as protoactor's default dispatcher always does. A
// session's turns are few and short, but Start's and the end's each write
// the ownership record, a go-memdb transaction whose radix-tree insert
// recurses: on a new goroutine that turn grew and copied the stack every
// time (a tenth of the server's CPU under session churn, in
// `bench/profile.sh` with MODE=churn), while a worker's stack is grown
// once. Schedule never waits: with no idle worker, and when there are
// already as many workers as asked, the turn gets a goroutine of its own.
// So a Receive that blocked would hold one worker, never the dispatch.
//
// Workers start on demand, up to their number, and stop at Close; a turn
// scheduled after Close runs on a goroutine of its own.
type Workers struct {
	work       chan func() // unbuffered: a send succeeds only into an idle worker's hands
	done       chan struct{}
	throughput int

	mu      sync.Mutex
	started int  // workers started, at most max
	max     int  // how many workers at most
	closed  bool // Close ran: no worker starts again
}

var _ actor.Dispatcher = (*Workers)(nil)

// NewWorkers returns a dispatcher of at most n workers (at least 1) that
// runs each mailbox at most throughput messages per turn (protoactor's
// default dispatcher runs 300).
func NewWorkers(n, throughput int) *Workers {
	return &Workers{work: make(chan func()), done: make(chan struct{}), throughput: throughput, max: max(n, 1)}
}

// Schedule runs fn (a mailbox's turn) on an idle worker, a new worker, or
// a goroutine of its own, in that order of preference; it never blocks.
func (w *Workers) Schedule(fn func()) {
	select {
	case w.work <- fn:
		return
	default:
	}
	w.mu.Lock()
	if w.closed || w.started >= w.max {
		w.mu.Unlock()
		go fn()
		return
	}
	w.started++
	w.mu.Unlock()
	go w.worker(fn)
}

// Throughput implements actor.Dispatcher.
func (w *Workers) Throughput() int { return w.throughput }

func (w *Workers) worker(fn func()) {
	for {
		fn()
		select {
		case fn = <-w.work:
		case <-w.done:
			return
		}
	}
}

// Close stops each worker as soon as its turn ends, without waiting for
// them: a turn may itself close the endpoint (an OnEnd that does). Turns
// scheduled afterwards run on goroutines of their own.
func (w *Workers) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	close(w.done)
}

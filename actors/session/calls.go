package session

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Owner is what a session is bound to: the namespace computed from the
// token that initialized it (SPEC §2). A request naming the session is
// dispatched only if the namespace computed from its own token is equal.
type Owner struct {
	Namespace  string // "cred:<CredentialID>" or "client:<ClientID>"
	Credential string // credential that initialized the session
}

// Owns reports whether a request authenticated as namespace may reach a
// session owned by o. Foreign and unknown sessions are answered alike by
// the transport (404), so this is the only place the comparison is made.
func (o Owner) Owns(namespace string) bool {
	return o.Namespace != "" && o.Namespace == namespace
}

// Activity is shared between a session actor and the transport: the
// transport marks requests and streams, and registers the calls in flight,
// without a round trip to the actor; the actor reads it to decide idle
// eviction and, when the session ends, cancels the calls and closes it so
// no call starts afterwards. The zero value is ready.
//
// Calls are kept here rather than in the actor's mailbox because a call is
// the hot path: a registration is a map write under a mutex, where an ask
// would be two goroutine hops and a future.
type Activity struct {
	busy atomic.Int64 // requests in flight + open streams
	last atomic.Int64 // unix nanos of the last request start or end

	mu     sync.Mutex                         // guards the fields below
	calls  map[string]context.CancelCauseFunc // by request id key; nil until the first call
	closed bool                               // the session ended: no call may start
}

// Begin marks the start of a request or stream at now.
func (a *Activity) Begin(now time.Time) {
	a.busy.Add(1)
	a.last.Store(now.UnixNano())
}

// End marks its end at now.
func (a *Activity) End(now time.Time) {
	a.last.Store(now.UnixNano())
	a.busy.Add(-1)
}

// Busy reports whether a request or stream is open.
func (a *Activity) Busy() bool { return a.busy.Load() > 0 }

// Last returns the time of the last activity.
func (a *Activity) Last() time.Time { return time.Unix(0, a.last.Load()) }

// BeginCall registers a call in flight under id, the key of its JSON-RPC
// id (equal keys for equal decoded ids: the transport's to compute); cancel
// is called with ErrCancelled if the client cancels it, with ErrClosed if
// the session ends. It fails with ErrClosed once the session ended and
// with ErrDuplicateRequest for an id already in flight.
func (a *Activity) BeginCall(id string, cancel context.CancelCauseFunc) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return ErrClosed
	}
	if _, dup := a.calls[id]; dup {
		return ErrDuplicateRequest
	}
	if a.calls == nil {
		a.calls = map[string]context.CancelCauseFunc{} // most sessions idle: no map until a call
	}
	a.calls[id] = cancel
	return nil
}

// EndCall unregisters a finished call.
func (a *Activity) EndCall(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.calls, id)
}

// CancelCall cancels a call in flight (notifications/cancelled) with
// ErrCancelled. Unknown ids are ignored, as MCP asks.
func (a *Activity) CancelCall(id string) {
	a.mu.Lock()
	cancel := a.calls[id]
	a.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelled)
	}
}

// InFlight returns how many calls are in flight.
func (a *Activity) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// close cancels every call in flight and refuses new ones.
func (a *Activity) close() {
	a.mu.Lock()
	calls := a.calls
	a.calls, a.closed = nil, true
	a.mu.Unlock()
	for _, cancel := range calls {
		cancel(ErrClosed)
	}
}

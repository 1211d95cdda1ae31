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
// the endpoint (404), so this is the only place the comparison is made.
func (o Owner) Owns(namespace string) bool {
	return o.Namespace != "" && o.Namespace == namespace
}

// Calls is the state of one MCP session that the HTTP path shares with the
// session's actor, on purpose: the requests in flight (a count and the time
// of the last one), the table of tools/call in flight, and the cancel of
// the open standalone stream. The HTTP path marks requests, registers calls
// and its stream here without a round trip to the actor; the actor reads
// it to decide idle eviction and, when the session ends, cancels the calls
// and the stream and closes it, so that none starts afterwards. The zero
// value is ready.
//
// It is shared memory rather than messages because a call is the hot path:
// a registration is a map write under a mutex, where an ask would be two
// goroutine hops and a future.
type Calls struct {
	busy atomic.Int64 // requests in flight + open streams
	last atomic.Int64 // unix nanos of the last request start or end
	// logLevel is the session's logging/setLevel, as the endpoint ranks
	// levels; 0 until the client sets one. Beside mu, so that the two and
	// closed share 16 bytes (48 in all, not 56).
	logLevel atomic.Int32
	// initialized: the client sent notifications/initialized. Set by the
	// HTTP path, like logLevel, so that the notification costs the actor
	// no turn (it fits the padding after mu: Calls keeps its size).
	initialized atomic.Bool

	mu     sync.Mutex                         // guards the fields below
	closed bool                               // the session ended: no call or stream may start
	calls  map[string]context.CancelCauseFunc // by request id key; nil until the first call
	stream context.CancelFunc                 // ends the open standalone stream; nil: none open
}

// Begin marks the start of a request or stream at now.
func (a *Calls) Begin(now time.Time) {
	a.busy.Add(1)
	a.last.Store(now.UnixNano())
}

// End marks its end at now.
func (a *Calls) End(now time.Time) {
	a.last.Store(now.UnixNano())
	a.busy.Add(-1)
}

// SetLogLevel records the session's log level (logging/setLevel), ranked
// by the endpoint; 0 sends no log.
func (a *Calls) SetLogLevel(rank int32) { a.logLevel.Store(rank) }

// LogLevel returns the session's log level, 0 if none was set.
func (a *Calls) LogLevel() int32 { return a.logLevel.Load() }

// MarkInitialized records notifications/initialized.
func (a *Calls) MarkInitialized() { a.initialized.Store(true) }

// Initialized reports whether the client sent notifications/initialized.
func (a *Calls) Initialized() bool { return a.initialized.Load() }

// Busy reports whether a request or stream is open.
func (a *Calls) Busy() bool { return a.busy.Load() > 0 }

// Last returns the time of the last activity.
func (a *Calls) Last() time.Time { return time.Unix(0, a.last.Load()) }

// BeginCall registers a call in flight under id, the key of its JSON-RPC
// id (equal keys for equal decoded ids: the endpoint's to compute); cancel
// is called with ErrCancelled if the client cancels it, with ErrClosed if
// the session ends. It fails with ErrClosed once the session ended and
// with ErrDuplicateRequest for an id already in flight.
func (a *Calls) BeginCall(id string, cancel context.CancelCauseFunc) error {
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
func (a *Calls) EndCall(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.calls, id)
}

// CancelCall cancels a call in flight (notifications/cancelled) with
// ErrCancelled. Unknown ids are ignored, as MCP asks.
func (a *Calls) CancelCall(id string) {
	a.mu.Lock()
	cancel := a.calls[id]
	a.mu.Unlock()
	if cancel != nil {
		cancel(ErrCancelled)
	}
}

// InFlight returns how many calls are in flight.
func (a *Calls) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.calls)
}

// OpenStream registers the session's standalone stream, which cancel
// ends. It fails with ErrStreamBusy while one is open and with ErrClosed
// once the session ended. The stream calls EndStream when it is over.
func (a *Calls) OpenStream(cancel context.CancelFunc) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.closed:
		return ErrClosed
	case a.stream != nil:
		return ErrStreamBusy
	}
	a.stream = cancel
	return nil
}

// EndStream unregisters the standalone stream: another may open.
func (a *Calls) EndStream() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.stream = nil
}

// StreamOpen reports whether the standalone stream is open.
func (a *Calls) StreamOpen() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stream != nil
}

// idle reports whether the session has been idle for d at now: no request
// in flight, no stream open, no activity since now-d. It is the one place
// idleness is judged: the Table's sweep filter and the actor's decision
// both ask it.
func (a *Calls) idle(now time.Time, d time.Duration) bool {
	return !a.Busy() && !a.StreamOpen() && now.Sub(a.Last()) >= d
}

// closeStream ends the standalone stream, if one is open; it stays
// registered until it is over (EndStream).
func (a *Calls) closeStream() {
	a.mu.Lock()
	stream := a.stream
	a.mu.Unlock()
	if stream != nil {
		stream()
	}
}

// close cancels every call in flight and the stream, and refuses new ones.
func (a *Calls) close() {
	a.mu.Lock()
	calls, stream := a.calls, a.stream
	a.calls, a.closed = nil, true
	a.mu.Unlock()
	for _, cancel := range calls {
		cancel(ErrClosed)
	}
	if stream != nil {
		stream()
	}
}

package session

import (
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
// transport marks requests and streams without a round trip to the actor,
// and the actor reads it to decide idle eviction. The zero value is ready.
type Activity struct {
	busy atomic.Int64 // requests in flight + open streams
	last atomic.Int64 // unix nanos of the last request start or end
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

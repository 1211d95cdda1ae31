// Package deadline is the one deadline a request carries from the module
// root through every actor it reaches: plain data (a time), set once by the
// root's call helper from the caller's context and the operation's budget,
// and read by every actor the request touches, so that no layer sums
// timeouts of its own and no actor keeps working for an asker that gave up.
//
// An actor derives the timeout of every future it waits on from the
// deadline ([Left]) and drops work that would start something — an open, a
// mint, a driver call — once the deadline has passed ([Passed]). Work that
// revokes or tears down is never dropped: it is safe whenever it lands.
package deadline

import "time"

// Request is embedded in every request message between actors.
type Request struct {
	// Deadline is when the asker stops waiting for the answer. Zero: the
	// receiver's default budget (tests send such requests; the runtime
	// always sets one).
	Deadline time.Time
}

// SetDeadline sets the request's deadline; the root's call helper uses it.
func (r *Request) SetDeadline(t time.Time) { r.Deadline = t }

// Or returns the request's deadline, or now + fallback when it has none.
func (r Request) Or(fallback time.Duration) time.Time {
	if r.Deadline.IsZero() {
		return time.Now().Add(fallback)
	}
	return r.Deadline
}

// At returns a Request with deadline t, for a message built by an actor
// on behalf of the request it serves.
func At(t time.Time) Request { return Request{Deadline: t} }

// Left is the time left until t, for a future's timeout: never negative
// (protoactor's futures wait forever on a negative timeout), and at least
// a millisecond, so that a future armed at the deadline still fires.
func Left(t time.Time) time.Duration {
	return max(time.Until(t), time.Millisecond)
}

// Passed reports whether t has come: the asker stopped waiting.
func Passed(t time.Time) bool { return !time.Now().Before(t) }

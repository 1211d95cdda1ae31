package session

import "errors"

// ErrClosed is the answer of a session that is ending or has ended; the
// endpoint answers 404, as for an unknown session.
var ErrClosed = errors.New("session closed")

// ErrStreamBusy is the answer of Calls.OpenStream while the session's
// standalone stream is open (HTTP 409).
var ErrStreamBusy = errors.New("session stream already open")

// ErrDuplicateRequest is the answer to BeginCall for a request id already in
// flight on the session.
var ErrDuplicateRequest = errors.New("request id already in flight")

// ErrCancelled is the cause a call's context is cancelled with when the
// client cancels it (CancelCall); a session that ends cancels its calls
// with ErrClosed.
var ErrCancelled = errors.New("request cancelled by the client")

// End reasons.
const (
	ReasonDeleted  = "delete"
	ReasonIdle     = "idle"
	ReasonCap      = "cap"
	ReasonRevoked  = "revoke"
	ReasonShutdown = "shutdown"
)

// Message is the session actor's protocol. Every message is plain data:
// the state the HTTP path shares with the actor is found in the Table, by
// id, never carried in a message.
type Message interface{ sessionMessage() }

// Start gives a new session actor its parameters: its id, by which it finds
// its Entry in the Table, and what its ownership record says. The spawner
// sends it first, right after spawning, as a request: it is answered by
// *Started once the ownership record is written (a Start sent without a
// sender is not answered).
type Start struct {
	ID              string
	ProtocolVersion string
	ClientName      string
	ClientVersion   string
}

// Started answers Start. Ended: the session could not start (no Table
// entry) or had already ended.
type Started struct{ Ended bool }

// IdleCheck asks the session to end if it has been idle for IdleTimeout:
// nothing in flight, no stream, no activity. The endpoint sends it to the
// sessions its periodic sweep finds idle.
type IdleCheck struct{}

// CloseStream ends the standalone stream, if one is open; calls in flight
// go on (graceful shutdown).
type CloseStream struct{}

// Delete ends the session. Answered by *Deleted once the ownership record
// is gone and every request in flight was cancelled.
type Delete struct{ Reason string }

// Deleted answers Delete. AlreadyEnded: the session had ended before it.
type Deleted struct{ AlreadyEnded bool }

// ownerDead is sent by the watcher when the owner namespace has no live
// credential left.
type ownerDead struct{}

func (*Start) sessionMessage()       {}
func (*Started) sessionMessage()     {}
func (*IdleCheck) sessionMessage()   {}
func (*CloseStream) sessionMessage() {}
func (*Delete) sessionMessage()      {}
func (*ownerDead) sessionMessage()   {}

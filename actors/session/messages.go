package session

import (
	"context"
	"errors"
	"time"
)

// ErrClosed is the answer of a session that is ending or has ended; the
// transport answers 404, as for an unknown session.
var ErrClosed = errors.New("session closed")

// ErrStreamBusy is the answer to OpenStream while the session's standalone
// stream is open (HTTP 409).
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

// Message is the session actor's protocol.
type Message interface{ sessionMessage() }

// Start gives a new session actor its parameters. The spawner sends it
// first, right after spawning; it is not answered (ask GetInfo to wait for
// the ownership record).
type Start struct {
	ID              string
	Owner           Owner
	ProtocolVersion string
	ClientName      string
	ClientVersion   string
	// Activity is shared with the transport, which marks requests and
	// streams on it without a round trip.
	Activity *Activity
}

// IdleCheck asks the session to end if it has been idle for IdleTimeout:
// nothing in flight, no stream, no activity. The transport sends it to the
// sessions its periodic sweep finds idle.
type IdleCheck struct{}

// OpenStream registers the standalone SSE stream; Close ends it. Answered
// by *StreamOpened.
type OpenStream struct{ Close context.CancelFunc }

// StreamOpened answers OpenStream.
type StreamOpened struct{ Err error }

// CloseStream ends the standalone stream, if one is open; calls in flight
// go on (graceful shutdown).
type CloseStream struct{}

// StreamClosed says the standalone stream ended.
type StreamClosed struct{}

// Initialized records notifications/initialized.
type Initialized struct{}

// Delete ends the session. Answered by *Deleted once the ownership record
// is gone and every request in flight was cancelled.
type Delete struct{ Reason string }

// Deleted answers Delete.
type Deleted struct{ Err error }

// GetInfo asks for the session's state. Answered by *Info.
type GetInfo struct{}

// Info answers GetInfo.
type Info struct {
	ID              string
	Owner           Owner
	ProtocolVersion string
	Initialized     bool
	InFlight        int
	StreamOpen      bool
	Created         time.Time
	LastActive      time.Time
	Err             error
}

// ownerDead is sent by the watcher when the owner namespace has no live
// credential left.
type ownerDead struct{}

func (*Start) sessionMessage()        {}
func (*IdleCheck) sessionMessage()    {}
func (*OpenStream) sessionMessage()   {}
func (*StreamClosed) sessionMessage() {}
func (*CloseStream) sessionMessage()  {}
func (*Initialized) sessionMessage()  {}
func (*Delete) sessionMessage()       {}
func (*GetInfo) sessionMessage()      {}

package provider

import (
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// Errors returned in the provider actor's replies, defined once in
// internal/fault.
var (
	// ErrUnknownSession is returned for a provider session id that is not
	// open on this instance.
	ErrUnknownSession = fault.ErrUnknownProviderSession
	// ErrExclusive is returned when a thread is attached to an exclusive
	// session that already serves another thread.
	ErrExclusive = fault.ErrExclusiveSession
	// ErrStopping is returned once the instance is shutting down.
	ErrStopping = fault.ErrInstanceStopping
)

// Close reasons, in SessionClosed events and memdb.ProviderSession.CloseReason.
const (
	ReasonReleased = "released" // the host released it
	ReasonDied     = "died"     // the driver reported that it ended
	ReasonAborted  = "aborted"  // its open was abandoned by the thread
	ReasonShutdown = "shutdown" // the runtime is closing
	ReasonIdle     = "idle"     // no turn on its threads for the idle-release time
)

// Message is the provider actor's protocol.
type Message interface{ providerMessage() }

// OpenSession asks for a provider session serving b.Thread with b's
// credential: a new session, or, for a multi-thread driver, the instance's
// open session with the thread attached. Answered by *OpenSessionResult.
type OpenSession struct {
	// SessionID is the id a new session gets, chosen by the requester so it
	// can abort an open whose answer it gave up on. Empty: the actor picks.
	SessionID string
	Binding   Binding
}

// OpenSessionResult answers OpenSession.
type OpenSessionResult struct {
	SessionID string
	Err       error
}

// AttachThread binds a thread to an open session: a re-attach after a plain
// detach, or a re-bind with a new credential after a rotation (Replaces
// names the credential it supersedes). A re-bind of a thread the session no
// longer serves (a detach overtook it) does nothing. Answered by
// *AttachThreadResult.
type AttachThread struct {
	SessionID string
	Binding   Binding
	Replaces  string
}

// AttachThreadResult answers AttachThread.
type AttachThreadResult struct {
	Err error
}

// DetachThread unbinds a thread from every open session of the instance.
// Credentials stay recorded (handoff). Answered by *DetachThreadResult.
type DetachThread struct {
	Thread string
}

// DetachThreadResult answers DetachThread.
type DetachThreadResult struct {
	Sessions []string // sessions the thread was detached from
}

// CloseSession ends a provider session. The reply carries the record as it
// was at close, so the caller can revoke what it held. Answered by
// *CloseSessionResult.
type CloseSession struct {
	SessionID string
	Reason    string
}

// CloseSessionResult answers CloseSession, once the driver's Close
// returned. Err is an unknown session, or the failure of Config.Release to
// revoke what the session held.
type CloseSessionResult struct {
	Session *memdb.ProviderSession
	Err     error
}

// CloseAll ends every session of the instance (shutdown). Answered by
// *CloseAllResult.
type CloseAll struct {
	Reason string
}

// CloseAllResult answers CloseAll.
type CloseAllResult struct {
	Sessions []*memdb.ProviderSession
}

// GetSessions asks for the instance's open sessions. Answered by *Sessions.
// Mailboxes are FIFO per sender, so the answer also means every earlier
// message from the same sender was handled.
type GetSessions struct{}

// Sessions answers GetSessions.
type Sessions struct {
	Sessions []*memdb.ProviderSession
}

// ReleaseIdle asks the instance to release, now, every session that has been
// idle for at least the idle-release time (see Config.IdleRelease). The
// instance also does this on its own timer. Answered by *ReleaseIdleResult.
type ReleaseIdle struct{}

// ReleaseIdleResult answers ReleaseIdle, once the driver sessions are
// closed, with the records of the sessions it closed, as they were at
// close. Err joins the failures of Config.Release for them.
type ReleaseIdleResult struct {
	Sessions []*memdb.ProviderSession
	Err      error
}

// Event is what an instance actor publishes on the actor system's event
// stream: *SessionOpened, *ThreadAttached, *ThreadDetached and
// *SessionClosed. Hosts subscribe to watch their agents.
type Event interface{ providerEvent() }

// SessionOpened: the driver started a session (its Open returned).
type SessionOpened struct {
	Session *memdb.ProviderSession
}

// ThreadAttached: a thread was bound to an open session (a multi-thread
// attach, a re-attach after a detach, or a re-bind after a rotation).
type ThreadAttached struct {
	Instance, SessionID, Thread, CredentialID string
}

// ThreadDetached: a thread was unbound from a session; its credential stays
// live.
type ThreadDetached struct {
	Instance, SessionID, Thread string
}

// SessionClosed: a provider session ended, for whatever reason: its record
// is removed and its credentials are being revoked (see Config.Release);
// the driver's Close follows.
type SessionClosed struct {
	Session *memdb.ProviderSession
	Reason  string
	Err     error // the driver's error for ReasonDied, else nil
}

func (*SessionOpened) providerEvent()  {}
func (*ThreadAttached) providerEvent() {}
func (*ThreadDetached) providerEvent() {}
func (*SessionClosed) providerEvent()  {}

func (*OpenSession) providerMessage()  {}
func (*AttachThread) providerMessage() {}
func (*DetachThread) providerMessage() {}
func (*CloseSession) providerMessage() {}
func (*CloseAll) providerMessage()     {}
func (*GetSessions) providerMessage()  {}
func (*ReleaseIdle) providerMessage()  {}

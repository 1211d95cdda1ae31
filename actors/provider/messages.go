package provider

import (
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// Close reasons, in SessionClosed events and memdb.ProviderSession.CloseReason.
const (
	ReasonReleased = "released" // the host released it
	ReasonDied     = "died"     // the driver reported that it ended
	ReasonAborted  = "aborted"  // its open was abandoned by the thread
	ReasonShutdown = "shutdown" // the runtime is closing
	ReasonIdle     = "idle"     // no turn on its threads for the idle-release time
)

// Message is the provider instance actor's protocol. Every request carries
// its deadline (deadline.Request) and is answered by one reply whose
// outcome is a fault.Fault.
type Message interface{ providerMessage() }

// Outcome is how an AcquireSession was served.
type Outcome uint8

const (
	// NeedsCredential: no open session can serve the thread with the
	// credential asked about (there is none, or none holds it); the thread
	// mints one and sends OpenSession.
	NeedsCredential Outcome = iota
	// Reused: a session holding the credential serves the thread already.
	Reused
	// Attached: a session holding the credential took the thread back (it
	// was plainly detached from it, or the session serves several
	// threads); the driver's Attach got a driver.Binding without Authorization.
	Attached
)

// AcquireSession asks for an open session serving driver.Binding.Thread with the
// pair's live credential driver.Binding.CredentialID ("" when the pair has none).
// driver.Binding.Authorization is empty: the runtime keeps no tokens. The
// instance, the owner of provider_sessions, decides and retries its own
// races. Answered by *SessionAcquired.
type AcquireSession struct {
	deadline.Request
	Binding driver.Binding
}

// SessionAcquired answers AcquireSession: SessionID is the session that
// serves the thread, unless Outcome is NeedsCredential.
type SessionAcquired struct {
	SessionID string
	Outcome   Outcome
	Fault     fault.Fault
}

// OpenSession asks for an open session serving driver.Binding.Thread with
// driver.Binding's newly minted credential. The instance decides how: a session
// the thread is attached to is re-bound to it; else, for a multi-thread
// driver, its open session takes the thread; else a new session is opened.
// Answered by *OpenSessionResult.
type OpenSession struct {
	deadline.Request
	// SessionID is the id a new session gets, chosen by the requester so it
	// can abort an open whose answer it gave up on. Empty: the actor picks.
	SessionID string
	Binding   driver.Binding
}

// OpenSessionResult answers OpenSession. New reports that a new session
// was opened (SessionID is then the one proposed); otherwise the thread was
// bound to a session that was already open. (Not "SessionOpened": that is
// the event.)
type OpenSessionResult struct {
	SessionID string
	New       bool
	Fault     fault.Fault
}

// RebindThread gives every open session that serves driver.Binding.Thread the
// pair's new credential (a rotation: driver.Binding.Authorization is the new
// token), in place of the credentials in Replaces. Answered by
// *ThreadRebound.
type RebindThread struct {
	deadline.Request
	Binding  driver.Binding
	Replaces []string
}

// ThreadRebound answers RebindThread with the sessions re-bound; Fault is
// the first driver failure, if any (the rotation stands regardless).
type ThreadRebound struct {
	Sessions []string
	Fault    fault.Fault
}

// DetachThread unbinds a thread from every open session of the instance.
// Credentials stay recorded (handoff). Answered by *DetachThreadResult.
type DetachThread struct {
	deadline.Request
	Thread string
}

// DetachThreadResult answers DetachThread.
type DetachThreadResult struct {
	Sessions []string // sessions the thread was detached from
	Fault    fault.Fault
}

// StartTurn asks the open session serving Turn.Thread to send the turn to
// its agent (the driver's Turner). Answered by *TurnStarted once the agent
// accepted it; its end is published as *TurnEnded.
type StartTurn struct {
	deadline.Request
	Turn driver.Turn
}

// TurnStarted answers StartTurn with the session that took the turn.
// Fault: no open session serves the thread (fault.ErrNoProviderSession),
// its driver takes no prompts (fault.ErrTurnsUnsupported), or the agent
// refused (fault.ErrTurnRefused).
type TurnStarted struct {
	SessionID string
	Fault     fault.Fault
}

// InterruptTurn asks the session serving Thread to stop its agent's turn
// Turn (the host ended the run). Answered by *TurnInterrupted once the
// driver took the request; a session whose driver takes no prompts has
// nothing to stop.
type InterruptTurn struct {
	deadline.Request
	Thread, Turn string
}

// TurnInterrupted answers InterruptTurn with the sessions asked to stop.
type TurnInterrupted struct {
	Sessions []string
	Fault    fault.Fault
}

// CloseSession ends a provider session. Answered by *CloseSessionResult.
type CloseSession struct {
	deadline.Request
	SessionID string
	Reason    string
}

// CloseSessionResult answers CloseSession, once the driver's Close
// returned, with the record as it was at close. Fault is an unknown
// session, or a failure to revoke what the session held.
type CloseSessionResult struct {
	Session memdb.ProviderSession
	Fault   fault.Fault
}

// CloseAll ends every session of the instance (shutdown). Answered by
// *CloseAllResult, once every session's driver Close returned.
type CloseAll struct {
	deadline.Request
	Reason string
}

// CloseAllResult answers CloseAll with the records of the sessions closed.
type CloseAllResult struct {
	Sessions []memdb.ProviderSession
}

// GetSessions asks for the instance's open sessions. Answered by *Sessions.
// Mailboxes are FIFO per sender, so the answer also means every earlier
// message from the same sender was handled.
type GetSessions struct{ deadline.Request }

// Sessions answers GetSessions.
type Sessions struct {
	Sessions []memdb.ProviderSession
}

// ReleaseIdle asks the instance to release, now, every session that has been
// idle for at least the idle-release time (see Config.IdleRelease). The
// instance also does this on its own timer. Answered by *ReleaseIdleResult.
type ReleaseIdle struct{ deadline.Request }

// ReleaseIdleResult answers ReleaseIdle, once the driver sessions are
// closed, with the records of the sessions it closed, as they were at
// close. Fault is a failure to revoke what one of them held.
type ReleaseIdleResult struct {
	Sessions []memdb.ProviderSession
	Fault    fault.Fault
}

// ReleaseCredentials is what an instance actor sends the actor of a thread
// (addressed by names.Thread) when a session it served is released, idled
// or died: revoke Credentials, the session's credentials of that thread
// that no other open session of the instance holds. It is this package's
// message although a thread actor handles it, because arrows point one way
// (thread imports provider). Answered by *CredentialsReleased.
type ReleaseCredentials struct {
	deadline.Request
	SessionID   string
	Credentials []string
}

// CredentialsReleased answers ReleaseCredentials with the ids it revoked
// (an id already revoked or gone is skipped).
type CredentialsReleased struct {
	Revoked []string
	Fault   fault.Fault
}

// Event is what the provider actors publish on the actor system's event
// stream: *SessionOpened, *ThreadAttached, *ThreadDetached and
// *SessionClosed from an instance actor; *AgentStatus, *AgentEvent and
// *TurnEnded from what a session's driver reported. Hosts subscribe to
// watch their agents.
type Event interface{ providerEvent() }

// SessionOpened: the driver started a session (its Open returned).
type SessionOpened struct {
	Session memdb.ProviderSession
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

// SessionClosed: a provider session ended, for whatever reason, and is
// gone: its record was removed, the credentials it alone held were revoked
// (for a release, an idle release and a death), and the driver's Close
// returned.
type SessionClosed struct {
	Session memdb.ProviderSession
	Reason  string
	Cause   string // the driver's error for ReasonDied, else ""
}

// AgentStatus: a session's driver reported the state of its agent's MCP
// connection for a thread.
type AgentStatus struct {
	Instance, SessionID string
	Status              driver.Status
}

// AgentEvent: a session's driver reported what its agent did during a turn.
type AgentEvent struct {
	Instance, SessionID string
	Event               driver.Event
}

// TurnEnded: a session's driver reported that its agent's turn ended. The
// runtime ends the run of that id.
type TurnEnded struct {
	Instance, SessionID string
	TurnEnd             driver.TurnEnd
}

// Err returns the reply's fault as an error (nil on success).
func (r *TurnStarted) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *TurnInterrupted) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *SessionAcquired) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *OpenSessionResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *ThreadRebound) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *DetachThreadResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *CloseSessionResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *ReleaseIdleResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *CredentialsReleased) Err() error { return r.Fault.Err() }

// Err is nil: CloseAll cannot fail.
func (r *CloseAllResult) Err() error { return nil }

// Err is nil: GetSessions cannot fail.
func (r *Sessions) Err() error { return nil }

func (*SessionOpened) providerEvent()  {}
func (*ThreadAttached) providerEvent() {}
func (*ThreadDetached) providerEvent() {}
func (*SessionClosed) providerEvent()  {}
func (*AgentStatus) providerEvent()    {}
func (*AgentEvent) providerEvent()     {}
func (*TurnEnded) providerEvent()      {}

func (*AcquireSession) providerMessage()     {}
func (*OpenSession) providerMessage()        {}
func (*RebindThread) providerMessage()       {}
func (*DetachThread) providerMessage()       {}
func (*CloseSession) providerMessage()       {}
func (*CloseAll) providerMessage()           {}
func (*GetSessions) providerMessage()        {}
func (*ReleaseIdle) providerMessage()        {}
func (*ReleaseCredentials) providerMessage() {}
func (*StartTurn) providerMessage()          {}
func (*InterruptTurn) providerMessage()      {}

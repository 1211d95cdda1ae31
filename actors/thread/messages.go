package thread

import (
	"time"

	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// Message is the thread actor's protocol. Every message is a request that
// carries its deadline (deadline.Request) and is answered by one reply,
// which carries its outcome as a fault.Fault; fail builds the reply that
// reports f, so that one answer — "this thread is gone" — fits every
// request without a list of them.
type Message interface {
	threadMessage()
	fail(f fault.Fault) any
}

// OpenProviderSession prepares the credential of (thread, Instance) and
// has the instance's actor open or attach a provider session with it, or
// returns the live session the pair already has. Answered by
// *OpenProviderSessionResult.
type OpenProviderSession struct {
	deadline.Request
	Instance string
}

// OpenProviderSessionResult answers OpenProviderSession.
type OpenProviderSessionResult struct {
	SessionID    string
	CredentialID string
	Endpoint     string
	// Authorization is "Bearer <token>" when this open minted the
	// credential, and empty otherwise: a token is shown once.
	Authorization string
	Capabilities  []string
	// Reused reports that no credential was minted.
	Reused bool
	Fault  fault.Fault
}

// SwitchProvider makes Instance the thread's current provider instance. An
// active run of the previous instance ends. No credential changes. Answered
// by *SwitchProviderResult.
type SwitchProvider struct {
	deadline.Request
	Instance string
}

// SwitchProviderResult answers SwitchProvider.
type SwitchProviderResult struct {
	Previous string
	EndedRun string // id of the run the switch ended, if any
	Fault    fault.Fault
}

// Rotate mints a new credential for (thread, Instance) and revokes the
// previous one. A provider session holding the previous one is re-bound to
// the new one. Answered by *RotateResult.
type Rotate struct {
	deadline.Request
	Instance string
}

// RotateResult answers Rotate.
type RotateResult struct {
	CredentialID  string
	Authorization string
	Fault         fault.Fault
}

// StartRun starts a run owned by Instance, which must be the current
// instance, and refreshes the liveness of the thread's credentials.
// Answered by *StartRunResult.
type StartRun struct {
	deadline.Request
	Instance string
}

// StartRunResult answers StartRun.
type StartRunResult struct {
	RunID string
	Fault fault.Fault
}

// EndRun ends the active run (RunID "" means whichever is active).
// Answered by *EndRunResult.
type EndRun struct {
	deadline.Request
	RunID string
}

// EndRunResult answers EndRun.
type EndRunResult struct {
	RunID string
	Fault fault.Fault
}

// Detach unbinds the thread from its provider sessions without revoking
// anything (a handoff). Answered by *DetachResult.
type Detach struct{ deadline.Request }

// DetachResult answers Detach.
type DetachResult struct {
	Sessions []string
	Fault    fault.Fault
}

// Archive revokes every credential of the thread and makes it read-only.
// Answered by *ArchiveResult.
type Archive struct{ deadline.Request }

// ArchiveResult answers Archive.
type ArchiveResult struct {
	Revoked int
	Fault   fault.Fault
}

// Delete revokes every credential of the thread, removes it, and stops the
// actor. Answered by *DeleteResult.
type Delete struct{ deadline.Request }

// DeleteResult answers Delete.
type DeleteResult struct {
	Revoked int
	Fault   fault.Fault
}

// Touch refreshes the liveness of the thread's live credentials (a turn
// started). Answered by *TouchResult.
type Touch struct{ deadline.Request }

// TouchResult answers Touch.
type TouchResult struct {
	Refreshed int
	Fault     fault.Fault
}

// Mutate checks that Caller is a live caller and applies Effect to the
// thread, in one store transaction: nothing that ends the caller's run can
// land between the check and the effect. Answered by *MutateResult.
type Mutate struct {
	deadline.Request
	Caller principal.Principal
	Effect Effect
}

// MutateResult answers Mutate.
type MutateResult struct {
	Value any // what the effect returned
	Fault fault.Fault
}

// Effect is the thread-state change of a mutation: a host's own, or
// AppendMessage. An effect is plain data — ids, values, nothing that points
// into the host's memory — since it travels in a message; what it may
// touch is what tx offers: the thread's record, the time and the verified
// caller. Apply runs inside the thread actor's turn and the store's write
// transaction: it must be quick and must not block. Its value is the
// mutation's answer (plain data too); an error rolls the mutation back.
type Effect interface {
	Apply(tx Txn) (any, error)
}

// Txn is what an Effect may touch of the thread actor's transaction.
type Txn interface {
	// Thread is the thread's record, to change in place; it is written back
	// if Apply returns no error.
	Thread() *memdb.Thread
	// Now is the transaction's time.
	Now() time.Time
	// Caller is the verified caller, found live in this transaction.
	Caller() principal.Principal
}

// AppendMessage is the effect of thread_post: it appends a message to the
// thread's bounded log. Its value is the stored memdb.Message.
type AppendMessage struct {
	Text string
}

// RevokeAll revokes every live credential of the thread with Reason, one
// of internal/credential's (shutdown). Answered by *RevokeAllResult.
type RevokeAll struct {
	deadline.Request
	Reason string
}

// RevokeAllResult answers RevokeAll.
type RevokeAllResult struct {
	Revoked int
	Fault   fault.Fault
}

// GetThread asks for the thread's record. Answered by *ThreadInfo. Because
// mailboxes are FIFO per sender, the answer also means every earlier
// message from the same sender was handled.
type GetThread struct{ deadline.Request }

// ThreadInfo answers GetThread.
type ThreadInfo struct {
	Thread memdb.Thread
	Fault  fault.Fault
}

// Err returns the reply's fault as an error (nil on success).
func (r *OpenProviderSessionResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *SwitchProviderResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *RotateResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *StartRunResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *EndRunResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *DetachResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *ArchiveResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *DeleteResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *TouchResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *MutateResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *RevokeAllResult) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *ThreadInfo) Err() error { return r.Fault.Err() }

func (*OpenProviderSession) threadMessage() {}
func (*SwitchProvider) threadMessage()      {}
func (*Rotate) threadMessage()              {}
func (*StartRun) threadMessage()            {}
func (*EndRun) threadMessage()              {}
func (*Detach) threadMessage()              {}
func (*Archive) threadMessage()             {}
func (*Delete) threadMessage()              {}
func (*Touch) threadMessage()               {}
func (*Mutate) threadMessage()              {}
func (*RevokeAll) threadMessage()           {}
func (*GetThread) threadMessage()           {}

func (*OpenProviderSession) fail(f fault.Fault) any { return &OpenProviderSessionResult{Fault: f} }
func (*SwitchProvider) fail(f fault.Fault) any      { return &SwitchProviderResult{Fault: f} }
func (*Rotate) fail(f fault.Fault) any              { return &RotateResult{Fault: f} }
func (*StartRun) fail(f fault.Fault) any            { return &StartRunResult{Fault: f} }
func (*EndRun) fail(f fault.Fault) any              { return &EndRunResult{Fault: f} }
func (*Detach) fail(f fault.Fault) any              { return &DetachResult{Fault: f} }
func (*Archive) fail(f fault.Fault) any             { return &ArchiveResult{Fault: f} }
func (*Delete) fail(f fault.Fault) any              { return &DeleteResult{Fault: f} }
func (*Touch) fail(f fault.Fault) any               { return &TouchResult{Fault: f} }
func (*Mutate) fail(f fault.Fault) any              { return &MutateResult{Fault: f} }
func (*RevokeAll) fail(f fault.Fault) any           { return &RevokeAllResult{Fault: f} }
func (*GetThread) fail(f fault.Fault) any           { return &ThreadInfo{Fault: f} }

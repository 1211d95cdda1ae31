package thread

import (
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// Errors carried by the thread actor's replies, defined once in
// internal/fault. Each says when it is returned; callers branch on them
// with errors.Is.
var (
	// ErrNotFound: the thread does not exist (never created, or deleted).
	ErrNotFound = fault.ErrUnknownThread
	// ErrArchived: the thread is archived; it can be read, not changed.
	ErrArchived = fault.ErrArchivedThread
	// ErrUnknownInstance: the provider instance is not registered.
	ErrUnknownInstance = fault.ErrUnknownInstance
	// ErrNotCurrent: a run was started for an instance that is not the
	// thread's current one.
	ErrNotCurrent = fault.ErrNotCurrentInstance
	// ErrRunActive: a run was started while another is active.
	ErrRunActive = fault.ErrRunActive
	// ErrNoRun: the thread has no active run (or not the one named).
	ErrNoRun = fault.ErrNoRun
	// ErrBusy: a provider session for the same (thread, instance) is being
	// opened; retry once it has.
	ErrBusy = fault.ErrBusy
	// ErrNotLive: the caller is not a live caller of the thread: its
	// credential is not live, or its instance does not own the thread's
	// active run (SPEC §4, code parent_not_active).
	ErrNotLive = fault.ErrNotLive
	// ErrReadOnly: a read-only client grant attempted a mutation.
	ErrReadOnly = fault.ErrReadOnly
	// ErrCredentialRequired: the operation needs a provider credential with a
	// thread scope, and the caller has none (code thread_credential_required).
	ErrCredentialRequired = fault.ErrCredentialRequired
	// ErrInvalidMessage: an empty, non-UTF-8 or oversized message text.
	ErrInvalidMessage = fault.ErrInvalidMessage
)

// Message is the thread actor's protocol.
type Message interface{ threadMessage() }

// OpenProviderSession prepares the credential of (thread, Instance) and
// opens a provider session with it, or returns the live session the pair
// already has. Answered by *OpenProviderSessionResult.
type OpenProviderSession struct {
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
	Err    error
}

// ReleaseCredentials revokes the credentials a closed provider session
// recorded, except those another open provider session still holds.
// Answered by *ReleaseCredentialsResult.
type ReleaseCredentials struct {
	SessionID   string
	Credentials []string
}

// ReleaseCredentialsResult answers ReleaseCredentials.
type ReleaseCredentialsResult struct {
	Revoked []string
	Err     error
}

// SwitchProvider makes Instance the thread's current provider instance. An
// active run of the previous instance ends. No credential changes. Answered
// by *SwitchProviderResult.
type SwitchProvider struct {
	Instance string
}

// SwitchProviderResult answers SwitchProvider.
type SwitchProviderResult struct {
	Previous string
	EndedRun string // id of the run the switch ended, if any
	Err      error
}

// Rotate mints a new credential for (thread, Instance) and revokes the
// previous one. A provider session holding the previous one is re-bound to
// the new one. Answered by *RotateResult.
type Rotate struct {
	Instance string
}

// RotateResult answers Rotate.
type RotateResult struct {
	CredentialID  string
	Authorization string
	Err           error
}

// StartRun starts a run owned by Instance, which must be the current
// instance, and refreshes the liveness of the thread's credentials.
// Answered by *StartRunResult.
type StartRun struct {
	Instance string
}

// StartRunResult answers StartRun.
type StartRunResult struct {
	RunID string
	Err   error
}

// EndRun ends the active run (RunID "" means whichever is active).
// Answered by *EndRunResult.
type EndRun struct {
	RunID string
}

// EndRunResult answers EndRun.
type EndRunResult struct {
	RunID string
	Err   error
}

// Detach unbinds the thread from its provider sessions without revoking
// anything (a handoff). Answered by *DetachResult.
type Detach struct{}

// DetachResult answers Detach.
type DetachResult struct {
	Sessions []string
	Err      error
}

// Archive revokes every credential of the thread and makes it read-only.
// Answered by *ArchiveResult.
type Archive struct{}

// ArchiveResult answers Archive.
type ArchiveResult struct {
	Revoked int
	Err     error
}

// Delete revokes every credential of the thread, removes it, and stops the
// actor. Answered by *DeleteResult.
type Delete struct{}

// DeleteResult answers Delete.
type DeleteResult struct {
	Revoked int
	Err     error
}

// Touch refreshes the liveness of the thread's live credentials (a turn
// started). Answered by *TouchResult.
type Touch struct{}

// TouchResult answers Touch.
type TouchResult struct {
	Refreshed int
	Err       error
}

// Mutate checks that Caller is a live caller and applies Effect to the
// thread, in one store transaction: nothing that ends the caller's run can
// land between the check and the effect. Answered by *MutateResult.
type Mutate struct {
	Caller principal.Principal
	Effect Effect
}

// MutateResult answers Mutate.
type MutateResult struct {
	Value any // what the effect returned
	Err   error
}

// Effect is the thread-state change of a mutation. Apply runs inside the
// thread actor's turn and the store's write transaction: it must be quick
// and must not block. It changes t in place; t is written back if Apply
// returns nil.
type Effect interface {
	Apply(w *memdb.Writer, t *memdb.Thread, now time.Time, c principal.Principal) (any, error)
}

// AppendMessage is the effect of thread_post: it appends a message to the
// thread's bounded log. Its value is the stored memdb.Message.
type AppendMessage struct {
	Text string
}

// RevokeAll revokes every live credential of the thread with Reason, one
// of internal/credential's (shutdown).
// Answered by *RevokeAllResult.
type RevokeAll struct {
	Reason string
}

// RevokeAllResult answers RevokeAll.
type RevokeAllResult struct {
	Revoked int
	Err     error
}

// GetThread asks for the thread's record. Answered by *ThreadInfo. Because
// mailboxes are FIFO per sender, the answer also means every earlier
// message from the same sender was handled.
type GetThread struct{}

// ThreadInfo answers GetThread.
type ThreadInfo struct {
	Thread *memdb.Thread
	Err    error
}

func (*OpenProviderSession) threadMessage() {}
func (*ReleaseCredentials) threadMessage()  {}
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

// Package fault defines every failure the runtime's actors can answer, once:
// the exported sentinels callers branch on with errors.Is, and a Code for
// each, so that an actor's reply carries its outcome as plain data (a
// [Fault]: a code and a message) instead of a Go error value. A reply that
// crosses a mailbox — or, one day, a process boundary — stays serializable,
// and the receiver turns it back into an error with [Fault.Err] that still
// matches the sentinel.
//
// Every package uses these sentinels by their names here. The module root
// re-exports each once, in its errors.go (mcpruntime.ErrUnknownThread is
// [ErrUnknownThread]), and actors/provider the three a driver author
// returns (driver.ErrOpenFailed is [ErrProviderOpenFailed]).
package fault

import (
	"errors"
	"fmt"
)

// Code names one failure. The zero Code is success.
type Code uint16

// Codes, one per sentinel below. The numbers are part of the plain-data
// protocol between actors; never renumber one, add new ones at the end.
const (
	OK Code = iota
	Internal
	Closed
	Timeout
	Unavailable
	InvalidID
	InvalidArgument
	UnknownThread
	ThreadExists
	ArchivedThread
	TooManyThreads
	UnknownInstance
	InstanceExists
	UnknownDriver
	InvalidDriverConfig
	ProviderOpenFailed
	UnknownProviderSession
	ExclusiveSession
	InstanceStopping
	NotCurrentInstance
	RunActive
	NoRun
	Busy
	NotLive
	ReadOnly
	CredentialRequired
	UnknownClient
	InvalidMessage
	Unauthenticated
	InvalidGrant
	RefreshReused
	OAuthDisabled
	TooManyPairingCodes
	UnknownTool
	ResourceNotFound
	UnknownPrompt
	UnknownReference
	CapabilityNotDeclared
	InvalidCursor
	NoProviderSession
	TurnsUnsupported
	TurnRefused
	codeCount // keep last
)

// The sentinels. Each says when it is returned.
var (
	// ErrInternal is a broken invariant or a failed store write; the
	// message says which.
	ErrInternal = errors.New("internal error")
	// ErrClosed is returned by every method once the runtime is closed.
	ErrClosed = errors.New("runtime closed")
	// ErrTimeout is returned when an actor did not answer before the
	// request's deadline.
	ErrTimeout = errors.New("runtime: request timed out")
	// ErrUnavailable is returned when the actor that would answer is gone
	// (stopped between lookup and request) and no better answer is known.
	ErrUnavailable = errors.New("runtime: unavailable")
	// ErrInvalidID is returned for an empty, over-long or ill-formed id.
	ErrInvalidID = errors.New("invalid id")
	// ErrInvalidArgument is returned for a bad argument other than an id.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownThread: the thread does not exist (never created, or deleted).
	ErrUnknownThread = errors.New("unknown thread")
	// ErrThreadExists: CreateThread with an id in use.
	ErrThreadExists = errors.New("thread already exists")
	// ErrArchivedThread: the thread is archived; it can be read, not changed.
	ErrArchivedThread = errors.New("thread archived")
	// ErrTooManyThreads: CreateThread past the cap on threads.
	ErrTooManyThreads = errors.New("too many threads")
	// ErrUnknownInstance: the provider instance is not registered.
	ErrUnknownInstance = errors.New("unknown provider instance")
	// ErrInstanceExists: RegisterInstance with an id in use.
	ErrInstanceExists = errors.New("provider instance already exists")
	// ErrUnknownDriver: a driver kind that is not registered.
	ErrUnknownDriver = errors.New("unknown driver kind")
	// ErrInvalidDriverConfig: the driver refused the instance's config.
	ErrInvalidDriverConfig = errors.New("invalid driver config")
	// ErrProviderOpenFailed: the driver failed to open the provider session.
	ErrProviderOpenFailed = errors.New("provider session open failed")
	// ErrUnknownProviderSession: the provider session is not open.
	ErrUnknownProviderSession = errors.New("unknown provider session")
	// ErrExclusiveSession: a thread was attached to an exclusive provider
	// session that serves another thread.
	ErrExclusiveSession = errors.New("provider session serves another thread")
	// ErrInstanceStopping: the provider instance is shutting down.
	ErrInstanceStopping = errors.New("provider instance stopping")
	// ErrNotCurrentInstance: StartRun for an instance that is not the
	// thread's current one.
	ErrNotCurrentInstance = errors.New("instance is not the thread's current provider")
	// ErrRunActive: StartRun while a run is active.
	ErrRunActive = errors.New("thread already has an active run")
	// ErrNoRun: the thread has no active run (or not the one named).
	ErrNoRun = errors.New("thread has no such active run")
	// ErrNoProviderSession: a run with an input for a (thread, instance)
	// no open provider session serves.
	ErrNoProviderSession = errors.New("no open provider session serves the thread")
	// ErrTurnsUnsupported: a run with an input on an instance whose driver
	// takes no prompts (inproc, exec).
	ErrTurnsUnsupported = errors.New("the instance's driver takes no prompts")
	// ErrTurnRefused: the agent did not accept the turn; the message has
	// the agent's own words.
	ErrTurnRefused = errors.New("the agent refused the turn")
	// ErrBusy: a provider session for the same (thread, instance) is being
	// opened; retry once it has.
	ErrBusy = errors.New("provider session open in progress")
	// ErrNotLive: the caller does not own its thread's active run, or its
	// credential is no longer live (SPEC §4, parent_not_active).
	ErrNotLive = errors.New("caller does not own an active run")
	// ErrReadOnly: a read-only client grant attempted a mutation.
	ErrReadOnly = errors.New("read-only client grant")
	// ErrCredentialRequired: the operation needs a provider credential with
	// a thread scope (SPEC §4, thread_credential_required).
	ErrCredentialRequired = errors.New("thread credential required")
	// ErrUnknownClient: the client grant does not exist or was revoked.
	ErrUnknownClient = errors.New("unknown client grant")
	// ErrInvalidMessage: an empty, non-UTF-8 or oversized message text.
	ErrInvalidMessage = errors.New("invalid message text")
	// ErrUnauthenticated: a token that is malformed, unknown, revoked or
	// expired.
	ErrUnauthenticated = errors.New("unauthenticated")
	// ErrInvalidGrant: a refresh token that is unknown, expired, revoked,
	// or of another grant or OAuth client (OAuth "invalid_grant").
	ErrInvalidGrant = errors.New("invalid grant")
	// ErrRefreshReused: a refresh token already spent was presented again;
	// its grant has been revoked.
	ErrRefreshReused = errors.New("refresh token reused: grant revoked")
	// ErrOAuthDisabled: a pairing code was asked of a runtime that has no
	// authorization server of its own.
	ErrOAuthDisabled = errors.New("oauth sign-in is not configured")
	// ErrTooManyPairingCodes: a pairing code was asked while the most that
	// may be outstanding are.
	ErrTooManyPairingCodes = errors.New("too many pairing codes outstanding")

	// The MCP features' failures, which the endpoint answers as JSON-RPC
	// errors (transport's backendErrors).

	// ErrUnknownTool: a tools/call of a name no tool has.
	ErrUnknownTool = errors.New("unknown tool")
	// ErrResourceNotFound: nothing the caller may read is at the URI.
	ErrResourceNotFound = errors.New("resource not found")
	// ErrUnknownPrompt: a prompts/get of a name no prompt has, or one the
	// caller may not get.
	ErrUnknownPrompt = errors.New("unknown prompt")
	// ErrUnknownReference: a completion/complete whose ref names no prompt
	// or resource template the caller may use.
	ErrUnknownReference = errors.New("unknown completion reference")
	// ErrCapabilityNotDeclared: a handler asked the client for something
	// the client did not declare it can do (an elicitation without the
	// elicitation capability, …).
	ErrCapabilityNotDeclared = errors.New("client capability not declared")
	// ErrInvalidCursor: a list's cursor is not one that list returned.
	ErrInvalidCursor = errors.New("invalid cursor")
)

var sentinels = [codeCount]error{
	OK:                     nil,
	Internal:               ErrInternal,
	Closed:                 ErrClosed,
	Timeout:                ErrTimeout,
	Unavailable:            ErrUnavailable,
	InvalidID:              ErrInvalidID,
	InvalidArgument:        ErrInvalidArgument,
	UnknownThread:          ErrUnknownThread,
	ThreadExists:           ErrThreadExists,
	ArchivedThread:         ErrArchivedThread,
	TooManyThreads:         ErrTooManyThreads,
	UnknownInstance:        ErrUnknownInstance,
	InstanceExists:         ErrInstanceExists,
	UnknownDriver:          ErrUnknownDriver,
	InvalidDriverConfig:    ErrInvalidDriverConfig,
	ProviderOpenFailed:     ErrProviderOpenFailed,
	UnknownProviderSession: ErrUnknownProviderSession,
	ExclusiveSession:       ErrExclusiveSession,
	InstanceStopping:       ErrInstanceStopping,
	NotCurrentInstance:     ErrNotCurrentInstance,
	RunActive:              ErrRunActive,
	NoRun:                  ErrNoRun,
	Busy:                   ErrBusy,
	NotLive:                ErrNotLive,
	ReadOnly:               ErrReadOnly,
	CredentialRequired:     ErrCredentialRequired,
	UnknownClient:          ErrUnknownClient,
	InvalidMessage:         ErrInvalidMessage,
	Unauthenticated:        ErrUnauthenticated,
	InvalidGrant:           ErrInvalidGrant,
	RefreshReused:          ErrRefreshReused,
	OAuthDisabled:          ErrOAuthDisabled,
	TooManyPairingCodes:    ErrTooManyPairingCodes,
	UnknownTool:            ErrUnknownTool,
	ResourceNotFound:       ErrResourceNotFound,
	UnknownPrompt:          ErrUnknownPrompt,
	UnknownReference:       ErrUnknownReference,
	CapabilityNotDeclared:  ErrCapabilityNotDeclared,
	InvalidCursor:          ErrInvalidCursor,
	NoProviderSession:      ErrNoProviderSession,
	TurnsUnsupported:       ErrTurnsUnsupported,
	TurnRefused:            ErrTurnRefused,
}

// Sentinel returns the sentinel of c; nil for OK, ErrInternal for a code
// this build does not know.
func (c Code) Sentinel() error {
	if int(c) < len(sentinels) {
		return sentinels[c]
	}
	return ErrInternal
}

// Fault is the outcome of a request as plain data: a code and the message
// a person reads. The zero Fault is success.
type Fault struct {
	Code    Code
	Message string
}

// New returns the fault of code with a message; format and args as
// fmt.Sprintf.
func New(code Code, format string, args ...any) Fault {
	return Fault{Code: code, Message: fmt.Sprintf(format, args...)}
}

// OK reports whether f is success.
func (f Fault) OK() bool { return f.Code == OK }

// Err returns f as an error matching its sentinel with errors.Is, whose
// text is the message (the sentinel's own text when there is none); nil
// for success.
func (f Fault) Err() error {
	if f.Code == OK {
		return nil
	}
	return &faultError{f: f}
}

// From turns an error into a Fault: the code of the first sentinel err
// matches, and err's text as the message. nil is success; an error that
// matches no sentinel is Internal.
func From(err error) Fault {
	if err == nil {
		return Fault{}
	}
	if fe, ok := errors.AsType[*faultError](err); ok && fe.Error() == err.Error() {
		return fe.f
	}
	for c := Code(1); c < codeCount; c++ {
		if errors.Is(err, sentinels[c]) {
			return Fault{Code: c, Message: err.Error()}
		}
	}
	return Fault{Code: Internal, Message: err.Error()}
}

type faultError struct{ f Fault }

func (e *faultError) Error() string {
	if e.f.Message != "" {
		return e.f.Message
	}
	return e.f.Code.Sentinel().Error()
}

func (e *faultError) Unwrap() error { return e.f.Code.Sentinel() }

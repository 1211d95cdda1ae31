package mcpruntime

import (
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
)

// Sentinel errors, defined once in internal/fault. Every error the Runtime
// returns for one of these conditions satisfies errors.Is(err, ErrX); the
// message adds context.
var (
	// ErrClosed is returned by every method once Close has been called.
	ErrClosed = fault.ErrClosed
	// ErrTimeout is returned when an actor did not answer before the
	// request's deadline (the context's, or the operation's budget, see
	// Config.ActorTimeout and Config.OpenTimeout). What the request asked
	// for may or may not have happened.
	ErrTimeout = fault.ErrTimeout
	// ErrUnavailable is returned when the actor that would answer stopped
	// under the request and nothing better is known.
	ErrUnavailable = fault.ErrUnavailable
	// ErrInternal is returned for a broken invariant or a failed store
	// write; the message says which.
	ErrInternal = fault.ErrInternal
	// ErrInvalidID is returned for an empty, over-long or ill-formed id.
	ErrInvalidID = fault.ErrInvalidID
	// ErrInvalidArgument is returned for a bad argument other than an id
	// (an unknown access level, an empty message, …).
	ErrInvalidArgument = fault.ErrInvalidArgument
	// ErrUnknownThread is returned for a thread that does not exist (never
	// created, or deleted).
	ErrUnknownThread = fault.ErrUnknownThread
	// ErrThreadExists is returned by CreateThread for an id in use.
	ErrThreadExists = fault.ErrThreadExists
	// ErrTooManyThreads is returned by CreateThread when Config.MaxThreads
	// threads exist; deleting one makes room.
	ErrTooManyThreads = fault.ErrTooManyThreads
	// ErrArchivedThread is returned when changing an archived thread.
	ErrArchivedThread = fault.ErrArchivedThread
	// ErrUnknownInstance is returned for an unregistered provider instance.
	ErrUnknownInstance = fault.ErrUnknownInstance
	// ErrInstanceExists is returned by RegisterInstance for an id in use.
	ErrInstanceExists = fault.ErrInstanceExists
	// ErrUnknownDriver is returned by RegisterInstance for a driver kind
	// that is not registered.
	ErrUnknownDriver = fault.ErrUnknownDriver
	// ErrInvalidDriverConfig is returned by RegisterInstance when the driver
	// refuses the instance's configuration.
	ErrInvalidDriverConfig = fault.ErrInvalidDriverConfig
	// ErrProviderOpenFailed is returned by OpenProviderSession when the
	// driver failed to open the session (the process did not start, …).
	ErrProviderOpenFailed = fault.ErrProviderOpenFailed
	// ErrUnknownProviderSession is returned for a provider session that is
	// not open.
	ErrUnknownProviderSession = fault.ErrUnknownProviderSession
	// ErrNotCurrentInstance is returned by StartRun for an instance that is
	// not the thread's current one.
	ErrNotCurrentInstance = fault.ErrNotCurrentInstance
	// ErrRunActive is returned by StartRun while a run is active.
	ErrRunActive = fault.ErrRunActive
	// ErrNoRun is returned by EndRun when there is no such active run.
	ErrNoRun = fault.ErrNoRun
	// ErrNoProviderSession is returned by StartTurn when no open provider
	// session serves the (thread, instance).
	ErrNoProviderSession = fault.ErrNoProviderSession
	// ErrTurnsUnsupported is returned by StartTurn on an instance whose
	// driver takes no prompts (inproc, exec: their runs are the host's).
	ErrTurnsUnsupported = fault.ErrTurnsUnsupported
	// ErrTurnRefused is returned by StartTurn when the agent did not accept
	// the turn; the run is ended.
	ErrTurnRefused = fault.ErrTurnRefused
	// ErrBusy is returned by Rotate while a provider session for the same
	// (thread, instance) is being opened.
	ErrBusy = fault.ErrBusy
	// ErrNotLive is returned by a mutation whose caller does not own the
	// thread's active run, or whose credential is no longer live (SPEC §4
	// code parent_not_active).
	ErrNotLive = fault.ErrNotLive
	// ErrReadOnly is returned by a mutation from a read-only client grant.
	ErrReadOnly = fault.ErrReadOnly
	// ErrCredentialRequired is returned when an operation needs a provider
	// credential's thread scope and the caller has none (SPEC §4 code
	// thread_credential_required).
	ErrCredentialRequired = fault.ErrCredentialRequired
	// ErrUnknownClient is returned for a client grant that does not exist
	// or was revoked.
	ErrUnknownClient = fault.ErrUnknownClient
	// ErrUnauthenticated is matched by every authentication failure; see
	// AuthError for the reason.
	ErrUnauthenticated = fault.ErrUnauthenticated
	// ErrOAuthDisabled is returned by NewPairingCode when the runtime has no
	// authorization server (OAuthConfig.PublicOrigin is empty, or an
	// external issuer is configured).
	ErrOAuthDisabled = fault.ErrOAuthDisabled
	// ErrTooManyPairingCodes is returned by NewPairingCode while 100 pairing
	// codes are outstanding.
	ErrTooManyPairingCodes = fault.ErrTooManyPairingCodes

	// The MCP features' failures, which the endpoint answers as JSON-RPC
	// errors (SPEC §5b).

	// ErrUnknownTool is returned by CallTool for a name no tool has; the
	// endpoint answers -32602 "unknown tool".
	ErrUnknownTool = fault.ErrUnknownTool
	// ErrResourceNotFound is a resource handler's answer for a URI it has
	// no resource at. The client gets what it gets for a URI no resource or
	// template matches, and for one it may not read: JSON-RPC -32002 in a
	// 2025 session, -32602 in the 2026-07-28 era, with data.uri either way.
	ErrResourceNotFound = fault.ErrResourceNotFound
	// ErrUnknownPrompt is returned by GetPrompt for a name no prompt has, or
	// a prompt the caller may not get: the two are alike (SPEC §5b.2).
	ErrUnknownPrompt = fault.ErrUnknownPrompt
	// ErrUnknownReference is returned by Complete for a ref/prompt or
	// ref/resource naming nothing the caller may use.
	ErrUnknownReference = fault.ErrUnknownReference
	// ErrCapabilityNotDeclared is what a request gets when its handler
	// asked the client for something the client did not declare it can do
	// (an elicitation without the elicitation capability, …): in a 2025
	// session a tools/call answers it as an isError result, other requests
	// as JSON-RPC -32602; in the 2026-07-28 era it is -32021 with
	// data.requiredCapabilities. A handler avoids it by reading
	// ClientCapabilities first.
	ErrCapabilityNotDeclared = fault.ErrCapabilityNotDeclared
	// ErrInvalidCursor is what a list request gets for a cursor that list
	// did not return: JSON-RPC -32602.
	ErrInvalidCursor = fault.ErrInvalidCursor
)

// Authentication failure reasons, in AuthError.Reason.
const (
	AuthMalformed = credential.AuthMalformed // not shaped like a token this runtime mints
	AuthUnknown   = credential.AuthUnknown   // no credential has this token
	AuthRevoked   = credential.AuthRevoked
	AuthExpired   = credential.AuthExpired
)

// AuthError is returned by Authenticate. Its one field, Reason string, is
// why: AuthMalformed, AuthUnknown, AuthRevoked or AuthExpired. It matches
// ErrUnauthenticated with errors.Is; AuthReason returns Reason, for the
// endpoint's metrics; its text is "unauthenticated: <Reason> token".
type AuthError = credential.AuthError

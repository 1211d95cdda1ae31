package mcpruntime

import (
	"errors"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/thread"
)

// Sentinel errors. Every error the Runtime returns for one of these
// conditions satisfies errors.Is(err, ErrX); the message adds context.
var (
	// ErrClosed is returned by every method once Close has been called.
	ErrClosed = errors.New("runtime closed")
	// ErrInvalidID is returned for an empty, over-long or ill-formed id.
	ErrInvalidID = errors.New("invalid id")
	// ErrInvalidArgument is returned for a bad argument other than an id
	// (an unknown access level, an empty message, …).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrUnknownThread is returned for a thread that does not exist (never
	// created, or deleted).
	ErrUnknownThread = thread.ErrNotFound
	// ErrThreadExists is returned by CreateThread for an id in use.
	ErrThreadExists = errors.New("thread already exists")
	// ErrTooManyThreads is returned by CreateThread when Config.MaxThreads
	// threads exist; deleting one makes room.
	ErrTooManyThreads = errors.New("too many threads")
	// ErrArchivedThread is returned when changing an archived thread.
	ErrArchivedThread = thread.ErrArchived
	// ErrUnknownInstance is returned for an unregistered provider instance.
	ErrUnknownInstance = thread.ErrUnknownInstance
	// ErrInstanceExists is returned by RegisterInstance for an id in use.
	ErrInstanceExists = errors.New("provider instance already exists")
	// ErrUnknownDriver is returned by RegisterInstance for a driver kind
	// that is not registered.
	ErrUnknownDriver = provider.ErrUnknownDriver
	// ErrInvalidDriverConfig is returned by RegisterInstance when the driver
	// refuses the instance's configuration.
	ErrInvalidDriverConfig = provider.ErrInvalidConfig
	// ErrProviderOpenFailed is returned by OpenProviderSession when the
	// driver failed to open the session (the process did not start, …).
	ErrProviderOpenFailed = provider.ErrOpenFailed
	// ErrUnknownProviderSession is returned for a provider session that is
	// not open.
	ErrUnknownProviderSession = provider.ErrUnknownSession
	// ErrNotCurrentInstance is returned by StartRun for an instance that is
	// not the thread's current one.
	ErrNotCurrentInstance = thread.ErrNotCurrent
	// ErrRunActive is returned by StartRun while a run is active.
	ErrRunActive = thread.ErrRunActive
	// ErrNoRun is returned by EndRun when there is no such active run.
	ErrNoRun = thread.ErrNoRun
	// ErrBusy is returned by Rotate while a provider session for the same
	// (thread, instance) is being opened.
	ErrBusy = thread.ErrBusy
	// ErrNotLive is returned by a mutation whose caller does not own the
	// thread's active run, or whose credential is no longer live (SPEC §4
	// code parent_not_active).
	ErrNotLive = thread.ErrNotLive
	// ErrReadOnly is returned by a mutation from a read-only client grant.
	ErrReadOnly = thread.ErrReadOnly
	// ErrCredentialRequired is returned when an operation needs a provider
	// credential's thread scope and the caller has none (SPEC §4 code
	// thread_credential_required).
	ErrCredentialRequired = thread.ErrCredentialRequired
	// ErrUnknownClient is returned for a client grant that does not exist
	// or was revoked.
	ErrUnknownClient = client.ErrNotFound
	// ErrUnauthenticated is matched by every authentication failure; see
	// AuthError for the reason.
	ErrUnauthenticated = errors.New("unauthenticated")
)

// Authentication failure reasons, in AuthError.Reason.
const (
	AuthMalformed = "malformed" // not shaped like a token this runtime mints
	AuthUnknown   = "unknown"   // no credential has this token
	AuthRevoked   = "revoked"
	AuthExpired   = "expired"
)

// AuthError is returned by Authenticate. It matches ErrUnauthenticated.
type AuthError struct {
	Reason string
}

func (e *AuthError) Error() string { return "unauthenticated: " + e.Reason + " token" }

// AuthReason returns Reason, for the transport's metrics.
func (e *AuthError) AuthReason() string { return e.Reason }

// Is makes errors.Is(err, ErrUnauthenticated) true.
func (e *AuthError) Is(target error) bool { return target == ErrUnauthenticated }

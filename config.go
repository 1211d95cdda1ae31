package mcpruntime

import (
	"log/slog"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// NoExpiry, as Config.CredentialWindow or Config.ClientTokenTTL, makes
// credentials or client tokens never expire.
const NoExpiry time.Duration = -1

// Defaults used where a Config field is zero.
const (
	DefaultEndpoint         = "http://127.0.0.1:7331/mcp"
	DefaultCredentialWindow = 24 * time.Hour
	DefaultClientTokenTTL   = 24 * time.Hour
	DefaultMessageLog       = 256
	DefaultJournal          = 4096
	DefaultRevokedKept      = 16
	DefaultActorTimeout     = 5 * time.Second
	DefaultOpenTimeout      = 90 * time.Second
	DefaultProviderIdle     = 30 * time.Minute
	DefaultMaxThreads       = 10_000
)

// Config configures a Runtime. The zero value is a working in-memory
// runtime with the defaults above.
type Config struct {
	// Endpoint is the MCP URL handed to provider sessions. Zero:
	// DefaultEndpoint.
	Endpoint string
	// CredentialWindow is how long a provider credential stays live without
	// a turn start on its thread (SPEC §3). Zero: DefaultCredentialWindow;
	// NoExpiry: never.
	CredentialWindow time.Duration
	// ClientTokenTTL is how long a client-grant token authenticates after
	// it is issued. Zero: DefaultClientTokenTTL; NoExpiry: forever.
	ClientTokenTTL time.Duration
	// MessageLog is how many messages a thread keeps (oldest dropped).
	// Zero: DefaultMessageLog.
	MessageLog int
	// Journal is how many records (Records: what the state, the
	// endpoints, the providers and the agents did, and the audit) the
	// runtime keeps for the readers of its event stream (oldest dropped).
	// Zero: DefaultJournal.
	Journal int
	// Audit journals a record of every tools/call, resources/read and
	// prompts/get an MCP endpoint dispatched (audit.tool, audit.resource,
	// audit.prompt): the caller, the tool, URI or prompt, the outcome and
	// the duration; a tool's arguments only when it opted in
	// (Tool.AuditArguments), its results never. Off: no audit records.
	Audit bool
	// RevokedKept is how many revoked credential rows a thread or grant
	// keeps for inspection. Zero: DefaultRevokedKept.
	RevokedKept int
	// ActorTimeout bounds a request to one actor; a request whose thread
	// asks every provider instance (Detach, Archive, DeleteThread) gets
	// twice it. The bound, or the context's deadline if that comes first,
	// is the request's deadline, which every actor it reaches honours.
	// Zero: DefaultActorTimeout.
	ActorTimeout time.Duration
	// OpenTimeout bounds each driver call, including opening a provider
	// session; OpenProviderSession and Rotate get it plus twice
	// ActorTimeout. Zero: DefaultOpenTimeout.
	OpenTimeout time.Duration
	// ProviderIdle releases a provider session (closes it and revokes its
	// credentials) once none of its threads has had a turn for this long
	// and none has a run of its instance in flight. Zero:
	// DefaultProviderIdle; NoExpiry: never.
	ProviderIdle time.Duration
	// MaxThreads bounds the threads that exist at once (active and
	// archived; a deleted one no longer counts): past it CreateThread
	// fails with ErrTooManyThreads. Zero: DefaultMaxThreads.
	MaxThreads int
	// OAuth configures sign-in for MCP clients the runtime did not launch
	// (SPEC §5c): its own authorization server, or the resource-server
	// mode for an external issuer. Zero: off.
	OAuth OAuthConfig
	// Cluster makes the runtime one node of several (SPEC §5d): a
	// cluster.Config (package github.com/agenthost/mcpruntime/cluster), on
	// etcd. Nil: one node, in memory.
	Cluster Cluster
	// StateFile is the path of the runtime's durable store on one node
	// (SPEC §3.8): a bbolt database, created 0600 if absent, holding
	// threads with their messages, credentials (as hashes), client grants
	// and provider instances, each write synced before its call returns.
	// One process holds a file at a time: a second New on it fails with
	// ErrStateInUse. "": in memory, gone at Close. Not with Cluster.
	StateFile string
	// ToolTimeout bounds one run of a tool handler whose Tool.Timeout is
	// zero (see Tool.Timeout). Zero: no bound, the handler's ctx ending only
	// when its request does.
	ToolTimeout time.Duration
	// OmitBuiltins names the built-ins New leaves out, each by its name in
	// Builtins ("thread_post", "thread-transcript", …), or "*" for all of
	// them: a host that serves only its own tools lists none of the
	// runtime's. RemoveTool after New does the same for a tool. An unknown
	// name is ErrInvalidArgument.
	OmitBuiltins []string
	// Drivers adds provider kinds to the built-in "inproc" and "exec", by kind name. A
	// name given here replaces a built-in one.
	Drivers map[string]driver.Factory
	// Now is the clock. Nil: time.Now. Tests move time with it.
	Now func() time.Time
	// Logger receives the runtime's logs. Nil: slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Endpoint == "" {
		c.Endpoint = DefaultEndpoint
	}
	if c.CredentialWindow == 0 {
		c.CredentialWindow = DefaultCredentialWindow
	}
	if c.ClientTokenTTL == 0 {
		c.ClientTokenTTL = DefaultClientTokenTTL
	}
	if c.MessageLog <= 0 {
		c.MessageLog = DefaultMessageLog
	}
	if c.Journal <= 0 {
		c.Journal = DefaultJournal
	}
	if c.RevokedKept <= 0 {
		c.RevokedKept = DefaultRevokedKept
	}
	if c.ActorTimeout <= 0 {
		c.ActorTimeout = DefaultActorTimeout
	}
	if c.OpenTimeout <= 0 {
		c.OpenTimeout = DefaultOpenTimeout
	}
	if c.MaxThreads <= 0 {
		c.MaxThreads = DefaultMaxThreads
	}
	if c.ProviderIdle == 0 {
		c.ProviderIdle = DefaultProviderIdle
	}
	c.OAuth = c.OAuth.withDefaults()
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

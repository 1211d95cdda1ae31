package memdb

import (
	"encoding/json"
	"slices"
	"time"
)

// Thread statuses. A deleted thread has no row at all: its id is unknown.
const (
	ThreadActive   = "active"
	ThreadArchived = "archived"
)

// Credential and provider-session states.
const (
	StateLive    = "live"
	StateRevoked = "revoked"

	SessionOpen   = "open"
	SessionClosed = "closed"
)

// Credential kinds.
const (
	KindProvider = "provider"
	KindClient   = "client"
	// KindRefresh is a refresh token of a client grant issued by the
	// runtime's authorization server: it shares the grant's namespace but
	// never authenticates a request, and never keeps the namespace live.
	KindRefresh = "refresh"
)

// Client-grant access levels.
const (
	AccessReadOnly  = "read-only"
	AccessReadWrite = "read-write"
)

// Thread is one conversation. Written only by its thread actor.
type Thread struct {
	ID       string
	Home     string // the node whose thread actor writes it (several nodes, SPEC §5d); "" on one node
	Status   string // ThreadActive or ThreadArchived
	Instance string // current provider instance; "" until one is chosen
	Run      *Run   // active run, nil when none
	Messages []Message
	NextSeq  uint64 // sequence number of the next message
	Created  time.Time
	// LastTurn is when a run last started or ended on the thread, or it was
	// touched; provider sessions serving it count idleness from there.
	LastTurn time.Time
}

// Run is a thread's active run. It always belongs to the thread's current
// instance.
type Run struct {
	ID       string
	Instance string
	Started  time.Time
}

// Message is one entry of a thread's bounded message log.
type Message struct {
	Seq      uint64
	Text     string
	Author   string // namespace of the caller that posted it
	Instance string // provider instance of the caller, "" for clients
	At       time.Time
}

// Clone returns a deep copy.
func (t *Thread) Clone() *Thread {
	c := *t
	if t.Run != nil {
		r := *t.Run
		c.Run = &r
	}
	c.Messages = slices.Clone(t.Messages)
	return &c
}

// Instance is a registered provider instance. Written only by its provider
// actor.
type Instance struct {
	ID           string
	Driver       string
	Config       json.RawMessage
	Capabilities []string // given to every credential minted for the instance
	Created      time.Time
}

// Clone returns a deep copy.
func (i *Instance) Clone() *Instance {
	c := *i
	c.Config = slices.Clone(i.Config)
	c.Capabilities = slices.Clone(i.Capabilities)
	return &c
}

// ProviderSession is one live process or connection of a provider instance.
// Written only by its instance's provider actor.
type ProviderSession struct {
	ID          string
	Instance    string
	MultiThread bool     // whether the driver serves several threads per session
	Threads     []string // attached threads
	Credentials []string // credentials handed to this session (kept across detach)
	State       string   // SessionOpen or SessionClosed
	Opened      time.Time
	Closed      time.Time
	CloseReason string
}

// Clone returns a deep copy.
func (p *ProviderSession) Clone() *ProviderSession {
	c := *p
	c.Threads = slices.Clone(p.Threads)
	c.Credentials = slices.Clone(p.Credentials)
	return &c
}

// Credential is a bearer credential, stored only as the SHA-256 of its token.
// Provider credentials are written by their thread's actor, client tokens by
// their grant's actor.
type Credential struct {
	ID        string
	TokenHash string // hex SHA-256 of the token; the token itself is never stored
	Kind      string // KindProvider or KindClient
	Namespace string // "cred:<ID>" for provider credentials, "client:<ClientID>" for clients
	Thread    string // provider credentials only
	Instance  string // provider credentials only
	Client    string // client tokens and refresh tokens only
	Access    string // client tokens and refresh tokens only: AccessReadOnly or AccessReadWrite
	// Audience is the resource (RFC 8707: the MCP endpoint's URL) an
	// OAuth-issued token is bound to; an endpoint serving another resource
	// refuses it like an unknown token. "": not bound (provider
	// credentials, admin-issued client tokens).
	Audience string
	// OAuthClient is the SHA-256 (hex) of the OAuth client_id a refresh
	// token was issued to; only that client may redeem it. "" otherwise.
	OAuthClient  string
	Capabilities []string
	Issued       time.Time
	LastLive     time.Time // last liveness refresh (mint or turn start)
	Expires      time.Time // zero: never
	State        string    // StateLive or StateRevoked
	RevokeReason string
	Revoked      time.Time
}

// Clone returns a deep copy.
func (c *Credential) Clone() *Credential {
	d := *c
	d.Capabilities = slices.Clone(c.Capabilities)
	return &d
}

// LiveAt reports whether the credential authenticates at time now: not
// revoked, and not past its expiry.
func (c *Credential) LiveAt(now time.Time) bool {
	return c.State == StateLive && (c.Expires.IsZero() || now.Before(c.Expires))
}

// ClientGrant is access for an MCP client the runtime did not launch. Its
// tokens are rows of the credentials table that share its namespace.
type ClientGrant struct {
	ID      string
	Home    string // the node whose grant actor writes it (several nodes, SPEC §5d); "" on one node
	Label   string
	Access  string
	State   string // StateLive or StateRevoked
	Created time.Time
	// Refresh is the grant's refresh family, for a grant of the runtime's
	// authorization server; zero otherwise.
	Refresh RefreshFamily
	Via     string // how the grant came: "admin", "oauth" or "jwt" (the admin listing's kind)
}

// RefreshFamily is the one record of a grant's refresh tokens, however
// many rotations (SPEC §5c.11): the generation of the newest, and the hash
// of the key every one of them carries, so that a spent generation is
// known for what it is after its row is pruned.
type RefreshFamily struct {
	// OAuthClient is the SHA-256 (hex) of the OAuth client_id the family's
	// tokens are for.
	OAuthClient string
	// KeyHash is the hex SHA-256 of the family's key (token.FamilyKeyHash);
	// the key itself is only in the tokens.
	KeyHash string
	// Generation is the newest token's generation: 1 for the first.
	Generation uint64
}

// Clone returns a copy.
func (g *ClientGrant) Clone() *ClientGrant {
	c := *g
	return &c
}

// MCPSession is the ownership record of one MCP session. Written only by its
// session actor.
type MCPSession struct {
	ID              string
	Owner           string // namespace that initialized it
	Credential      string // credential that initialized it
	ProtocolVersion string
	ClientName      string
	ClientVersion   string
	Created         time.Time
	LastActive      time.Time
}

// Clone returns a copy.
func (m *MCPSession) Clone() *MCPSession {
	c := *m
	return &c
}

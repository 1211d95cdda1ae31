package client

import (
	"time"

	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// Message is the client-grant actor's protocol. Every message is a request
// that carries its deadline and is answered by one reply whose outcome is
// a fault.Fault; fail builds the reply that reports f.
type Message interface {
	clientMessage()
	fail(f fault.Fault) any
}

// IssueToken mints an access token for the grant. With RevokePrevious,
// every earlier token is revoked in the same transaction. With
// OAuthClient set (the hex SHA-256 of an OAuth client_id), the grant's
// refresh family is started for that client and its first refresh token
// minted with it; a grant has one family (a second is
// fault.InvalidArgument). Answered by *TokenIssued.
type IssueToken struct {
	deadline.Request
	RevokePrevious bool
	// Audience binds the new tokens to a resource (an MCP endpoint's URL);
	// "": not bound.
	Audience    string
	OAuthClient string
}

// RedeemRefresh spends refresh token Token, presented by the OAuth client
// whose client_id hashes to OAuthClient, and mints the next access token
// and refresh token of the grant, bound to the same audience (trusted
// refresh: the same namespace). A refresh token of the grant's family spent
// before — however many rotations ago — revokes the grant, as Revoke does,
// and is answered fault.RefreshReused; one unknown, expired or of another
// client is fault.InvalidGrant. The token travels only to the grant actor,
// which stores nothing but hashes. Answered by *TokenIssued.
type RedeemRefresh struct {
	deadline.Request
	Token       string
	OAuthClient string
}

// RecordToken records a token of the grant minted elsewhere and verified —
// a JWT of the resource-server mode — by its hash, so that it
// authenticates, is rechecked and is revoked as the grant's own tokens
// are. Answered by *TokenIssued (without a token).
type RecordToken struct {
	deadline.Request
	TokenHash string
	Access    string
	Audience  string
	Expires   time.Time
	// MaxLive bounds the grant's live tokens: recording a new one past it
	// removes the oldest recorded (by issue time) until MaxLive are live;
	// the new one is never removed. Zero: no bound.
	MaxLive int
}

// TokenIssued answers IssueToken, RedeemRefresh and RecordToken. The tokens are shown
// here and nowhere else.
type TokenIssued struct {
	Token        string
	CredentialID string
	Expires      time.Time // the access token's expiry; zero: never
	RefreshToken string    // "" unless one was minted
	Access       string
	Fault        fault.Fault
}

// Revoke revokes every token of the grant, removes it and stops the actor.
// Answered by *Revoked.
type Revoke struct {
	deadline.Request
	// Reason is recorded in the audit trail. "": credential.ReasonAdmin.
	Reason string
}

// Revoked answers Revoke.
type Revoked struct {
	Tokens int // live tokens revoked
	Fault  fault.Fault
}

// GetGrant asks for the grant record. Answered by *GrantInfo.
type GetGrant struct{ deadline.Request }

// GrantInfo answers GetGrant.
type GrantInfo struct {
	Grant memdb.ClientGrant
	Fault fault.Fault
}

// Err returns the reply's fault as an error (nil on success).
func (r *TokenIssued) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *Revoked) Err() error { return r.Fault.Err() }

// Err returns the reply's fault as an error (nil on success).
func (r *GrantInfo) Err() error { return r.Fault.Err() }

func (*IssueToken) clientMessage()    {}
func (*RedeemRefresh) clientMessage() {}
func (*RecordToken) clientMessage()   {}
func (*Revoke) clientMessage()        {}
func (*GetGrant) clientMessage()      {}

func (*IssueToken) fail(f fault.Fault) any    { return &TokenIssued{Fault: f} }
func (*RedeemRefresh) fail(f fault.Fault) any { return &TokenIssued{Fault: f} }
func (*RecordToken) fail(f fault.Fault) any   { return &TokenIssued{Fault: f} }
func (*Revoke) fail(f fault.Fault) any        { return &Revoked{Fault: f} }
func (*GetGrant) fail(f fault.Fault) any      { return &GrantInfo{Fault: f} }

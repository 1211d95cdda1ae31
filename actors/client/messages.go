package client

import (
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// ErrNotFound is returned once a grant is revoked (its actor answers this
// until it has stopped).
var ErrNotFound = fault.ErrUnknownClient

// Message is the client-grant actor's protocol. Every message is a request
// that carries its deadline and is answered by one reply whose outcome is
// a fault.Fault; fail builds the reply that reports f.
type Message interface {
	clientMessage()
	fail(f fault.Fault) any
}

// IssueToken mints a token for the grant. With RevokePrevious, every earlier
// token is revoked in the same transaction. Answered by *TokenIssued.
type IssueToken struct {
	deadline.Request
	RevokePrevious bool
}

// TokenIssued answers IssueToken. Token is shown here and nowhere else.
type TokenIssued struct {
	Token        string
	CredentialID string
	Fault        fault.Fault
}

// Revoke revokes every token of the grant, removes it and stops the actor.
// Answered by *Revoked.
type Revoke struct{ deadline.Request }

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

func (*IssueToken) clientMessage() {}
func (*Revoke) clientMessage()     {}
func (*GetGrant) clientMessage()   {}

func (*IssueToken) fail(f fault.Fault) any { return &TokenIssued{Fault: f} }
func (*Revoke) fail(f fault.Fault) any     { return &Revoked{Fault: f} }
func (*GetGrant) fail(f fault.Fault) any   { return &GrantInfo{Fault: f} }

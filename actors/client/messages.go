package client

import (
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// ErrNotFound is returned once a grant is revoked (its actor answers this
// until it has stopped).
var ErrNotFound = fault.ErrUnknownClient

// Message is the client-grant actor's protocol.
type Message interface{ clientMessage() }

// IssueToken mints a token for the grant. With RevokePrevious, every earlier
// token is revoked in the same transaction. Answered by *TokenIssued.
type IssueToken struct {
	RevokePrevious bool
}

// TokenIssued answers IssueToken. Token is shown here and nowhere else.
type TokenIssued struct {
	Token        string
	CredentialID string
	Err          error
}

// Revoke revokes every token of the grant, removes it and stops the actor.
// Answered by *Revoked.
type Revoke struct{}

// Revoked answers Revoke.
type Revoked struct {
	Tokens int // live tokens revoked
	Err    error
}

// GetGrant asks for the grant record. Answered by *GrantInfo.
type GetGrant struct{}

// GrantInfo answers GetGrant.
type GrantInfo struct {
	Grant *memdb.ClientGrant
	Err   error
}

func (*IssueToken) clientMessage() {}
func (*Revoke) clientMessage()     {}
func (*GetGrant) clientMessage()   {}

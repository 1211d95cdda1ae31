// Package client runs one actor per client grant: access for an MCP client
// the runtime did not launch (an IDE's MCP inspector, a script), with a
// label, an access level and expiring tokens.
//
// The grant actor is the only writer of its grant's row and of its tokens,
// which are rows of the credentials table of kind "client" sharing the
// namespace "client:<ClientID>"; it changes them only through the ledger
// (internal/credential), in its own transactions. Because every token of a grant has the same
// namespace, a refreshed token keeps using the MCP sessions the previous one
// opened (SPEC §2, "trusted refresh"); a provider credential never shares a
// namespace with anything.
//
// Messages (messages.go):
//
//	IssueToken  → TokenIssued   mint a token; optionally revoke the previous ones
//	Revoke      → Revoked       revoke every token, remove the grant, stop
//	GetGrant    → GrantInfo     the grant record (also a mailbox barrier)
//
// Every request carries its deadline and every reply its outcome as a
// fault.Fault (plain data). The grant's phases are behaviours: live, then
// revoked, when every request is answered fault.ErrUnknownClient until the actor is
// gone.
//
// Tokens expire a fixed TTL after issue; a refresh does not extend older
// tokens. Revocation is committed to the store before the reply is sent, so
// once Revoke returns no request with any of the grant's tokens
// authenticates.
package client

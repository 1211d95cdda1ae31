// Package oauth is the runtime's sign-in for MCP clients it did not launch
// (SPEC §5c): an OAuth 2.1 authorization server in front of client grants,
// as MCP's authorization spec (2025-11-25, basic/authorization) asks of
// it, and, for an organisation's own identity provider, a resource-server
// verifier of its JWT access tokens.
//
// # The authorization server
//
// One [Server] per runtime serves, on the MCP listener beside the MCP
// endpoint:
//
//	GET  /.well-known/oauth-protected-resource{path}  RFC 9728 metadata of the MCP endpoint (also without {path})
//	GET  /.well-known/oauth-authorization-server      RFC 8414 metadata
//	POST /oauth/register                              RFC 7591 registration, stateless
//	GET  /oauth/authorize                             the consent page (authorization code + PKCE S256 + RFC 8707 resource)
//	POST /oauth/authorize                             the consent form: a pairing code approves, the answer is a 303 to the client
//	POST /oauth/token                                 authorization_code and refresh_token grants
//
// Every URL derives from Config.Issuer (the public origin), never from a
// request's Host. Registration keeps no state: the client id carries the
// registration (name, 1–5 redirect URIs, time) and a MAC under the
// runtime secret. A client id may instead be an https URL, a Client ID
// Metadata Document, which the server fetches (cimd.go) with strict size,
// time and redirect limits, refusing private and loopback addresses unless
// configured to allow them (tests).
//
// Approval is a pairing code: the host asks the admin API for one
// (single-use, short-lived, stored hashed, with the access level it
// grants) and shows it to its user, who types it into the consent page.
// Guesses are rate-limited per authorization request, per client and
// source, per non-loopback source and, as a backstop, server-wide; a wrong
// code is told apart from nothing else. An approved request gets an
// authorization code (single-use, ≤ 60 s, spent at its first exchange
// whatever the outcome), which the token endpoint exchanges, checking the
// PKCE verifier, the client, the redirect URI and the resource, for the
// tokens of a new client grant ([Grants]: the runtime's client-grant
// actors): an access token that is a client-grant token bound to the
// resource, and a refresh token. A refresh keeps the grant (its MCP
// sessions keep working) and rotates the refresh token; a spent refresh
// token presented again revokes the grant.
//
// What the server holds is bounded, and none of it is a secret in clear
// (codes are kept as hashes). The consent pages and the metadata-document
// cache are this process's. The pairing codes, authorization codes,
// wrong-code budgets and confirmed redirect URIs are a [State]: this
// process's memory by default ([NewMemoryState]), or, on several nodes,
// the cluster's (internal/oauthetcd, in etcd), each check-and-change one
// atomic step, so that any node serves any step of a sign-in (SPEC
// §5d.9). A consent page's request id then names its node, and a form
// posted to another node goes to the page's ([Config.Forward],
// [Server.ServeForwardedConsent]).
// Credential events (issued, refreshed, rotated, revoked, refusals) go to
// Config.Events; nothing logged carries a token, a code or a pairing code.
//
// # The resource server
//
// With an external issuer configured ([Verifier]), the MCP endpoint
// accepts the issuer's JWT access tokens: signature by a key of the
// issuer's JWKS (fetched from its metadata, cached, refetched at most once
// per interval on an unknown key id), an algorithm allowlist, iss, aud =
// the resource, exp and nbf within a bounded skew, the required scopes.
// The protected-resource metadata then names that issuer.
package oauth

package mcpruntime

import (
	"context"
	"errors"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/oauth"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// IssueClient creates a client grant with access "read-only" or
// "read-write" and returns its first token.
func (r *Runtime) IssueClient(ctx context.Context, label, access string) (ClientToken, error) {
	if err := r.checkOpen(); err != nil {
		return ClientToken{}, err
	}
	if access != memdb.AccessReadOnly && access != memdb.AccessReadWrite {
		return ClientToken{}, fmt.Errorf("access %q (want %q or %q): %w", access, memdb.AccessReadOnly, memdb.AccessReadWrite, ErrInvalidArgument)
	}
	if len(label) > 256 {
		return ClientToken{}, fmt.Errorf("label of %d bytes (max 256): %w", len(label), ErrInvalidArgument)
	}
	if err := ctx.Err(); err != nil {
		return ClientToken{}, err // nothing started
	}
	id := token.NewID("cl_")
	pid, err := r.spawnGrant(id, label, access, viaAdmin)
	if err != nil {
		return ClientToken{}, err
	}
	res, err := r.issueToken(ctx, target{pid: pid, gone: ErrUnknownClient}, &client.IssueToken{})
	if err != nil {
		r.dropGrant(id, pid)
		return ClientToken{}, err
	}
	return ClientToken{ClientID: id, Token: res.Token}, nil
}

// How a grant came, in the audit trail.
const (
	viaAdmin = "admin"
	viaOAuth = "oauth"
	viaJWT   = "jwt"
)

// spawnGrant starts the actor of a new client grant id.
func (r *Runtime) spawnGrant(id, label, access, via string) (*actor.PID, error) {
	props := client.Props(client.Config{
		ID: id, Home: r.node(), Label: label, Access: access, Store: r.store, Now: r.cfg.Now,
		TTL: r.cfg.ClientTokenTTL, RefreshTTL: r.cfg.OAuth.RefreshTokenTTL, RevokedKept: r.cfg.RevokedKept,
		Via: via, Events: r.credentialEvent, Logger: r.cfg.Logger,
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	pid, err := r.root.SpawnNamed(props, names.Client(id))
	if err != nil {
		return nil, fmt.Errorf("start client grant: %w", err)
	}
	r.clients[id] = pid
	return pid, nil
}

// dropGrant removes a grant whose first token could not be issued: the
// caller never learns its id, so nobody could revoke it.
func (r *Runtime) dropGrant(id string, pid *actor.PID) {
	r.root.Send(pid, &client.Revoke{Reason: "issue_failed"})
	r.mu.Lock()
	delete(r.clients, id)
	r.mu.Unlock()
}

// RefreshClient issues a new token for the grant; it shares the grant's
// namespace, so it keeps using the grant's MCP sessions. The previous
// tokens stay valid until their own expiry unless revokePrevious.
func (r *Runtime) RefreshClient(ctx context.Context, clientID string, revokePrevious bool) (string, error) {
	if err := r.checkOpen(); err != nil {
		return "", err
	}
	t, err := r.clientActor(clientID)
	if err != nil {
		return "", err
	}
	res, err := r.issueToken(ctx, t, &client.IssueToken{RevokePrevious: revokePrevious})
	if err != nil {
		return "", err
	}
	return res.Token, nil
}

func (r *Runtime) issueToken(ctx context.Context, t target, msg request) (*client.TokenIssued, error) {
	return call[*client.TokenIssued](ctx, r, t, msg, r.budget(opActor, ""))
}

// RevokeClient revokes every token of the grant and removes it.
func (r *Runtime) RevokeClient(ctx context.Context, clientID string) error {
	return r.revokeClient(ctx, clientID, credential.ReasonAdmin)
}

// revokeClient is RevokeClient, recording reason.
func (r *Runtime) revokeClient(ctx context.Context, clientID, reason string) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	// Claim the grant first: of two racing revokes, exactly one finds it.
	r.mu.Lock()
	pid := r.clients[clientID]
	delete(r.clients, clientID)
	r.mu.Unlock()
	if pid == nil {
		return r.noGrant(clientID)
	}
	_, err := call[*client.Revoked](ctx, r, target{pid: pid, gone: ErrUnknownClient}, &client.Revoke{Reason: reason}, r.budget(opActor, ""))
	if err == nil && r.jwt != nil {
		// A JWT subject's grant: its tokens issued until now stay refused.
		r.jwt.Revoked(clientID, r.cfg.Now())
	}
	return err
}

// CredentialEvent is one record of the audit trail of client grants
// (SPEC §5c): issued, refreshed, rotated, revoked (with its reason),
// audience refused, pairing and authorization failures. It carries no
// token, code or hash. Its fields:
//
//   - Kind string: one of the Event* constants below.
//   - Client string: the grant's id, when one is concerned.
//   - Credential string: the id of the credential row concerned (never
//     its token).
//   - Access string: the grant's "read-only" or "read-write", when known.
//   - Via string: how the grant came: "admin", "oauth" (the runtime's own
//     authorization server) or "jwt" (an external issuer's tokens).
//   - Reason string: why, for a revocation or a refusal: a stable
//     snake_case word ("admin", "refresh_reused", "pkce_mismatch",
//     "code_reused", …).
//   - ClientName string: the OAuth client's registered name, as it gave it.
//   - At time.Time: when it happened.
//
// Log(logger) writes it as one structured record, "credential event"
// (refusals as warnings). JSON names: kind, client, credential, access,
// via, reason, clientName, at.
type CredentialEvent = credential.Event

// Credential event kinds (CredentialEvent.Kind).
const (
	EventIssued              = credential.EventIssued
	EventRefreshed           = credential.EventRefreshed
	EventRotated             = credential.EventRotated
	EventRevoked             = credential.EventRevoked
	EventAudienceRefused     = credential.EventAudienceRefused
	EventPairingFailed       = credential.EventPairingFailed
	EventAuthorizationFailed = credential.EventAuthorizationFailed
)

// SubscribeCredentialEvents calls fn with every credential event, from the
// goroutine that caused it (an actor's, or a request's): fn must not
// block. Every event is also logged ("credential event"). The returned
// function unsubscribes.
func (r *Runtime) SubscribeCredentialEvents(fn func(CredentialEvent)) (unsubscribe func()) {
	sub := r.system.EventStream.Subscribe(func(evt any) {
		if e, ok := evt.(*credential.Event); ok {
			fn(*e)
		}
	})
	return func() { r.system.EventStream.Unsubscribe(sub) }
}

// credentialEvent logs e and publishes it to the subscribers.
func (r *Runtime) credentialEvent(e credential.Event) {
	if e.At.IsZero() {
		e.At = r.cfg.Now()
	}
	e.Log(r.cfg.Logger)
	r.system.EventStream.Publish(&e)
}

// oauthGrants is the runtime as the authorization server's and the JWT
// verifier's store of client grants (internal/oauth.Grants).
type oauthGrants struct{ r *Runtime }

// IssueGrant creates a client grant for an OAuth client and returns its
// first access token, bound to the resource, and a refresh token.
func (g oauthGrants) IssueGrant(ctx context.Context, req oauth.GrantRequest) (oauth.Tokens, error) {
	r := g.r
	if err := r.checkOpen(); err != nil {
		return oauth.Tokens{}, err
	}
	id := token.NewID("cl_")
	pid, err := r.spawnGrant(id, req.Label, req.Access, viaOAuth)
	if err != nil {
		return oauth.Tokens{}, err
	}
	res, err := r.issueToken(ctx, target{pid: pid, gone: ErrUnknownClient}, &client.IssueToken{Audience: req.Audience, OAuthClient: req.ClientHash})
	if err != nil {
		r.dropGrant(id, pid)
		return oauth.Tokens{}, err
	}
	return tokensOf(id, res), nil
}

// RefreshGrant redeems a refresh token of the OAuth client whose client_id
// hashes to clientHash: the same grant's next access token and a new
// refresh token. A reused refresh token — of any earlier generation of the
// grant's family — revokes the grant (fault.ErrRefreshReused); any other
// refusal is fault.ErrInvalidGrant. On several nodes the grant's home
// redeems it (SPEC §5d.9).
func (g oauthGrants) RefreshGrant(ctx context.Context, refreshToken, clientHash string) (oauth.Tokens, error) {
	return g.r.refreshGrant(ctx, refreshToken, clientHash, false)
}

// refreshGrant is RefreshGrant; forwarded: the call came from another node
// (it is not sent on).
func (r *Runtime) refreshGrant(ctx context.Context, refreshToken, clientHash string, forwarded bool) (oauth.Tokens, error) {
	if err := r.checkOpen(); err != nil {
		return oauth.Tokens{}, err
	}
	invalid := fmt.Errorf("refresh token: %w", fault.ErrInvalidGrant)
	// The token names its grant: its row may be pruned long ago, and the
	// grant actor judges it by the family record (SPEC §5c.11).
	rt, ok := token.ParseRefresh(refreshToken)
	if !ok {
		return oauth.Tokens{}, invalid
	}
	t, err := r.clientActor(rt.Family)
	if nh, ok := errors.AsType[*NotHomeError](err); ok {
		if forwarded {
			return oauth.Tokens{}, fmt.Errorf("client %s lives on %s: %w", rt.Family, nh.Home, ErrUnavailable)
		}
		// Its home's actor is the one writer of its family: of two nodes
		// racing with one token, one rotates it, the other is a reuse.
		toks, err := r.callHome(ctx, nh.Home, pathOAuthRefresh, refreshCall{RefreshToken: refreshToken, ClientHash: clientHash})
		if err != nil {
			return oauth.Tokens{}, err
		}
		return *toks, nil
	}
	switch {
	case errors.Is(err, ErrUnavailable):
		return oauth.Tokens{}, err // being adopted: try again
	case err != nil:
		return oauth.Tokens{}, invalid
	}
	res, err := r.issueToken(ctx, t, &client.RedeemRefresh{Token: refreshToken, OAuthClient: clientHash})
	switch {
	case errors.Is(err, fault.ErrRefreshReused):
		// The actor revoked its grant and is stopping.
		r.mu.Lock()
		if r.clients[rt.Family] == t.pid {
			delete(r.clients, rt.Family)
		}
		r.mu.Unlock()
		return oauth.Tokens{}, err
	case errors.Is(err, ErrUnknownClient):
		return oauth.Tokens{}, invalid
	case err != nil:
		return oauth.Tokens{}, err
	}
	return tokensOf(rt.Family, res), nil
}

// RevokeGrant revokes grant id as RevokeClient does — its tokens 401, its
// sessions end, its streams close — recording reason (an authorization
// code presented again: credential.ReasonCodeReused), on its home node. A
// grant already gone is ErrUnknownClient.
func (g oauthGrants) RevokeGrant(ctx context.Context, id, reason string) error {
	return g.r.revokeGrant(ctx, id, reason, false)
}

func tokensOf(grant string, res *client.TokenIssued) oauth.Tokens {
	return oauth.Tokens{
		Grant: grant, Access: res.Access, AccessToken: res.Token,
		RefreshToken: res.RefreshToken, Expires: res.Expires,
	}
}

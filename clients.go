package mcpruntime

import (
	"context"
	"fmt"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/client"
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
	props := client.Props(client.Config{
		ID: id, Label: label, Access: access, Store: r.store, Now: r.cfg.Now,
		TTL: r.cfg.ClientTokenTTL, RevokedKept: r.cfg.RevokedKept, Logger: r.cfg.Logger,
	})
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return ClientToken{}, ErrClosed
	}
	pid, err := r.root.SpawnNamed(props, clientPrefix+id)
	if err == nil {
		r.clients[id] = pid
	}
	r.mu.Unlock()
	if err != nil {
		return ClientToken{}, fmt.Errorf("start client grant: %w", err)
	}
	tok, err := r.issueToken(ctx, pid, false)
	if err != nil {
		// The caller never learns the id: remove the grant rather than leave
		// one nobody can revoke.
		r.root.Send(pid, &client.Revoke{})
		r.mu.Lock()
		delete(r.clients, id)
		r.mu.Unlock()
		return ClientToken{}, err
	}
	return ClientToken{ClientID: id, Token: tok}, nil
}

// RefreshClient issues a new token for the grant; it shares the grant's
// namespace, so it keeps using the grant's MCP sessions. The previous
// tokens stay valid until their own expiry unless revokePrevious.
func (r *Runtime) RefreshClient(ctx context.Context, clientID string, revokePrevious bool) (string, error) {
	if err := r.checkOpen(); err != nil {
		return "", err
	}
	pid := r.clientPID(clientID)
	if pid == nil {
		return "", fmt.Errorf("client %q: %w", clientID, ErrUnknownClient)
	}
	return r.issueToken(ctx, pid, revokePrevious)
}

func (r *Runtime) issueToken(ctx context.Context, pid *actor.PID, revokePrevious bool) (string, error) {
	res, err := ask[*client.TokenIssued](ctx, r, pid, &client.IssueToken{RevokePrevious: revokePrevious}, r.cfg.ActorTimeout)
	if err != nil {
		return "", err
	}
	return res.Token, res.Err
}

// RevokeClient revokes every token of the grant and removes it.
func (r *Runtime) RevokeClient(ctx context.Context, clientID string) error {
	if err := r.checkOpen(); err != nil {
		return err
	}
	// Claim the grant first: of two racing revokes, exactly one finds it.
	r.mu.Lock()
	pid := r.clients[clientID]
	delete(r.clients, clientID)
	r.mu.Unlock()
	if pid == nil {
		return fmt.Errorf("client %q: %w", clientID, ErrUnknownClient)
	}
	res, err := ask[*client.Revoked](ctx, r, pid, &client.Revoke{}, r.cfg.ActorTimeout)
	if err != nil {
		return err
	}
	return res.Err
}

package mcpruntime

import (
	"context"
	"fmt"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/names"
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
	pid, err := r.root.SpawnNamed(props, names.Client(id))
	if err == nil {
		r.clients[id] = pid
	}
	r.mu.Unlock()
	if err != nil {
		return ClientToken{}, fmt.Errorf("start client grant: %w", err)
	}
	tok, err := r.issueToken(ctx, target{pid: pid, gone: ErrUnknownClient}, false)
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
	t, err := r.clientActor(clientID)
	if err != nil {
		return "", err
	}
	return r.issueToken(ctx, t, revokePrevious)
}

func (r *Runtime) issueToken(ctx context.Context, t target, revokePrevious bool) (string, error) {
	res, err := call[*client.TokenIssued](ctx, r, t, &client.IssueToken{RevokePrevious: revokePrevious}, r.budget(opActor, ""))
	if err != nil {
		return "", err
	}
	return res.Token, nil
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
	_, err := call[*client.Revoked](ctx, r, target{pid: pid, gone: ErrUnknownClient}, &client.Revoke{}, r.budget(opActor, ""))
	return err
}

package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// ClientGrantInfo is a client grant as a host sees it, to know who holds
// access and revoke one by one (SPEC §7.2). It carries no token and no
// hash. Its fields:
//
//   - ID string: the grant's id, as RevokeClient takes it.
//   - Kind string: how it came: "admin" (IssueClient), "oauth" (a sign-in
//     at the runtime's own authorization server) or "jwt" (the subject of
//     an external issuer's JWTs, resource-server mode).
//   - Label string: the admin-given label, "oauth: <client name>" or
//     "jwt: <subject>".
//   - Access string: "read-only" or "read-write".
//   - Created time.Time: when the grant was made.
//   - LastIssued time.Time: when the grant last had a token issued,
//     refreshed, rotated or (a JWT) first presented, among the rows kept:
//     the runtime writes nothing per request, so this is its last use to
//     within a token's lifetime. Created when no row is kept.
//   - Expires time.Time: when its last live token stops authenticating (a
//     refresh token's expiry included); zero when one never expires or
//     none is live (LiveTokens says which).
//   - LiveTokens int: its live access and refresh tokens.
//   - Home string: the node whose actor serves it (several nodes); "" on
//     one node.
//
// JSON names: id, kind, label, access, created, lastIssued, expires
// (absent when zero), liveTokens, home (absent when "").
type ClientGrantInfo struct {
	ID         string    `json:"id"`
	Kind       string    `json:"kind"`
	Label      string    `json:"label"`
	Access     string    `json:"access"`
	Created    time.Time `json:"created"`
	LastIssued time.Time `json:"lastIssued"`
	Expires    time.Time `json:"expires,omitzero"`
	LiveTokens int       `json:"liveTokens"`
	Home       string    `json:"home,omitempty"`
}

// ClientGrantPage is one page of client grants, ordered by id.
type ClientGrantPage struct {
	Grants []ClientGrantInfo
	// NextCursor, as ListOptions.Cursor, lists the grants after this page;
	// empty on the last page.
	NextCursor string
}

// ListClientGrants returns one page of the client grants — admin-issued,
// OAuth sign-ins and JWT subjects — ordered by id, read from the store,
// paged as ListThreads (the same limits and cursor errors). A grant made
// or revoked between two pages appears or not by where its id sorts; none
// appears twice.
func (r *Runtime) ListClientGrants(ctx context.Context, opts ListOptions) (ClientGrantPage, error) {
	if err := r.checkOpen(); err != nil {
		return ClientGrantPage{}, err
	}
	if err := ctx.Err(); err != nil {
		return ClientGrantPage{}, err
	}
	limit := opts.Limit
	switch {
	case limit < 0:
		return ClientGrantPage{}, fmt.Errorf("limit %d: %w", limit, ErrInvalidArgument)
	case limit == 0:
		limit = DefaultPageSize
	case limit > MaxPageSize:
		limit = MaxPageSize
	}
	after := ""
	if opts.Cursor != "" {
		var err error
		if after, err = decodeCursor(opts.Cursor); err != nil {
			return ClientGrantPage{}, err
		}
	}
	rd := r.store.Read()
	gs, err := rd.ClientGrantsAfter(after, limit+1) // one more: is there a next page?
	if err != nil {
		return ClientGrantPage{}, err
	}
	var page ClientGrantPage
	if len(gs) > limit {
		gs = gs[:limit]
		page.NextCursor = encodeCursor(gs[limit-1].ID)
	}
	now := r.cfg.Now()
	page.Grants = make([]ClientGrantInfo, len(gs))
	for i, g := range gs {
		page.Grants[i] = clientGrantInfo(rd, g, now)
	}
	return page, nil
}

// ClientGrant returns the client grant id. One never made, revoked or
// otherwise gone is ErrUnknownClient, whatever the id looks like.
func (r *Runtime) ClientGrant(ctx context.Context, id string) (ClientGrantInfo, error) {
	if err := r.checkOpen(); err != nil {
		return ClientGrantInfo{}, err
	}
	if err := ctx.Err(); err != nil {
		return ClientGrantInfo{}, err
	}
	rd := r.store.Read()
	g, err := rd.ClientGrant(id)
	if errors.Is(err, memdb.ErrNotFound) || err == nil && g.State != memdb.StateLive {
		return ClientGrantInfo{}, fmt.Errorf("client %q: %w", id, ErrUnknownClient)
	}
	if err != nil {
		return ClientGrantInfo{}, err
	}
	return clientGrantInfo(rd, g, r.cfg.Now()), nil
}

// clientGrantInfo is g with what its token rows say at now.
func clientGrantInfo(rd *memdb.Reader, g *memdb.ClientGrant, now time.Time) ClientGrantInfo {
	info := ClientGrantInfo{
		ID: g.ID, Kind: g.Via, Label: g.Label, Access: g.Access,
		Created: g.Created, LastIssued: g.Created, Home: g.Home,
	}
	rows, _ := rd.CredentialsByNamespace(principal.ClientNamespace(g.ID))
	never := false
	for _, c := range rows {
		if c.Issued.After(info.LastIssued) {
			info.LastIssued = c.Issued
		}
		if !c.LiveAt(now) {
			continue
		}
		info.LiveTokens++
		if c.Expires.IsZero() {
			never = true
		} else if c.Expires.After(info.Expires) {
			info.Expires = c.Expires
		}
	}
	if never {
		info.Expires = time.Time{}
	}
	return info
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/token"
)

// TestListClientGrants: every client grant is listed — admin-issued, an
// OAuth sign-in, a JWT subject — with its kind, label, access, created,
// lastIssued, expiry and live tokens, and no token or hash; ClientGrant
// shows one, and an unknown or revoked id is ErrUnknownClient (SPEC §7.2).
func TestListClientGrants(t *testing.T) {
	ctx := context.Background()
	clock := newFakeClock()
	e := newOAuthEnv(t, mcpruntime.Config{Now: clock.Now, ClientTokenTTL: time.Hour,
		OAuth: mcpruntime.OAuthConfig{RefreshTokenTTL: 48 * time.Hour}})
	t0 := clock.Now()
	ci, err := e.rt.IssueClient(ctx, "ci", "read-write")
	noErr(t, err)
	clock.Advance(time.Minute)
	ro, err := e.rt.IssueClient(ctx, "", "read-only")
	noErr(t, err)
	clock.Advance(time.Minute)
	_, tokens := e.signIn("read-only")
	access, _ := tokens["access_token"].(string)
	refresh, _ := tokens["refresh_token"].(string)
	p, err := e.rt.Authenticate(access)
	noErr(t, err)
	oauthID := p.Client
	clock.Advance(time.Minute)
	tok2, err := e.rt.RefreshClient(ctx, ci.ClientID, false)
	noErr(t, err)

	page, err := e.rt.ListClientGrants(ctx, mcpruntime.ListOptions{})
	noErr(t, err)
	if page.NextCursor != "" || len(page.Grants) != 3 {
		t.Fatalf("page = %+v, want the 3 grants", page)
	}
	byID := map[string]mcpruntime.ClientGrantInfo{}
	for i, g := range page.Grants {
		if i > 0 && page.Grants[i-1].ID >= g.ID {
			t.Errorf("grants not ordered by id: %s then %s", page.Grants[i-1].ID, g.ID)
		}
		byID[g.ID] = g
	}
	want := map[string]mcpruntime.ClientGrantInfo{
		ci.ClientID: {ID: ci.ClientID, Kind: "admin", Label: "ci", Access: "read-write", Created: t0,
			LastIssued: t0.Add(3 * time.Minute), Expires: t0.Add(3*time.Minute + time.Hour), LiveTokens: 2},
		ro.ClientID: {ID: ro.ClientID, Kind: "admin", Label: "", Access: "read-only", Created: t0.Add(time.Minute),
			LastIssued: t0.Add(time.Minute), Expires: t0.Add(time.Minute + time.Hour), LiveTokens: 1},
		oauthID: {ID: oauthID, Kind: "oauth", Label: "oauth: hand client", Access: "read-only", Created: t0.Add(2 * time.Minute),
			LastIssued: t0.Add(2 * time.Minute), Expires: t0.Add(2*time.Minute + 48*time.Hour), LiveTokens: 2},
	}
	for id, w := range want {
		if got := byID[id]; !equalInfo(got, w) {
			t.Errorf("grant %s = %+v,\nwant %+v", id, got, w)
		}
		one, err := e.rt.ClientGrant(ctx, id)
		if err != nil || !equalInfo(one, w) {
			t.Errorf("ClientGrant(%s) = %+v, %v", id, one, err)
		}
	}
	raw, err := json.Marshal(page.Grants)
	noErr(t, err)
	for _, secret := range []string{ci.Token, tok2, ro.Token, access, refresh} {
		if strings.Contains(string(raw), secret) || strings.Contains(string(raw), token.Hash(secret)) {
			t.Fatalf("the listing shows a token or its hash: %s", raw)
		}
	}
	for _, field := range []string{`"kind"`, `"label"`, `"access"`, `"created"`, `"lastIssued"`, `"expires"`, `"liveTokens"`} {
		if !strings.Contains(string(raw), field) {
			t.Errorf("listing JSON %s has no %s", raw, field)
		}
	}

	// Past every expiry: nothing live, no expiry shown.
	clock.Advance(49 * time.Hour)
	g, err := e.rt.ClientGrant(ctx, oauthID)
	if err != nil || g.LiveTokens != 0 || !g.Expires.IsZero() {
		t.Errorf("an expired grant = %+v, %v, want 0 live tokens and no expiry", g, err)
	}

	noErr(t, e.rt.RevokeClient(ctx, ci.ClientID))
	for _, id := range []string{ci.ClientID, "cl_00000000000000000000000000000000", "", "../x"} {
		if _, err := e.rt.ClientGrant(ctx, id); !errors.Is(err, mcpruntime.ErrUnknownClient) {
			t.Errorf("ClientGrant(%q) = %v, want ErrUnknownClient", id, err)
		}
	}
	if page, _ := e.rt.ListClientGrants(ctx, mcpruntime.ListOptions{}); len(page.Grants) != 2 {
		t.Errorf("after a revoke, %d grants listed, want 2", len(page.Grants))
	}
}

func equalInfo(a, b mcpruntime.ClientGrantInfo) bool {
	return a.ID == b.ID && a.Kind == b.Kind && a.Label == b.Label && a.Access == b.Access && a.Created.Equal(b.Created) &&
		a.LastIssued.Equal(b.LastIssued) && a.Expires.Equal(b.Expires) && a.LiveTokens == b.LiveTokens && a.Home == b.Home
}

// TestListClientGrantsJWTKind: a JWT subject's grant is listed with kind
// "jwt" and label "jwt: <sub>"; a JWT first presented later moves its
// lastIssued (SPEC §7.2).
func TestListClientGrantsJWTKind(t *testing.T) {
	p := newIDP(t)
	clock := newFakeClock()
	e := newOAuthEnv(t, mcpruntime.Config{Now: clock.Now, OAuth: mcpruntime.OAuthConfig{Issuer: p.srv.URL, IssuerRootCAs: p.pool()}})
	resource := e.origin + "/mcp"
	t0 := clock.Now()
	pr, err := e.rt.Authenticate(p.token(t, "alice", resource, "", t0, t0.Add(time.Hour)))
	noErr(t, err)
	clock.Advance(time.Minute)
	_, err = e.rt.Authenticate(p.token(t, "alice", resource, "", clock.Now(), t0.Add(2*time.Hour)))
	noErr(t, err)
	g, err := e.rt.ClientGrant(context.Background(), pr.Client)
	noErr(t, err)
	if g.Kind != "jwt" || g.Label != "jwt: alice" || g.Access != "read-only" || !g.Created.Equal(t0) ||
		!g.LastIssued.Equal(t0.Add(time.Minute)) || g.LiveTokens != 2 || !g.Expires.Equal(t0.Add(2*time.Hour+time.Minute)) {
		t.Errorf("JWT grant = %+v", g)
	}
}

// TestListClientGrantsPaged: pages of ?limit grants with a NextCursor;
// following it lists every grant once; a bad limit or cursor is
// ErrInvalidArgument.
func TestListClientGrantsPaged(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{ClientTokenTTL: mcpruntime.NoExpiry})
	const n = 230
	ids := map[string]bool{}
	for i := range n {
		c, err := rt.IssueClient(ctx, fmt.Sprintf("c%d", i), "read-only")
		noErr(t, err)
		ids[c.ClientID] = true
	}
	walk := func(limit int) []int {
		t.Helper()
		var sizes []int
		seen := map[string]bool{}
		last := ""
		for cursor := ""; ; {
			page, err := rt.ListClientGrants(ctx, mcpruntime.ListOptions{Limit: limit, Cursor: cursor})
			noErr(t, err)
			for _, g := range page.Grants {
				if seen[g.ID] || !ids[g.ID] || g.ID <= last {
					t.Fatalf("grant %s listed twice, unknown or out of order", g.ID)
				}
				seen[g.ID], last = true, g.ID
				if g.LiveTokens != 1 || !g.Expires.IsZero() {
					t.Fatalf("grant %s of a token that never expires = %+v, want 1 live token, no expiry", g.ID, g)
				}
			}
			sizes = append(sizes, len(page.Grants))
			if page.NextCursor == "" {
				break
			}
			cursor = page.NextCursor
		}
		if len(seen) != n {
			t.Fatalf("limit %d: %d grants listed, want %d", limit, len(seen), n)
		}
		return sizes
	}
	if got := fmt.Sprint(walk(0)); got != "[100 100 30]" {
		t.Errorf("default limit: pages of %s", got)
	}
	if got := fmt.Sprint(walk(5000)); got != "[230]" {
		t.Errorf("limit over the max: pages of %s", got)
	}
	for _, opts := range []mcpruntime.ListOptions{{Limit: -1}, {Cursor: "abc"}, {Cursor: "c1.!!"}} {
		if _, err := rt.ListClientGrants(ctx, opts); !errors.Is(err, mcpruntime.ErrInvalidArgument) {
			t.Errorf("ListClientGrants(%+v) = %v, want ErrInvalidArgument", opts, err)
		}
	}
}

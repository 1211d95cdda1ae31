package client_test

import (
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// SPEC §5c.11 (issue 24 row 7): reuse is detected over the grant's whole
// refresh family, not over the rows kept: after 20 rotations with
// RevokedKept 2, the first refresh token's row is long pruned, and
// presenting it revokes the grant (refresh_reused).
func TestRefreshReuseOfPrunedGenerationRevokesGrant(t *testing.T) {
	e := newEnv(t)
	var rec recorder
	e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 2, events: rec.add})
	first := e.issueOAuth()
	cur := first
	for i := range 20 {
		e.clock.Advance(time.Minute)
		cur = e.redeem(cur.RefreshToken, oauthA)
		if cur.Err() != nil {
			t.Fatalf("rotation %d = %v", i+1, cur.Err())
		}
	}
	refreshRows := 0
	for _, c := range e.tokens("g1") {
		if c.Kind == memdb.KindRefresh {
			refreshRows++
		}
	}
	if refreshRows > 1+2 {
		t.Fatalf("%d refresh token rows, want the live one and at most 2 revoked", refreshRows)
	}
	res := e.redeem(first.RefreshToken, oauthA)
	if !errors.Is(res.Err(), fault.ErrRefreshReused) || res.Token != "" {
		t.Fatalf("the first refresh token after 20 rotations = %+v, want ErrRefreshReused", res)
	}
	if n := len(e.tokens("g1")); n != 0 {
		t.Errorf("%d token rows left, want 0", n)
	}
	if _, err := e.store.Read().ClientGrant("g1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ClientGrant(g1) = %v, want ErrNotFound", err)
	}
	kinds := rec.kinds()
	if diff := cmp.Diff("revoked/refresh_reused", kinds[len(kinds)-1]); diff != "" {
		t.Errorf("last event (-want +got):\n%s", diff)
	}
}

// Only a holder of one of the grant's refresh tokens can make it revoked:
// a token naming the grant's family and an old generation but carrying
// another key, one of another family, and one of the newest generation
// with no row are unknown — invalid_grant, and the grant stays. So is a
// spent generation presented by another client.
func TestRefreshForgedReuseRevokesNothing(t *testing.T) {
	e := newEnv(t)
	e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 1})
	first := e.issueOAuth()
	cur := first
	for range 5 {
		cur = e.redeem(cur.RefreshToken, oauthA)
		if cur.Err() != nil {
			t.Fatal(cur.Err())
		}
	}
	held, _ := token.ParseRefresh(first.RefreshToken)
	otherKey, _ := token.NewRefresh(token.Refresh{Family: "g1", Generation: 1, Key: token.NewFamilyKey()})
	otherFamily, _ := token.NewRefresh(token.Refresh{Family: "g2", Generation: 1, Key: held.Key})
	newest, _ := token.NewRefresh(token.Refresh{Family: "g1", Generation: 6, Key: held.Key})
	made, _ := token.NewWith(token.RefreshPrefix)
	for _, test := range []struct{ name, tok, client string }{
		{"another key", otherKey, oauthA},
		{"another family", otherFamily, oauthA},
		{"the newest generation without its row", newest, oauthA},
		{"not a refresh token", made, oauthA},
		{"a spent generation, another client", first.RefreshToken, "hash-of-client-b"},
	} {
		t.Run(test.name, func(t *testing.T) {
			res := e.redeem(test.tok, test.client)
			if !errors.Is(res.Err(), fault.ErrInvalidGrant) || res.Token != "" {
				t.Errorf("RedeemRefresh = %+v, want ErrInvalidGrant", res)
			}
			if g := e.grant(e.g1()); g.State != memdb.StateLive || g.Refresh.Generation != 6 {
				t.Errorf("grant after a refused refresh = %+v, want live at generation 6", g)
			}
		})
	}
	// The held key at a pruned generation is reuse: its holder held one.
	forged, _ := token.NewRefresh(token.Refresh{Family: "g1", Generation: 2, Key: held.Key})
	if res := e.redeem(forged, oauthA); !errors.Is(res.Err(), fault.ErrRefreshReused) {
		t.Errorf("a pruned generation with the family's key = %+v, want ErrRefreshReused", res)
	}
}

// The grant record is the family's one record: its key is kept as a hash
// only, and no refresh token's text is in the store.
func TestRefreshFamilyRecord(t *testing.T) {
	e := newEnv(t)
	e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 16})
	first := e.issueOAuth()
	next := e.redeem(first.RefreshToken, oauthA)
	g := e.grant(e.g1())
	rt, _ := token.ParseRefresh(next.RefreshToken)
	want := memdb.RefreshFamily{OAuthClient: oauthA, KeyHash: token.FamilyKeyHash(rt.Key), Generation: 2}
	if diff := cmp.Diff(want, g.Refresh); diff != "" {
		t.Errorf("family record (-want +got):\n%s", diff)
	}
	if rt.Generation != 2 || rt.Family != "g1" {
		t.Errorf("the rotated token says %+v, want generation 2 of g1", rt)
	}
	// A second family for the same grant is refused.
	res := actortest.Ask[*client.TokenIssued](e.t, e.root, e.g1(), &client.IssueToken{Audience: resource, OAuthClient: oauthA})
	if !errors.Is(res.Err(), fault.ErrInvalidArgument) {
		t.Errorf("a second family = %v, want ErrInvalidArgument", res.Err())
	}
}

package client_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

const (
	resource = "https://rt.example/mcp"
	oauthA   = "hash-of-client-a"
)

// recorder keeps the audit records a grant actor sends.
type recorder struct {
	mu   sync.Mutex
	evts []credential.Event
}

func (r *recorder) add(e credential.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evts = append(r.evts, e)
}

func (r *recorder) kinds() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.evts {
		out = append(out, e.Kind+"/"+e.Reason)
	}
	return out
}

// g1 is the actor of grant g1, the one these tests spawn.
func (e *env) g1() *actor.PID { return actor.NewPID(e.sys.Address(), names.Client("g1")) }

func (e *env) issueOAuth() *client.TokenIssued {
	e.t.Helper()
	res := actortest.Ask[*client.TokenIssued](e.t, e.root, e.g1(), &client.IssueToken{Audience: resource, OAuthClient: oauthA})
	if res.Err() != nil {
		e.t.Fatalf("IssueToken(OAuth) = %v", res.Err())
	}
	return res
}

func (e *env) redeem(refresh, oauthClient string) *client.TokenIssued {
	e.t.Helper()
	return actortest.Ask[*client.TokenIssued](e.t, e.root, e.g1(), &client.RedeemRefresh{Token: refresh, OAuthClient: oauthClient})
}

// SPEC §5c: an OAuth grant's first answer is an access token bound to the
// resource and a refresh token of the client; the refresh token's row
// keeps the grant's namespace but authenticates nothing.
func TestIssueWithRefresh(t *testing.T) {
	e := newEnv(t)
	var rec recorder
	e.spawn("g1", grantOpts{ttl: time.Hour, refreshTTL: 24 * time.Hour, events: rec.add})
	res := e.issueOAuth()
	if rt, ok := token.ParseRefresh(res.RefreshToken); !token.ValidWith(res.Token, token.ClientPrefix) || !ok || rt.Family != "g1" || rt.Generation != 1 {
		t.Fatalf("IssueToken = %q, %q; want a client token and the first refresh token of g1's family", res.Token, res.RefreshToken)
	}
	if !res.Expires.Equal(actortest.T0.Add(time.Hour)) {
		t.Errorf("Expires = %v, want %v", res.Expires, actortest.T0.Add(time.Hour))
	}
	acc := e.cred(res.CredentialID)
	if acc.Audience != resource || acc.Kind != memdb.KindClient {
		t.Errorf("access row = %+v, want a client token bound to %s", acc, resource)
	}
	rows := e.tokens("g1")
	if len(rows) != 2 {
		t.Fatalf("%d rows, want the access token and the refresh token", len(rows))
	}
	for _, c := range rows {
		if c.Kind == memdb.KindRefresh && (c.OAuthClient != oauthA || c.Audience != resource || !c.Expires.Equal(actortest.T0.Add(24*time.Hour))) {
			t.Errorf("refresh row = %+v", c)
		}
	}
	r := e.store.Read()
	if _, err := credential.Authenticate(r, res.RefreshToken, actortest.T0); err == nil {
		t.Errorf("a refresh token authenticated")
	}
	p, err := credential.Authenticate(r, res.Token, actortest.T0)
	if err != nil || p.Audience != resource || p.Namespace != "client:g1" {
		t.Errorf("Authenticate(access) = %+v, %v", p, err)
	}
	if diff := cmp.Diff([]string{"issued/"}, rec.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// SPEC §5c: redeeming a refresh token keeps the grant (same namespace),
// rotates the refresh token, and keeps the audience.
func TestRedeemRefreshRotates(t *testing.T) {
	e := newEnv(t)
	var rec recorder
	e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 16, events: rec.add})
	first := e.issueOAuth()
	e.clock.Advance(time.Minute)
	next := e.redeem(first.RefreshToken, oauthA)
	if next.Err() != nil {
		t.Fatalf("RedeemRefresh = %v", next.Err())
	}
	if next.RefreshToken == first.RefreshToken || next.Token == first.Token {
		t.Fatal("RedeemRefresh returned the same tokens")
	}
	p, err := credential.Authenticate(e.store.Read(), next.Token, e.clock.Now())
	if err != nil || p.Namespace != "client:g1" || p.Audience != resource {
		t.Errorf("new access token = %+v, %v; want client:g1 bound to %s", p, err, resource)
	}
	spent, _ := e.store.Read().CredentialByTokenHash(token.Hash(first.RefreshToken))
	if spent.State != memdb.StateRevoked || spent.RevokeReason != credential.ReasonUsed {
		t.Errorf("spent refresh row = %+v, want revoked %q", spent, credential.ReasonUsed)
	}
	if diff := cmp.Diff([]string{"issued/", "refreshed/", "rotated/"}, rec.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// SPEC §5c: a spent refresh token presented again revokes the grant: every
// token row goes, the grant goes, the actor stops.
func TestRefreshReuseRevokesGrant(t *testing.T) {
	e := newEnv(t)
	var rec recorder
	e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 16, events: rec.add})
	first := e.issueOAuth()
	if res := e.redeem(first.RefreshToken, oauthA); res.Err() != nil {
		t.Fatalf("first RedeemRefresh = %v", res.Err())
	}
	res := e.redeem(first.RefreshToken, oauthA)
	if !errors.Is(res.Err(), fault.ErrRefreshReused) || res.Token != "" {
		t.Fatalf("RedeemRefresh again = %+v, want ErrRefreshReused and no token", res)
	}
	if n := len(e.tokens("g1")); n != 0 {
		t.Errorf("%d token rows left, want 0", n)
	}
	if _, err := e.store.Read().ClientGrant("g1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ClientGrant(g1) = %v, want ErrNotFound", err)
	}
	eventually(t, "client/g1 stopped", func() bool {
		_, ok := e.sys.ProcessRegistry.GetLocal("client/g1")
		return !ok
	})
	if diff := cmp.Diff([]string{"issued/", "refreshed/", "rotated/", "revoked/refresh_reused"}, rec.kinds()); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// A refresh token presented by another client, an expired one, an access
// token and a made-up one are invalid_grant, and leave the grant as it is.
func TestRedeemRefreshRefusals(t *testing.T) {
	e := newEnv(t)
	e.spawn("g1", grantOpts{ttl: time.Hour, refreshTTL: 2 * time.Hour, revokedKept: 16})
	first := e.issueOAuth()
	made, _ := token.NewWith(token.RefreshPrefix)
	tests := []struct {
		name, tok, client string
		advance           time.Duration
	}{
		{"another client", first.RefreshToken, "hash-of-client-b", 0},
		{"an access token", first.Token, oauthA, 0},
		{"made up", made, oauthA, 0},
		{"expired", first.RefreshToken, oauthA, 3 * time.Hour},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e.clock.Advance(test.advance)
			res := e.redeem(test.tok, test.client)
			if !errors.Is(res.Err(), fault.ErrInvalidGrant) || res.Token != "" {
				t.Errorf("RedeemRefresh = %+v, want ErrInvalidGrant", res)
			}
			if g := e.grant(e.g1()); g.State != memdb.StateLive {
				t.Errorf("grant after a refused refresh = %+v, want live", g)
			}
		})
	}
}

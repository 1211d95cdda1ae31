package client_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/client"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

func TestGrantRecordWrittenOnStart(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{access: memdb.AccessReadOnly})
	want := memdb.ClientGrant{ID: "g1", Label: "label of g1", Access: memdb.AccessReadOnly, State: memdb.StateLive, Created: actortest.T0, Via: "oauth"}
	if diff := cmp.Diff(want, e.grant(pid)); diff != "" {
		t.Errorf("GetGrant (-want +got):\n%s", diff)
	}
	if n := len(e.tokens("g1")); n != 0 {
		t.Errorf("a new grant has %d tokens, want 0", n)
	}
}

func TestIssueToken(t *testing.T) {
	tests := []struct {
		name        string
		access      string
		ttl         time.Duration
		wantExpires time.Time
	}{
		{name: "read-write with a TTL", access: memdb.AccessReadWrite, ttl: time.Hour, wantExpires: actortest.T0.Add(time.Hour)},
		{name: "read-only without a TTL", access: memdb.AccessReadOnly},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			pid := e.spawn("g1", grantOpts{access: test.access, ttl: test.ttl})
			res := e.issue(pid, false)
			if !token.Valid(res.Token) || !strings.HasPrefix(res.CredentialID, "ctok_") {
				t.Fatalf("IssueToken = %+v, want a token and a ctok_ id", res)
			}
			want := &memdb.Credential{
				ID:        res.CredentialID,
				TokenHash: token.Hash(res.Token),
				Kind:      memdb.KindClient,
				Namespace: "client:g1",
				Client:    "g1",
				Access:    test.access,
				Issued:    actortest.T0,
				LastLive:  actortest.T0,
				Expires:   test.wantExpires,
				State:     memdb.StateLive,
			}
			got := e.cred(res.CredentialID)
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("token row (-want +got):\n%s", diff)
			}
			if strings.Contains(fmt.Sprintf("%+v", got), res.Token) {
				t.Errorf("the token itself is stored: %+v", got)
			}
			byHash, err := e.store.Read().CredentialByTokenHash(token.Hash(res.Token))
			if err != nil || byHash.ID != res.CredentialID {
				t.Errorf("CredentialByTokenHash = %+v, %v; want %s", byHash, err, res.CredentialID)
			}
			if client.Namespace("g1") != "client:g1" {
				t.Errorf("Namespace(g1) = %q, want client:g1", client.Namespace("g1"))
			}
		})
	}
}

func TestRefreshKeepsNamespace(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour})
	first := e.issue(pid, false)
	e.clock.Advance(time.Minute)
	second := e.issue(pid, false)

	if first.Token == second.Token || first.CredentialID == second.CredentialID {
		t.Fatalf("refresh returned the same token or id: %+v, %+v", first, second)
	}
	a, b := e.cred(first.CredentialID), e.cred(second.CredentialID)
	if a.Namespace != "client:g1" || b.Namespace != "client:g1" {
		t.Errorf("namespaces %q and %q, want both client:g1", a.Namespace, b.Namespace)
	}
	if !a.LiveAt(e.clock.Now()) || !b.LiveAt(e.clock.Now()) {
		t.Errorf("after a refresh without revokePrevious: first %+v, second %+v; want both live", a, b)
	}
	// A refresh does not extend the older token.
	if !a.Expires.Equal(actortest.T0.Add(time.Hour)) || !b.Expires.Equal(actortest.T0.Add(time.Hour+time.Minute)) {
		t.Errorf("expiries %v and %v, want %v and %v", a.Expires, b.Expires, actortest.T0.Add(time.Hour), actortest.T0.Add(time.Hour+time.Minute))
	}
}

func TestRevokePrevious(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 16})
	olds := []string{e.issue(pid, false).CredentialID, e.issue(pid, false).CredentialID}
	e.clock.Advance(time.Minute)

	latest := e.issue(pid, true)
	for _, id := range olds {
		c := e.cred(id)
		if c.State != memdb.StateRevoked || c.RevokeReason != "refreshed" || !c.Revoked.Equal(e.clock.Now()) {
			t.Errorf("previous token %s = %+v, want revoked now", id, c)
		}
	}
	if c := e.cred(latest.CredentialID); !c.LiveAt(e.clock.Now()) {
		t.Errorf("new token = %+v, want live", c)
	}
	if n := len(e.tokens("g1")); n != 3 {
		t.Errorf("%d token rows, want 3", n)
	}
}

func TestTokenExpiry(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 16})
	first := e.issue(pid, false)
	e.clock.Advance(30 * time.Minute)
	second := e.issue(pid, false)
	e.clock.Advance(31 * time.Minute) // first is past its TTL, second is not

	if c := e.cred(first.CredentialID); c.LiveAt(e.clock.Now()) {
		t.Errorf("first token %+v live past its TTL", c)
	}
	if c := e.cred(second.CredentialID); !c.LiveAt(e.clock.Now()) {
		t.Errorf("second token %+v not live within its TTL", c)
	}
	// The next issue records the expiry.
	e.issue(pid, false)
	if c := e.cred(first.CredentialID); c.State != memdb.StateRevoked || c.RevokeReason != "expired" {
		t.Errorf("expired token after the next issue = %+v, want revoked \"expired\"", c)
	}
	if c := e.cred(second.CredentialID); c.State != memdb.StateLive {
		t.Errorf("unexpired token state = %q, want live", c.State)
	}
}

func TestRevoke(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour})
	other := e.spawn("g2", grantOpts{ttl: time.Hour})
	e.issue(pid, false) // expires at 1h
	e.clock.Advance(30 * time.Minute)
	e.issue(pid, false)
	e.issue(pid, false)
	e.clock.Advance(31 * time.Minute) // the first token has expired, two are live
	kept := e.issue(other, false).Token

	r := actortest.Ask[*client.Revoked](t, e.root, pid, &client.Revoke{})
	if r.Err() != nil || r.Tokens != 2 {
		t.Errorf("Revoke = %+v, want 2 live tokens revoked", r)
	}
	if n := len(e.tokens("g1")); n != 0 {
		t.Errorf("%d token rows left after revoke, want 0", n)
	}
	if _, err := e.store.Read().ClientGrant("g1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ClientGrant(g1) after revoke = %v, want ErrNotFound", err)
	}
	if c, err := e.store.Read().CredentialByTokenHash(token.Hash(kept)); err != nil || !c.LiveAt(e.clock.Now()) {
		t.Errorf("g2's token after revoking g1 = %+v, %v; want live", c, err)
	}
	if g := e.grant(other); g.State != memdb.StateLive {
		t.Errorf("g2 after revoking g1 = %+v, want live", g)
	}

	// The actor stops; a later message reaches no one.
	eventually(t, "client/g1 stopped", func() bool {
		_, ok := e.sys.ProcessRegistry.GetLocal("client/g1")
		return !ok
	})
	if _, err := e.root.RequestFuture(pid, &client.GetGrant{}, actortest.Timeout).Result(); !errors.Is(err, actor.ErrDeadLetter) {
		t.Errorf("GetGrant to the revoked grant's actor: %v, want ErrDeadLetter", err)
	}
}

// TestRevokeAnswersQueuedMessages: messages already queued behind a Revoke
// get fault.ErrUnknownClient (its actor answers it until it has
// stopped), not silence until the caller's timeout.
func TestRevokeAnswersQueuedMessages(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour})
	e.issue(pid, false)

	sendSystem(t, e.sys, pid, &actor.SuspendMailbox{})
	fRevoke := e.root.RequestFuture(pid, &client.Revoke{}, actortest.Timeout)
	queued := []any{&client.IssueToken{}, &client.GetGrant{}, &client.Revoke{}}
	fs := make([]*actor.Future, len(queued))
	for i, msg := range queued {
		fs[i] = e.root.RequestFuture(pid, msg, actortest.Timeout)
	}
	sendSystem(t, e.sys, pid, &actor.ResumeMailbox{})

	if res, err := fRevoke.Result(); err != nil || errOf(res) != nil {
		t.Fatalf("Revoke = %v, %v", res, err)
	}
	for i, f := range fs {
		res, err := f.Result()
		if err != nil {
			t.Errorf("%T queued behind Revoke: %v, want a reply carrying ErrUnknownClient", queued[i], err)
			continue
		}
		if got := errOf(res); !errors.Is(got, fault.ErrUnknownClient) {
			t.Errorf("%T queued behind Revoke = %v, want ErrUnknownClient", queued[i], got)
		}
	}
	// Nothing was issued after the revocation.
	if n := len(e.tokens("g1")); n != 0 {
		t.Errorf("%d token rows after revoke, want 0", n)
	}
}

func TestPruneRevokedTokens(t *testing.T) {
	e := newEnv(t)
	pid := e.spawn("g1", grantOpts{ttl: time.Hour, revokedKept: 2})
	var ids []string
	for i := range 5 {
		ids = append(ids, e.issue(pid, true).CredentialID)
		e.clock.Advance(time.Minute)
		// ids[:i] were revoked in that order: the two most recent are kept,
		// with the live one.
		var got []string
		for _, c := range e.tokens("g1") {
			got = append(got, c.ID)
		}
		want := slices.Clone(ids[max(0, i-2):])
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("token rows after issue %d (-want +got):\n%s", i+1, diff)
		}
	}
	if c := e.cred(ids[4]); c.State != memdb.StateLive {
		t.Errorf("newest token state = %q, want live", c.State)
	}
}

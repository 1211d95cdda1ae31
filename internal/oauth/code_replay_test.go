package oauth

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// revokedGrant is one RevokeGrant the fake was asked.
type revokedGrant struct{ grant, reason string }

func (g *fakeGrants) RevokeGrant(_ context.Context, grant, reason string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked = append(g.revoked, revokedGrant{grant, reason})
	return nil
}

func (g *fakeGrants) revocations() []revokedGrant {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]revokedGrant(nil), g.revoked...)
}

// SPEC §5c.9 (RFC 6749 §4.1.2): a code presented again after its exchange
// is invalid_grant, answered as an unknown code, and the grant its first
// exchange issued is revoked (reason code_reused), whichever client
// presents it.
func TestCodeReplayRevokesGrant(t *testing.T) {
	for _, test := range []struct {
		name    string
		another bool
	}{{"the same client", false}, {"another client", true}} {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.register()
			verifier, challenge := pkce("abc")
			code := e.approve(e.authParams(id, challenge), AccessReadOnly).Get("code")
			if a := e.exchange(id, code, verifier); a.status != http.StatusOK {
				t.Fatalf("first exchange = %d %s", a.status, a.body)
			}
			if got := e.grants.revocations(); len(got) != 0 {
				t.Fatalf("revoked before the replay: %v", got)
			}
			by := id
			if test.another {
				by = e.register()
			}
			replay := e.exchange(by, code, verifier)
			unknown := e.exchange(by, "never-issued-code", verifier)
			if replay.status != http.StatusBadRequest || replay.body != unknown.body {
				t.Errorf("replay = %d %s; unknown code = %d %s; want the same invalid_grant", replay.status, replay.body, unknown.status, unknown.body)
			}
			if diff := cmp.Diff([]revokedGrant{{"cl_1", "code_reused"}}, e.grants.revocations(), cmp.AllowUnexported(revokedGrant{})); diff != "" {
				t.Errorf("grants revoked (-want +got):\n%s", diff)
			}
			if !contains(e.reasons(kindAuthFailed), "code_reused") {
				t.Errorf("audit reasons %v, want code_reused", e.reasons(kindAuthFailed))
			}
			// A third presentation revokes nothing more (the grant is gone)
			// but is refused the same.
			if a := e.exchange(id, code, verifier); a.status != http.StatusBadRequest || a.json(t)["error"] != "invalid_grant" {
				t.Errorf("third exchange = %d %s", a.status, a.body)
			}
			if n := len(e.grants.revocations()); n != 1 {
				t.Errorf("%d revocations after the third exchange, want 1", n)
			}
		})
	}
}

// A code whose exchange failed (here, the wrong verifier) issued nothing:
// presenting it again is refused and revokes nothing.
func TestCodeReplayAfterFailedExchange(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	verifier, challenge := pkce("abc")
	code := e.approve(e.authParams(id, challenge), AccessReadOnly).Get("code")
	wrong, _ := pkce("zzz")
	if a := e.exchange(id, code, wrong); a.status != http.StatusBadRequest {
		t.Fatalf("wrong verifier = %d %s", a.status, a.body)
	}
	if a := e.exchange(id, code, verifier); a.status != http.StatusBadRequest || a.json(t)["error"] != "invalid_grant" {
		t.Errorf("replay = %d %s, want invalid_grant", a.status, a.body)
	}
	if got := e.grants.revocations(); len(got) != 0 || len(e.grants.requests()) != 0 {
		t.Errorf("revoked %v, issued %v; want nothing", got, e.grants.requests())
	}
}

// SPEC §5c.9, §5c.16: a spent code is remembered until 10 minutes after
// its expiry, within the codes' one bound; when the table is full the
// spent code that expired first is forgotten before a sign-in is refused.
func TestCodesRememberSpentWithinBound(t *testing.T) {
	c := newCodes(2)
	exp := t0.Add(DefaultCodeTTL)
	c.add("a", &Code{Expires: exp})
	c.add("b", &Code{Expires: exp.Add(time.Hour)})
	if _, first := c.spend("a"); !first {
		t.Fatal("the first spend of a is not first")
	}
	c.issued("a", "cl_a")
	// Past a's expiry, within the margin: still a replay, naming its grant.
	if g, first := c.spend("a"); g == nil || first || g.Grant != "cl_a" {
		t.Fatalf("replay of a after its expiry = %+v, %v; want a replay of cl_a", g, first)
	}
	// Full (a spent, b outstanding): a is forgotten to make room.
	if !c.room(exp.Add(time.Minute)) {
		t.Fatal("no room with a spent code in the table")
	}
	c.add("c", &Code{Expires: exp.Add(time.Hour)})
	if g, _ := c.spend("a"); g != nil {
		t.Errorf("a after it was forgotten = %+v, want unknown", g)
	}
	c.spend("b")
	// Full of b (spent) and c (outstanding), both in their time: b goes.
	if !c.room(exp.Add(2 * time.Minute)) {
		t.Error("no room with a spent code in the table")
	}
	// Outstanding codes only: no room until one expires.
	full := newCodes(1)
	full.add("x", &Code{Expires: exp})
	if full.room(exp.Add(-time.Second)) {
		t.Error("room with the one slot outstanding")
	}
	full2 := newCodes(1)
	full2.add("y", &Code{Expires: exp})
	full2.spend("y")
	if len(full2.byHash) != 1 || !full2.room(exp.Add(SpentCodeKept)) || len(full2.byHash) != 0 {
		t.Errorf("a spent code past its margin is kept: %d entries", len(full2.byHash))
	}
}

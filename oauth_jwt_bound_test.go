package mcpruntime_test

import (
	"slices"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestJWTSubjectLiveBound: issue 24 row 9. One JWT subject presenting
// three times MaxJWTsPerSubject distinct valid JWTs holds at most
// MaxJWTsPerSubject live credentials: recording one more evicts the
// subject's oldest. An evicted JWT, presented again, is verified again and
// recorded anew, so its client is not broken; another subject's JWTs are
// untouched (SPEC §5c.14).
func TestJWTSubjectLiveBound(t *testing.T) {
	p := newIDP(t)
	clock := newFakeClock()
	e := newOAuthEnv(t, mcpruntime.Config{Now: clock.Now, OAuth: mcpruntime.OAuthConfig{
		Issuer: p.srv.URL, IssuerRootCAs: p.pool(),
	}})
	resource := e.origin + "/mcp"
	start := clock.Now()
	bob := p.token(t, "bob", resource, "", start, start.Add(2*time.Hour))
	bobP, err := e.rt.Authenticate(bob)
	noErr(t, err)

	const n = 3 * mcpruntime.MaxJWTsPerSubject
	toks := make([]string, n)
	grant := ""
	for i := range toks {
		clock.Advance(time.Second)
		now := clock.Now()
		toks[i] = p.token(t, "mallory", resource, "", now, now.Add(time.Hour))
		pr, err := e.rt.Authenticate(toks[i])
		if err != nil {
			t.Fatalf("JWT %d: %v", i, err)
		}
		if grant == "" {
			grant = pr.Client
		} else if pr.Client != grant {
			t.Fatalf("JWT %d: grant %s, want %s", i, pr.Client, grant)
		}
	}
	live := func() []string {
		var ids []string
		for _, c := range e.rt.ClientTokens(grant) {
			if c.State == "live" {
				ids = append(ids, c.ID)
			}
		}
		return ids
	}
	if got := live(); len(got) != mcpruntime.MaxJWTsPerSubject {
		t.Fatalf("%d live credentials of one subject after %d JWTs, want the bound %d", len(got), n, mcpruntime.MaxJWTsPerSubject)
	}
	if rows := e.rt.ClientTokens(grant); len(rows) != mcpruntime.MaxJWTsPerSubject {
		t.Errorf("%d rows of the subject, want %d: an evicted JWT's row is removed, not kept", len(rows), mcpruntime.MaxJWTsPerSubject)
	}
	// The newest are the ones kept: they authenticate from their rows.
	before := live()
	for _, tok := range toks[n-mcpruntime.MaxJWTsPerSubject:] {
		if _, err := e.rt.Authenticate(tok); err != nil {
			t.Fatalf("one of the newest JWTs: %v", err)
		}
	}
	if after := live(); !slices.Equal(before, after) {
		t.Fatalf("presenting the kept JWTs changed the live set")
	}
	// The oldest was evicted: presented again it is verified and recorded
	// anew, evicting the oldest kept one.
	pr, err := e.rt.Authenticate(toks[0])
	if err != nil {
		t.Fatalf("an evicted JWT presented again: %v, want it verified again", err)
	}
	if slices.Contains(before, pr.CredentialID) {
		t.Errorf("the evicted JWT authenticated as an old row %s", pr.CredentialID)
	}
	after := live()
	if len(after) != mcpruntime.MaxJWTsPerSubject || !slices.Contains(after, pr.CredentialID) {
		t.Errorf("after re-presenting: %d live, new row kept %v", len(after), slices.Contains(after, pr.CredentialID))
	}
	if _, err := e.rt.Authenticate(toks[n-mcpruntime.MaxJWTsPerSubject]); err != nil {
		t.Errorf("the oldest kept JWT, evicted in turn, presented again: %v", err)
	}
	// Another subject keeps its credential.
	if p2, err := e.rt.Authenticate(bob); err != nil || p2.CredentialID != bobP.CredentialID {
		t.Errorf("another subject's JWT: %v, %v (was %s)", p2.CredentialID, err, bobP.CredentialID)
	}
	if s := e.rt.Stats(); s.LiveCredentials > mcpruntime.MaxJWTsPerSubject+1 {
		t.Errorf("%d live credentials in all, want at most %d", s.LiveCredentials, mcpruntime.MaxJWTsPerSubject+1)
	}
}

package mcpruntime_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// codeExchange is a signed-in client's code and the form that exchanged it.
type codeExchange struct {
	clientID string
	form     url.Values
	tokens   map[string]any
}

// signInKeepingCode runs signIn's flow and keeps the code's exchange
// form, to present it again.
func (e *oauthEnv) signInKeepingCode(access string) codeExchange {
	t := e.T
	t.Helper()
	body := `{"client_name":"replay client","redirect_uris":["http://127.0.0.1/cb"]}`
	resp, err := http.Post(e.origin+"/oauth/register", "application/json", strings.NewReader(body))
	noErr(t, err)
	var reg map[string]any
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	clientID, _ := reg["client_id"].(string)
	const verifier = "verifier-verifier-verifier-verifier-verifier"
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {"http://127.0.0.1:4242/cb"},
		"code_challenge": {s256(verifier)}, "code_challenge_method": {"S256"}, "state": {"s"}, "resource": {e.origin + "/mcp"},
	}
	loc := approveInPage(t, e.rt, e.origin+"/oauth/authorize?"+q.Encode(), access)
	form := url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {clientID},
		"redirect_uri": {"http://127.0.0.1:4242/cb"}, "code_verifier": {verifier}, "resource": {e.origin + "/mcp"},
	}
	status, toks := postToken(t, e.origin, form)
	if status != http.StatusOK {
		t.Fatalf("exchange = %d %v", status, toks)
	}
	return codeExchange{clientID: clientID, form: form, tokens: toks}
}

// SPEC §5c.9 (RFC 6749 §4.1.2, issue 24 row 6): an authorization code
// presented again is invalid_grant and revokes the grant its first
// exchange issued: the access token 401s, its session and stream end, its
// refresh token is refused.
func TestOAuthCodeReplayRevokesTokens(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	x := e.signInKeepingCode("read-write")
	tok := x.tokens["access_token"].(string)
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)

	status, again := postToken(t, e.origin, x.form)
	if status != http.StatusBadRequest || again["error"] != "invalid_grant" {
		t.Fatalf("replayed code = %d %v, want invalid_grant", status, again)
	}
	st.WantEnd(t, "code replay")
	ht.Want401(t, "the first exchange's access token after the replay", e.Post(tok, sid, ht.PingBody), e.challengeOf(true))
	if status, m := e.refresh(x.clientID, x.tokens["refresh_token"].(string)); status != http.StatusBadRequest || m["error"] != "invalid_grant" {
		t.Errorf("the first exchange's refresh token after the replay = %d %v, want invalid_grant", status, m)
	}
	if got := e.kinds(); !slices.Contains(got, "revoked/code_reused") || !slices.Contains(got, "authorization_failed/code_reused") {
		t.Errorf("credential events %v, want revoked/code_reused and authorization_failed/code_reused", got)
	}
	if n := e.rt.Stats().Clients; n != 0 {
		t.Errorf("%d client grants left, want 0", n)
	}
}

// SPEC §5c.11 (RFC 9700 §4.14.2, issue 24 row 7): the first refresh token
// of a grant presented after 20 rotations — its row pruned long ago, with
// RevokedKept 2 — is reuse: invalid_grant, and the whole grant is revoked
// (reason refresh_reused).
func TestOAuthRefreshReuseAfterManyRotations(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{RevokedKept: 2})
	clientID, toks := e.signIn("read-write")
	first := toks["refresh_token"].(string)
	cur := toks
	for i := range 20 {
		status, next := e.refresh(clientID, cur["refresh_token"].(string))
		if status != http.StatusOK {
			t.Fatalf("rotation %d = %d %v", i+1, status, next)
		}
		cur = next
	}
	tok := cur["access_token"].(string)
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)

	status, again := e.refresh(clientID, first)
	if status != http.StatusBadRequest || again["error"] != "invalid_grant" {
		t.Fatalf("the first refresh token after 20 rotations = %d %v, want invalid_grant", status, again)
	}
	st.WantEnd(t, "reuse of a pruned generation")
	ht.Want401(t, "the newest access token after reuse", e.Post(tok, sid, ht.PingBody), e.challengeOf(true))
	if status, m := e.refresh(clientID, cur["refresh_token"].(string)); status != http.StatusBadRequest {
		t.Errorf("the newest refresh token after reuse = %d %v, want refused", status, m)
	}
	if got := e.kinds(); !slices.Contains(got, "revoked/refresh_reused") {
		t.Errorf("credential events %v, want revoked/refresh_reused", got)
	}
	if n := e.rt.Stats().Clients; n != 0 {
		t.Errorf("%d client grants left, want 0", n)
	}
}

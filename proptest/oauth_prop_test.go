package proptest

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime/internal/oauth"
)

// The HTTP machine's OAuth actions (SPEC §5c): a client signs in over HTTP
// — registration, the consent page approved with a pairing code, the code
// exchanged — and the grant it gets is a client grant of the model like
// an admin-issued one, which the lifecycle machine's RefreshClient and
// RevokeClient act on too. OAuthRefresh redeems one of the grant's refresh
// tokens ever issued: the current one gives the same grant's next access
// token (its MCP sessions must stay, invariant 7 holds that), a spent one
// revokes the grant (its sessions must end, its tokens answer 401). The
// refresh tokens never expire here (RefreshTokenTTL NoExpiry), and reuse
// is judged over the grant's whole refresh family (SPEC §5c.11), so it is
// always seen, however many rows were pruned.

// modelRefresh is one refresh token of an OAuth grant.
type modelRefresh struct {
	token string
	state refreshState
}

type refreshState int

const (
	refreshLive    refreshState = iota
	refreshUsed                 // redeemed: presenting it again is reuse
	refreshRevoked              // revoked with the grant's other tokens (RefreshClient revokePrevious)
)

const oauthRedirect = "http://127.0.0.1/cb"

var consentField = regexp.MustCompile(`<input type="hidden" name="(request|csrf)" value="([^"]*)">`)

// applyOAuthSignIn records the grant an OAuth sign-in created.
func (m *model) applyOAuthSignIn(id, access, oauthClient, audience, tok, credID, refresh string) {
	m.applyIssueClient(id, access, tok, credID)
	m.credByID[credID].audience = audience
	cl := m.clientByID[id]
	cl.oauthClient = oauthClient
	cl.refresh = []modelRefresh{{token: refresh}}
}

// predictOAuthRefresh is what redeeming refresh token i of grant id
// answers: 200, or 400 and whether it revokes the grant (reuse).
func (m *model) predictOAuthRefresh(id string, i int) (status int, revokes bool) {
	cl := m.clientByID[id]
	if cl.revoked {
		return http.StatusBadRequest, false // its rows are gone: unknown
	}
	switch cl.refresh[i].state {
	case refreshLive:
		return http.StatusOK, false
	case refreshUsed:
		return http.StatusBadRequest, true
	}
	return http.StatusBadRequest, false
}

// applyOAuthRefresh: token i is spent, the grant has a new access token
// (its expired ones marked so, as RefreshClient without revokePrevious)
// and a new refresh token.
func (m *model) applyOAuthRefresh(id string, i int, audience, tok, credID, refresh string) {
	cl := m.clientByID[id]
	cl.refresh[i].state = refreshUsed
	m.applyRefreshClient(id, false, tok, credID)
	m.credByID[credID].audience = audience
	cl.refresh = append(cl.refresh, modelRefresh{token: refresh})
}

// revokeRefresh: RefreshClient with revokePrevious revokes the grant's
// live refresh tokens with its access tokens.
func (cl *modelClient) revokeRefresh() {
	for i := range cl.refresh {
		if cl.refresh[i].state == refreshLive {
			cl.refresh[i].state = refreshRevoked
		}
	}
}

// oauthHTTP is h's client that answers redirects instead of following
// them (the consent page's 303 goes to the client's redirect URI).
func (h *httpMachine) oauthHTTP() *http.Client {
	return &http.Client{Transport: h.client.Transport, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// oauthPost posts a form (or JSON) to an OAuth route and decodes the JSON
// answer.
func (h *httpMachine) oauthPost(t *rapid.T, path, contentType, body string) (int, map[string]any) {
	t.Helper()
	resp, err := h.oauthHTTP().Post(h.origin+path, contentType, strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("POST %s = %d, not JSON: %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, m
}

// OAuthSignIn signs a client in from nothing: registration, the consent
// page, a pairing code of a drawn access level, the code exchange.
func (h *httpMachine) OAuthSignIn(t *rapid.T) {
	access := rapid.SampledFrom([]string{readOnly, readWrite}).Draw(t, "oauthAccess")
	call := fmt.Sprintf("OAuthSignIn(%s)", access)
	before := h.liveness()
	status, reg := h.oauthPost(t, oauth.PathRegister, "application/json",
		`{"client_name":"prop client","redirect_uris":["`+oauthRedirect+`"]}`)
	clientID, _ := reg["client_id"].(string)
	if status != http.StatusCreated || clientID == "" {
		t.Fatalf("%s: register = %d %v", call, status, reg)
	}
	verifier := fmt.Sprintf("prop-verifier-%040d", len(h.m.clients))
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {oauthRedirect}, "state": {"st"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"resource": {h.origin + "/mcp"},
	}
	resp, err := h.oauthHTTP().Get(h.origin + oauth.PathAuthorize + "?" + q.Encode())
	if err != nil {
		t.Fatalf("%s: GET authorize: %v", call, err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: consent page = %d %s", call, resp.StatusCode, page)
	}
	form := url.Values{"action": {"approve"}}
	for _, f := range consentField.FindAllStringSubmatch(string(page), -1) {
		form.Set(f[1], f[2])
	}
	pc, err := h.rt.NewPairingCode(context.Background(), access)
	if err != nil {
		t.Fatalf("%s: NewPairingCode: %v", call, err)
	}
	form.Set("pairing_code", pc.Code)
	resp, err = h.oauthHTTP().PostForm(h.origin+oauth.PathAuthorize, form)
	if err != nil {
		t.Fatalf("%s: POST authorize: %v", call, err)
	}
	resp.Body.Close()
	loc, err := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || err != nil || loc.Query().Get("code") == "" {
		t.Fatalf("%s: consent = %d Location %q", call, resp.StatusCode, resp.Header.Get("Location"))
	}
	status, toks := h.oauthPost(t, oauth.PathToken, "application/x-www-form-urlencoded", url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {clientID},
		"redirect_uri": {oauthRedirect}, "code_verifier": {verifier}, "resource": {h.origin + "/mcp"},
	}.Encode())
	tok, _ := toks["access_token"].(string)
	refresh, _ := toks["refresh_token"].(string)
	if status != http.StatusOK || tok == "" || refresh == "" {
		t.Fatalf("%s: token = %d %v", call, status, toks)
	}
	p, err := h.rt.Authenticate(tok)
	if err != nil || p.Client == "" || h.m.clientByID[p.Client] != nil || p.Access != access || h.m.credByID[p.CredentialID] != nil {
		t.Fatalf("%s: the access token authenticates as %+v, %v; want a new grant of access %s", call, p, err, access)
	}
	h.m.applyOAuthSignIn(p.Client, access, clientID, h.origin+"/mcp", tok, p.CredentialID, refresh)
	h.frame(t, call, before, nil)
}

// OAuthRefresh redeems a refresh token an OAuth grant was ever given: the
// current one, a spent one (reuse), or one revoked by RefreshClient.
func (h *httpMachine) OAuthRefresh(t *rapid.T) {
	var grants []*modelClient
	for _, cl := range h.m.clients {
		if cl.oauthClient != "" {
			grants = append(grants, cl)
		}
	}
	if len(grants) == 0 {
		t.Skip("no OAuth grant yet")
	}
	cl := pick(t, "oauthGrant", grants)
	// The newest refresh token or, as often, an earlier one (spent, or
	// revoked by RefreshClient) when there is one.
	i := len(cl.refresh) - 1
	if i > 0 && rapid.Bool().Draw(t, "olderRefresh") {
		i = rapid.IntRange(0, i-1).Draw(t, "refreshIndex")
	}
	call := fmt.Sprintf("OAuthRefresh(%s, refresh token %d of %d)", cl.id, i, len(cl.refresh))
	before := h.liveness()
	want, revokes := h.m.predictOAuthRefresh(cl.id, i)
	status, toks := h.oauthPost(t, oauth.PathToken, "application/x-www-form-urlencoded", url.Values{
		"grant_type": {"refresh_token"}, "refresh_token": {cl.refresh[i].token}, "client_id": {cl.oauthClient},
	}.Encode())
	if status != want {
		t.Fatalf("%s = %d %v, want %d", call, status, toks, want)
	}
	if status != http.StatusOK {
		if toks["error"] != "invalid_grant" {
			t.Fatalf("%s = %d %v, want invalid_grant", call, status, toks)
		}
		if revokes {
			if err := h.m.revokeClient(cl.id); err != nil {
				t.Fatalf("%s: the model cannot revoke %s: %v", call, cl.id, err)
			}
		}
		h.frame(t, call, before, clientOf(cl.id))
		return
	}
	tok, _ := toks["access_token"].(string)
	refresh, _ := toks["refresh_token"].(string)
	p, err := h.rt.Authenticate(tok)
	if err != nil || p.Client != cl.id || h.m.credByID[p.CredentialID] != nil || refresh == "" || refresh == cl.refresh[i].token {
		t.Fatalf("%s: the new access token authenticates as %+v, %v (refresh rotated: %v); want the same grant", call, p, err, refresh != cl.refresh[i].token)
	}
	h.m.applyOAuthRefresh(cl.id, i, h.origin+"/mcp", tok, p.CredentialID, refresh)
	h.frame(t, call, before, nil) // every earlier token of the grant stays as it was
}

package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/internal/fault"
)

// SPEC §5c: the metadata documents, every URL from the configured issuer,
// never from the request's Host.
func TestMetadata(t *testing.T) {
	e := newEnv(t)
	iss := e.srv.Issuer()
	for _, path := range []string{PathResourceMetadata + "/mcp", PathResourceMetadata} {
		a := e.do(http.MethodGet, path, "", "", "Host", "localhost:1")
		if a.status != http.StatusOK {
			t.Fatalf("GET %s = %d %s", path, a.status, a.body)
		}
		want := map[string]any{
			"resource": iss + "/mcp", "authorization_servers": []any{iss}, "scopes_supported": []any{"mcp"},
			"bearer_methods_supported": []any{"header"}, "resource_name": "mcpruntime",
		}
		if diff := cmp.Diff(want, a.json(t)); diff != "" {
			t.Errorf("GET %s (-want +got):\n%s", path, diff)
		}
	}
	a := e.do(http.MethodGet, PathServerMetadata, "", "", "Host", "localhost:1")
	want := map[string]any{
		"issuer":                                         iss,
		"authorization_endpoint":                         iss + "/oauth/authorize",
		"token_endpoint":                                 iss + "/oauth/token",
		"registration_endpoint":                          iss + "/oauth/register",
		"scopes_supported":                               []any{"mcp"},
		"response_types_supported":                       []any{"code"},
		"response_modes_supported":                       []any{"query"},
		"grant_types_supported":                          []any{"authorization_code", "refresh_token"},
		"token_endpoint_auth_methods_supported":          []any{"none"},
		"code_challenge_methods_supported":               []any{"S256"},
		"authorization_response_iss_parameter_supported": true,
		"client_id_metadata_document_supported":          true,
	}
	if diff := cmp.Diff(want, a.json(t)); diff != "" {
		t.Errorf("AS metadata (-want +got):\n%s", diff)
	}
	if a := e.do(http.MethodGet, "/.well-known/openid-configuration", "", ""); a.status != http.StatusNotFound || a.json(t)["error"] != "not_found" {
		t.Errorf("an unknown path = %d %s, want a JSON 404", a.status, a.body)
	}
	if a := e.do(http.MethodGet, PathServerMetadata, "", "", "Host", "evil.example"); a.status != http.StatusForbidden {
		t.Errorf("a foreign Host = %d, want 403 (DNS-rebinding guard)", a.status)
	}
}

// The whole flow: registration, consent, code, tokens, refresh.
func TestFlow(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	verifier, challenge := pkce("abc")
	q := e.approve(e.authParams(id, challenge), AccessReadWrite)
	if q.Get("state") != "st-1" || q.Get("iss") != e.srv.Issuer() || q.Get("code") == "" {
		t.Fatalf("redirect query = %v, want code, state st-1 and iss", q)
	}
	a := e.exchange(id, q.Get("code"), verifier)
	if a.status != http.StatusOK {
		t.Fatalf("exchange = %d %s", a.status, a.body)
	}
	got := a.json(t)
	want := map[string]any{"access_token": "access-1", "token_type": "Bearer", "expires_in": float64(3600), "refresh_token": "refresh-1", "scope": "mcp"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("token answer (-want +got):\n%s", diff)
	}
	if a.header.Get("Cache-Control") != "no-store" {
		t.Errorf("token answer Cache-Control = %q, want no-store", a.header.Get("Cache-Control"))
	}
	c, _ := e.srv.parseClientID(id)
	wantReq := []GrantRequest{{Label: "oauth: Test Client", Access: AccessReadWrite, Audience: e.srv.Resource(), ClientHash: c.Hash()}}
	if diff := cmp.Diff(wantReq, e.grants.requests()); diff != "" {
		t.Errorf("grant requests (-want +got):\n%s", diff)
	}
	r := e.do(http.MethodPost, PathToken, "application/x-www-form-urlencoded",
		url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"refresh-1"}, "client_id": {id}}.Encode())
	if r.status != http.StatusOK || r.json(t)["refresh_token"] != "refresh-2" {
		t.Errorf("refresh = %d %s, want a rotated refresh token", r.status, r.body)
	}
	// Another client cannot redeem it.
	other := e.register()
	r = e.do(http.MethodPost, PathToken, "application/x-www-form-urlencoded",
		url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"refresh-2"}, "client_id": {other}}.Encode())
	if r.status != http.StatusBadRequest || r.json(t)["error"] != "invalid_grant" {
		t.Errorf("refresh by another client = %d %s, want invalid_grant", r.status, r.body)
	}
}

// SPEC §5c refusal: a refresh token presented again is invalid_grant (the
// runtime revokes the grant: see the root's TestOAuthRefreshReuse).
func TestRefreshReuseRefused(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	verifier, challenge := pkce("xyz")
	q := e.approve(e.authParams(id, challenge), AccessReadOnly)
	e.exchange(id, q.Get("code"), verifier)
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {"refresh-1"}, "client_id": {id}}.Encode()
	if a := e.do(http.MethodPost, PathToken, "application/x-www-form-urlencoded", form); a.status != http.StatusOK {
		t.Fatalf("first refresh = %d %s", a.status, a.body)
	}
	a := e.do(http.MethodPost, PathToken, "application/x-www-form-urlencoded", form)
	if a.status != http.StatusBadRequest || a.json(t)["error"] != "invalid_grant" || !strings.Contains(a.body, "revoked") {
		t.Errorf("reused refresh = %d %s, want invalid_grant saying the grant is revoked", a.status, a.body)
	}
}

// SPEC §5c refusals of the token endpoint, each with the code spent.
func TestTokenRefusals(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(e *env, id, code, verifier string) answer
		error  string
		reason string
	}{
		{"PKCE verifier mismatch", func(e *env, id, code, _ string) answer {
			v, _ := pkce("other")
			return e.exchange(id, code, v)
		}, "invalid_grant", "pkce_mismatch"},
		{"PKCE verifier too short", func(e *env, id, code, _ string) answer { return e.exchange(id, code, "short") }, "invalid_grant", "pkce_mismatch"},
		{"code reuse", func(e *env, id, code, verifier string) answer {
			if a := e.exchange(id, code, verifier); a.status != http.StatusOK {
				e.t.Fatalf("first exchange = %d %s", a.status, a.body)
			}
			return e.exchange(id, code, verifier)
		}, "invalid_grant", "code_reused"},
		{"expired code", func(e *env, id, code, verifier string) answer {
			e.clock.Advance(DefaultCodeTTL)
			return e.exchange(id, code, verifier)
		}, "invalid_grant", "code_expired"},
		{"another client", func(e *env, _, code, verifier string) answer {
			return e.exchange(e.register(), code, verifier)
		}, "invalid_grant", "client_mismatch"},
		{"altered redirect URI", func(e *env, id, code, verifier string) answer {
			return e.exchange(id, code, verifier, "redirect_uri", "http://127.0.0.1:5555/other")
		}, "invalid_grant", "redirect_uri_mismatch"},
		{"resource naming another server", func(e *env, id, code, verifier string) answer {
			return e.exchange(id, code, verifier, "resource", "https://other.example/mcp")
		}, "invalid_target", "resource_mismatch"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			id := e.register()
			verifier, challenge := pkce("abc")
			code := e.approve(e.authParams(id, challenge), AccessReadOnly).Get("code")
			a := test.edit(e, id, code, verifier)
			if a.status != http.StatusBadRequest || a.json(t)["error"] != test.error {
				t.Fatalf("exchange = %d %s, want 400 %s", a.status, a.body, test.error)
			}
			if reasons := e.reasons(kindAuthFailed); !contains(reasons, test.reason) {
				t.Errorf("audit reasons %v, want %s", reasons, test.reason)
			}
			// Spent even though the exchange failed: the right request now
			// fails too.
			if a := e.exchange(id, code, verifier); a.status != http.StatusBadRequest || a.json(t)["error"] != "invalid_grant" {
				t.Errorf("the right exchange after the refused one = %d %s, want invalid_grant (spent)", a.status, a.body)
			}
			if test.name != "code reuse" && len(e.grants.requests()) != 0 {
				t.Errorf("a grant was issued: %+v", e.grants.requests())
			}
		})
	}
}

// SPEC §5c.9: another client's code is answered exactly as an unknown
// one — status, error and description — so that presenting a code tells
// nothing of whose it was (foreign = unknown).
func TestTokenForeignCodeLikeUnknown(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	verifier, challenge := pkce("abc")
	code := e.approve(e.authParams(id, challenge), AccessReadOnly).Get("code")
	other := e.register()
	foreign := e.exchange(other, code, verifier)
	unknown := e.exchange(other, "never-issued-code", verifier)
	if foreign.status != http.StatusBadRequest || foreign.body != unknown.body || foreign.status != unknown.status {
		t.Errorf("another client's code = %d %s; an unknown code = %d %s; want the same answer", foreign.status, foreign.body, unknown.status, unknown.body)
	}
	if !contains(e.reasons(kindAuthFailed), "client_mismatch") {
		t.Errorf("audit reasons %v, want client_mismatch (the trail keeps the difference)", e.reasons(kindAuthFailed))
	}
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// SPEC §5c: an unregistered or altered redirect URI, or a client id that
// was altered or never issued, gets an error page, never a redirect.
func TestAuthorizeErrorPageNeverRedirects(t *testing.T) {
	e := newEnv(t)
	id := e.register("https://app.example/cb", redirectURI)
	_, challenge := pkce("abc")
	altered := []byte(id)
	altered[len(clientIDPrefix)+3] ^= 1
	tests := []struct {
		name, key, value, reason string
	}{
		{"unregistered redirect URI", "redirect_uri", "https://evil.example/cb", "redirect_uri_mismatch"},
		{"altered redirect URI: path", "redirect_uri", "https://app.example/cb2", "redirect_uri_mismatch"},
		{"altered redirect URI: host", "redirect_uri", "https://app.example.evil.example/cb", "redirect_uri_mismatch"},
		{"loopback port ignored but not the host", "redirect_uri", "http://localhost:5555/callback", "redirect_uri_mismatch"},
		{"no redirect URI with two registered", "redirect_uri", "", "redirect_uri_mismatch"},
		{"altered client id", "client_id", string(altered), "unknown_client"},
		{"client id never issued", "client_id", "mcpc_e30.AAAA", "unknown_client"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			v := e.authParams(id, challenge)
			v.Set(test.key, test.value)
			a := e.do(http.MethodGet, PathAuthorize+"?"+v.Encode(), "", "")
			if a.status != http.StatusBadRequest || a.header.Get("Location") != "" || !strings.Contains(a.body, "Sign-in refused") {
				t.Errorf("GET authorize = %d Location %q, want 400 and an error page", a.status, a.header.Get("Location"))
			}
			if !contains(e.reasons(kindAuthFailed), test.reason) {
				t.Errorf("audit reasons %v, want %s", e.reasons(kindAuthFailed), test.reason)
			}
		})
	}
}

// SPEC §5c.6: once a sign-in of the client completed on a redirect URI,
// other refusals of an authorization request go back to it with error,
// state and iss (before, they are the error page: TestAuthorizeNoOpenRedirector).
func TestAuthorizeRefusalsRedirect(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	_, challenge := pkce("abc")
	e.approve(e.authParams(id, challenge), AccessReadOnly)
	tests := []struct {
		name, key, value, error string
	}{
		{"resource naming another server", "resource", "https://other.example/mcp", "invalid_target"},
		{"plain PKCE", "code_challenge_method", "plain", "invalid_request"},
		{"no PKCE", "code_challenge", "", "invalid_request"},
		{"token response type", "response_type", "token", "unsupported_response_type"},
		{"state too long", "state", strings.Repeat("s", maxStateLen+1), "invalid_request"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			v := e.authParams(id, challenge)
			v.Set(test.key, test.value)
			a := e.do(http.MethodGet, PathAuthorize+"?"+v.Encode(), "", "")
			loc, err := url.Parse(a.header.Get("Location"))
			if a.status != http.StatusSeeOther || err != nil {
				t.Fatalf("GET authorize = %d %s, want a 303", a.status, a.body)
			}
			q := loc.Query()
			if !strings.HasPrefix(loc.String(), "http://127.0.0.1:5555/callback?") || q.Get("error") != test.error || q.Get("iss") != e.srv.Issuer() {
				t.Errorf("redirect %s, want the callback with error %s and iss", loc, test.error)
			}
			if test.key != "state" && q.Get("state") != "st-1" {
				t.Errorf("redirect state = %q, want st-1", q.Get("state"))
			}
		})
	}
}

// SPEC §5c refusals of the consent form: CSRF, pairing codes, limits.
func TestConsentCSRF(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	_, challenge := pkce("abc")
	f, _ := e.openConsent(e.authParams(id, challenge))
	code := e.pair(AccessReadOnly)
	for _, test := range []struct {
		name string
		form consentForm
		hdr  []string
	}{
		{"missing CSRF field", consentForm{request: f.request}, nil},
		{"wrong CSRF field", consentForm{request: f.request, csrf: f.csrf[:len(f.csrf)-2] + "AA"}, nil},
		{"another request's CSRF", consentForm{request: f.request + "x", csrf: f.csrf}, nil},
		{"cross-origin form", f, []string{"Origin", "http://localhost:9"}},
	} {
		t.Run(test.name, func(t *testing.T) {
			a := e.submit(test.form, code, test.hdr...)
			if a.status != http.StatusForbidden || a.header.Get("Location") != "" {
				t.Errorf("submit = %d Location %q, want 403 and no redirect", a.status, a.header.Get("Location"))
			}
		})
	}
	// The pairing code was not spent by the refused forms.
	if a := e.submit(f, code); a.status != http.StatusSeeOther {
		t.Errorf("the right form after refused ones = %d %s, want 303", a.status, a.body)
	}
}

func TestPairingCodes(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	_, challenge := pkce("abc")
	t.Run("wrong code reveals nothing", func(t *testing.T) {
		f, _ := e.openConsent(e.authParams(id, challenge))
		used := e.pair(AccessReadOnly)
		if a := e.submit(f, used); a.status != http.StatusSeeOther {
			t.Fatalf("first use = %d", a.status)
		}
		expired := e.pair(AccessReadOnly)
		e.clock.Advance(DefaultPairingTTL)
		var bodies []string
		for _, code := range []string{"ZZZZZ-ZZZZZ", used, expired, "", "not a code at all"} {
			f, _ := e.openConsent(e.authParams(id, challenge))
			a := e.submit(f, code)
			if a.status != http.StatusForbidden || a.header.Get("Location") != "" {
				t.Fatalf("submit %q = %d, want 403 without redirect", code, a.status)
			}
			bodies = append(bodies, hiddenRe.ReplaceAllString(a.body, ""))
		}
		for i, b := range bodies[1:] {
			if b != bodies[0] {
				t.Errorf("page of wrong code %d differs from the first's: a wrong code tells something", i+1)
			}
		}
	})
	// SPEC §5c.8 refusal: a code approves one sign-in, long before it
	// expires; the second request it is typed into gets the wrong-code
	// page and no redirect.
	t.Run("reused code", func(t *testing.T) {
		code := e.pair(AccessReadOnly)
		f, _ := e.openConsent(e.authParams(id, challenge))
		if a := e.submit(f, code); a.status != http.StatusSeeOther {
			t.Fatalf("first use = %d, want 303", a.status)
		}
		f, _ = e.openConsent(e.authParams(id, challenge))
		a := e.submit(f, code)
		if a.status != http.StatusForbidden || a.header.Get("Location") != "" || !strings.Contains(a.body, `name="pairing_code"`) {
			t.Errorf("second use = %d Location %q, want 403 with the form again", a.status, a.header.Get("Location"))
		}
		if !contains(e.reasons(kindPairingFailed), "wrong_code") {
			t.Errorf("pairing audit reasons %v, want wrong_code", e.reasons(kindPairingFailed))
		}
	})
	t.Run("normalized", func(t *testing.T) {
		f, _ := e.openConsent(e.authParams(id, challenge))
		code := strings.ToLower(strings.ReplaceAll(e.pair(AccessReadOnly), "-", " "))
		if a := e.submit(f, code); a.status != http.StatusSeeOther {
			t.Errorf("lower case with a space = %d, want 303", a.status)
		}
	})
	t.Run("guesses per request", func(t *testing.T) {
		f, _ := e.openConsent(e.authParams(id, challenge))
		good := e.pair(AccessReadOnly)
		for i := 1; i < DefaultAttemptsPerReq; i++ {
			if a := e.submit(f, "AAAAA-AAAAA"); a.status != http.StatusForbidden || !strings.Contains(a.body, `name="pairing_code"`) {
				t.Fatalf("guess %d = %d, want the form again", i, a.status)
			}
		}
		if a := e.submit(f, "AAAAA-AAAAA"); a.status != http.StatusForbidden || strings.Contains(a.body, `name="pairing_code"`) {
			t.Fatalf("guess %d = %d, want the request dropped", DefaultAttemptsPerReq, a.status)
		}
		if a := e.submit(f, good); a.status != http.StatusBadRequest {
			t.Errorf("the right code on the dropped request = %d, want 400", a.status)
		}
	})
}

// SPEC §5c.7: a denial is the error page (403, access_denied) until a
// sign-in confirmed the redirect URI; then it goes back with access_denied.
// The page is answered either way: a second submission of it is 400.
func TestDeny(t *testing.T) {
	e := newEnv(t)
	id := e.register()
	_, challenge := pkce("abc")
	deny := func() (consentForm, answer) {
		f, _ := e.openConsent(e.authParams(id, challenge))
		v := url.Values{"request": {f.request}, "csrf": {f.csrf}, "action": {"deny"}}
		return f, e.do(http.MethodPost, PathAuthorize, "application/x-www-form-urlencoded", v.Encode())
	}
	f, a := deny()
	if a.status != http.StatusForbidden || a.header.Get("Location") != "" || !strings.Contains(a.body, `<code id="error-code">access_denied</code>`) {
		t.Errorf("deny, unconfirmed = %d Location %q, want 403 and the error page", a.status, a.header.Get("Location"))
	}
	if a := e.submit(f, e.pair(AccessReadOnly)); a.status != http.StatusBadRequest {
		t.Errorf("the denied page approved = %d, want 400 (answered)", a.status)
	}
	e.approve(e.authParams(id, challenge), AccessReadOnly)
	_, a = deny()
	loc, _ := url.Parse(a.header.Get("Location"))
	if a.status != http.StatusSeeOther || loc.Query().Get("error") != "access_denied" || loc.Query().Get("state") != "st-1" {
		t.Errorf("deny, confirmed = %d %s, want a redirect with access_denied and state", a.status, loc)
	}
}

func TestBounds(t *testing.T) {
	// The table never holds more than MaxPending: past it the oldest of
	// the largest client gives way (TestPendingFullEvictsTheLargest), an
	// expired request first.
	t.Run("pending requests", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxPending, c.MaxPendingPerClient = 3, 2 })
		_, challenge := pkce("abc")
		a, b, c := e.register(), e.register(), e.register()
		first, _ := e.openConsent(e.authParams(a, challenge))
		e.clock.Advance(DefaultRequestTTL / 2)
		second, _ := e.openConsent(e.authParams(b, challenge))
		third, _ := e.openConsent(e.authParams(b, challenge))
		e.clock.Advance(DefaultRequestTTL / 2)
		// Full, and first has expired: it makes the room, not the largest
		// client's oldest.
		fourth, _ := e.openConsent(e.authParams(c, challenge))
		if n := e.srv.pending.count(); n != 3 {
			t.Errorf("%d pending, want 3", n)
		}
		for name, f := range map[string]consentForm{"second": second, "third": third, "fourth": fourth} {
			if a := e.submit(f, e.pair(AccessReadOnly)); a.status != http.StatusSeeOther {
				t.Errorf("%s = %d, want 303", name, a.status)
			}
		}
		if a := e.submit(first, e.pair(AccessReadOnly)); a.status != http.StatusBadRequest {
			t.Errorf("an expired request = %d, want 400", a.status)
		}
	})
	t.Run("pairing codes", func(t *testing.T) {
		e := newEnv(t, func(c *Config) { c.MaxPairingCodes = 1 })
		e.pair(AccessReadOnly)
		if _, err := e.srv.NewPairingCode(context.Background(), AccessReadOnly); err != fault.ErrTooManyPairingCodes {
			t.Errorf("a second code = %v, want ErrTooManyPairingCodes", err)
		}
		if _, err := e.srv.NewPairingCode(context.Background(), "admin"); err != ErrInvalidAccess {
			t.Errorf("access admin = %v, want ErrInvalidAccess", err)
		}
	})
}

func TestRegistration(t *testing.T) {
	e := newEnv(t)
	long := "https://app.example/" + strings.Repeat("a", maxRedirectURILen)
	tests := []struct {
		name   string
		body   string
		status int
		error  string
	}{
		{"https and loopback", `{"redirect_uris":["https://app.example/cb","http://[::1]/cb","http://localhost:3000/cb"]}`, 201, ""},
		{"no redirect URI", `{"client_name":"x"}`, 400, "invalid_redirect_uri"},
		{"six redirect URIs", `{"redirect_uris":["https://a/1","https://a/2","https://a/3","https://a/4","https://a/5","https://a/6"]}`, 400, "invalid_redirect_uri"},
		{"http beyond loopback", `{"redirect_uris":["http://app.example/cb"]}`, 400, "invalid_redirect_uri"},
		{"custom scheme", `{"redirect_uris":["myapp://cb"]}`, 400, "invalid_redirect_uri"},
		{"port 0", `{"redirect_uris":["http://127.0.0.1:0/cb"]}`, 400, "invalid_redirect_uri"},
		{"port beyond 65535", `{"redirect_uris":["http://127.0.0.1:99999/cb"]}`, 400, "invalid_redirect_uri"},
		{"port with a leading zero", `{"redirect_uris":["https://app.example:0443/cb"]}`, 400, "invalid_redirect_uri"},
		{"empty port", `{"redirect_uris":["http://localhost:/cb"]}`, 400, "invalid_redirect_uri"},
		{"fragment", `{"redirect_uris":["https://app.example/cb#x"]}`, 400, "invalid_redirect_uri"},
		{"user info", `{"redirect_uris":["https://u:p@app.example/cb"]}`, 400, "invalid_redirect_uri"},
		{"relative", `{"redirect_uris":["/cb"]}`, 400, "invalid_redirect_uri"},
		{"too long", `{"redirect_uris":["` + long + `"]}`, 400, "invalid_redirect_uri"},
		{"implicit grant", `{"redirect_uris":["https://a/cb"],"grant_types":["implicit"]}`, 400, "invalid_client_metadata"},
		{"name too long", `{"redirect_uris":["https://a/cb"],"client_name":"` + strings.Repeat("n", maxClientNameBytes+1) + `"}`, 400, "invalid_client_metadata"},
		{"control character in the name", `{"redirect_uris":["https://a/cb"],"client_name":"a\u0007b"}`, 400, "invalid_client_metadata"},
		{"not an object", `["https://a/cb"]`, 400, "invalid_client_metadata"},
		{"over 16 KiB", `{"redirect_uris":["https://a/cb"],"x":"` + strings.Repeat("x", maxRegistrationBody) + `"}`, 400, "invalid_client_metadata"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			a := e.do(http.MethodPost, PathRegister, "application/json", test.body)
			if a.status != test.status || (test.error != "" && a.json(t)["error"] != test.error) {
				t.Errorf("register = %d %s, want %d %s", a.status, a.body, test.status, test.error)
			}
		})
	}
	a := e.do(http.MethodPost, PathRegister, "application/json", `{"redirect_uris":["https://a/cb"],"token_endpoint_auth_method":"client_secret_basic","client_name":"X"}`)
	var got map[string]any
	json.Unmarshal([]byte(a.body), &got)
	if got["token_endpoint_auth_method"] != "none" || got["client_secret"] != nil {
		t.Errorf("a client asking for a secret got %v, want a public client", got)
	}
	if a := e.do(http.MethodPost, PathRegister, "text/plain", `{}`); a.status != http.StatusBadRequest {
		t.Errorf("text/plain registration = %d, want 400", a.status)
	}
}

// A loopback redirect URI matches ignoring its port; every other one byte
// for byte (RFC 8252 §7.3).
func TestMatchRedirect(t *testing.T) {
	c := &Client{RedirectURIs: []string{"http://127.0.0.1/cb", "https://app.example/cb?x=1"}}
	for _, test := range []struct {
		uri  string
		want bool
	}{
		{"http://127.0.0.1/cb", true},
		{"http://127.0.0.1:49152/cb", true},
		{"http://127.0.0.1:49152/cb2", false},
		{"http://127.0.0.1:65535/cb", true},
		{"http://127.0.0.1:0/cb", false},
		{"http://127.0.0.1:99999/cb", false},
		{"http://127.0.0.1:49152/cb?x", false},
		{"http://localhost:49152/cb", false},
		{"https://127.0.0.1:49152/cb", false},
		{"https://app.example/cb?x=1", true},
		{"https://app.example:443/cb?x=1", false},
		{"https://app.example/cb", false},
	} {
		if got := c.matchRedirect(test.uri); got != test.want {
			t.Errorf("matchRedirect(%q) = %v, want %v", test.uri, got, test.want)
		}
	}
}

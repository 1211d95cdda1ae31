package oauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// fuzzServer is an authorization server served in-process (no listener),
// for the fuzz targets.
func fuzzServer(f *testing.F) (*Server, *fakeGrants) {
	g := &fakeGrants{}
	srv, err := New(Config{
		Issuer: "http://127.0.0.1:7331", Resource: "http://127.0.0.1:7331/mcp", Secret: []byte(strings.Repeat("f", 32)),
		Grants: g, Logger: discard,
	})
	if err != nil {
		f.Fatal(err)
	}
	return srv, g
}

func serve(srv *Server, method, target, contentType, body string) *httptest.ResponseRecorder {
	path, query, _ := strings.Cut(target, "?")
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.URL.RawQuery = query
	req.Host = "127.0.0.1:7331"
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, req)
	return w
}

// FuzzRegister: whatever the body, registration answers 201 with a client
// id that verifies and carries 1–5 acceptable redirect URIs and a bounded
// printable name, or 400 with an OAuth error; never anything else.
func FuzzRegister(f *testing.F) {
	srv, _ := fuzzServer(f)
	for _, seed := range []string{
		`{"client_name":"x","redirect_uris":["http://127.0.0.1/cb"]}`,
		`{"redirect_uris":["https://a.example/cb","http://[::1]:9/x?y=1"],"grant_types":["authorization_code"]}`,
		`{"redirect_uris":[]}`, `{"redirect_uris":"https://a/cb"}`, `null`, `{`, `{"client_name":"\u0000"}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, body string) {
		w := serve(srv, http.MethodPost, PathRegister, "application/json", body)
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("answer %d is not JSON: %q", w.Code, w.Body)
		}
		switch w.Code {
		case http.StatusCreated:
			id, _ := m["client_id"].(string)
			c, err := srv.parseClientID(id)
			if err != nil {
				t.Fatalf("minted client id does not verify: %v", err)
			}
			if n := len(c.RedirectURIs); n < 1 || n > maxRedirectURIs {
				t.Fatalf("%d redirect URIs", n)
			}
			for _, u := range c.RedirectURIs {
				if checkRedirectURI(u) != nil {
					t.Fatalf("registered redirect URI %q is one the rules refuse", u)
				}
			}
			if len(c.Name) > maxClientNameBytes || !utf8.ValidString(c.Name) {
				t.Fatalf("name %q", c.Name)
			}
		case http.StatusBadRequest:
			if e, _ := m["error"].(string); e != "invalid_client_metadata" && e != "invalid_redirect_uri" {
				t.Fatalf("error %q", e)
			}
		default:
			t.Fatalf("status %d", w.Code)
		}
	})
}

// FuzzToken: whatever the form, the token endpoint answers an OAuth
// error or tokens, never a 5xx; tokens only for the one code minted for
// the target, with its verifier, and at most once.
func FuzzToken(f *testing.F) {
	srv, g := fuzzServer(f)
	c := &Client{ID: "mcpc_fuzz", Name: "fuzz", RedirectURIs: []string{"http://127.0.0.1/cb"}}
	verifier := strings.Repeat("v", 43)
	if err := srv.state.AddCode(context.Background(), codeHash("the-code"), Code{
		ClientID: c.ID, ClientName: c.Name, Redirect: "http://127.0.0.1:9/cb", Challenge: s256(verifier), Resource: srv.Resource(),
		Access: AccessReadOnly, Expires: srv.cfg.Now().Add(DefaultCodeTTL),
	}); err != nil {
		f.Fatal(err)
	}
	good := url.Values{"grant_type": {"authorization_code"}, "code": {"the-code"}, "client_id": {c.ID},
		"redirect_uri": {"http://127.0.0.1:9/cb"}, "code_verifier": {verifier}}.Encode()
	for _, seed := range []string{
		good, "grant_type=refresh_token&refresh_token=r&client_id=x", "grant_type=password", "", "%zz",
		"grant_type=authorization_code&code=the-code&code=x", strings.Replace(good, "vvvv", "vvvw", 1),
	} {
		f.Add(seed, "application/x-www-form-urlencoded")
	}
	f.Add(good, "application/json")
	f.Fuzz(func(t *testing.T, body, contentType string) {
		w := serve(srv, http.MethodPost, PathToken, contentType, body)
		var m map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
			t.Fatalf("answer %d is not JSON: %q", w.Code, w.Body)
		}
		switch w.Code {
		case http.StatusOK:
			if m["access_token"] == nil || m["token_type"] != "Bearer" {
				t.Fatalf("200 without tokens: %v", m)
			}
		case http.StatusBadRequest:
			if m["error"] == nil {
				t.Fatalf("400 without error: %v", m)
			}
		default:
			t.Fatalf("status %d: %v", w.Code, m)
		}
		if n := len(g.requests()); n > 1 {
			t.Fatalf("%d grants issued from one code", n)
		}
	})
}

// FuzzAuthorize: whatever the query, the authorization endpoint never
// sends the user agent anywhere but a redirect URI the client registered.
func FuzzAuthorize(f *testing.F) {
	srv, _ := fuzzServer(f)
	id := srv.mintClientID(registration{Name: "fuzz", Redirect: []string{"http://127.0.0.1/cb", "https://app.example/cb"}})
	_, challenge := pkce("fz")
	good := url.Values{"response_type": {"code"}, "client_id": {id}, "redirect_uri": {"http://127.0.0.1:5/cb"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "state": {"s"}}
	f.Add(good.Encode())
	for _, k := range []string{"redirect_uri", "resource", "code_challenge_method", "response_type"} {
		v := url.Values{}
		for kk, vv := range good {
			v[kk] = vv
		}
		v.Set(k, "https://evil.example/cb")
		f.Add(v.Encode())
	}
	f.Add("client_id=" + id + "&redirect_uri=https%3A%2F%2Fapp.example%2Fcb%2F..%2Fx")
	f.Fuzz(func(t *testing.T, query string) {
		w := serve(srv, http.MethodGet, PathAuthorize+"?"+query, "", "")
		loc := w.Header().Get("Location")
		if loc == "" {
			return
		}
		u, err := url.Parse(loc)
		if err != nil {
			t.Fatalf("Location %q", loc)
		}
		target := u.Scheme + "://" + u.Host + u.Path
		if !(strings.HasPrefix(target, "http://127.0.0.1") && u.Path == "/cb" && (u.Port() == "" || u.Hostname() == "127.0.0.1")) &&
			target != "https://app.example/cb" {
			t.Fatalf("redirect to %q, not a registered URI", loc)
		}
		if u.Query().Get("iss") != srv.Issuer() {
			t.Fatalf("redirect without iss: %q", loc)
		}
	})
}

package mcpruntime_test

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// idp is an organisation's identity provider: metadata and one RSA key.
type idp struct {
	srv *httptest.Server
	key *rsa.PrivateKey
}

func newIDP(t *testing.T) *idp {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	noErr(t, err)
	p := &idp{key: k}
	p.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			json.NewEncoder(w).Encode(map[string]string{"issuer": p.srv.URL, "jwks_uri": p.srv.URL + "/jwks"})
		case "/jwks":
			json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: []jose.JSONWebKey{{Key: &k.PublicKey, KeyID: "k1", Algorithm: "RS256", Use: "sig"}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.srv.Close)
	return p
}

func (p *idp) pool() *x509.CertPool {
	pool := x509.NewCertPool()
	pool.AddCert(p.srv.Certificate())
	return pool
}

func (p *idp) token(t *testing.T, sub, aud, scope string, iat, exp time.Time) string {
	t.Helper()
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.RS256, Key: p.key}, (&jose.SignerOptions{}).WithHeader("kid", "k1"))
	noErr(t, err)
	tok, err := jwt.Signed(signer).Claims(jwt.Claims{
		Issuer: p.srv.URL, Subject: sub, Audience: jwt.Audience{aud},
		IssuedAt: jwt.NewNumericDate(iat), Expiry: jwt.NewNumericDate(exp),
	}).Claims(map[string]any{"scope": scope}).Serialize()
	noErr(t, err)
	return tok
}

// SPEC §5c resource-server mode, end to end: the runtime accepts the
// issuer's JWTs for its resource, each (iss, sub) one client namespace;
// the metadata names the issuer; the 401 carries the required scopes; a
// host's revocation ends the subject's sessions and keeps its older tokens
// out; a JWT for another audience is refused like an unknown token.
func TestOAuthResourceServerMode(t *testing.T) {
	p := newIDP(t)
	clock := newFakeClock()
	e := newOAuthEnv(t, mcpruntime.Config{Now: clock.Now, OAuth: mcpruntime.OAuthConfig{
		Issuer: p.srv.URL, IssuerRootCAs: p.pool(), RequiredScopes: []string{"mcp"}, ReadWriteScope: "mcp:write",
	}})
	resource := e.origin + "/mcp"
	now := clock.Now()
	alice := p.token(t, "alice", resource, "mcp", now, now.Add(time.Hour))

	code, body := get(t, e.origin+"/.well-known/oauth-protected-resource/mcp")
	if code != http.StatusOK || !strings.Contains(body, `"authorization_servers":["`+p.srv.URL+`"]`) {
		t.Errorf("metadata = %d %s, want the issuer", code, body)
	}
	if code, _ := get(t, e.origin+"/.well-known/oauth-authorization-server"); code != http.StatusNotFound {
		t.Errorf("the runtime's own AS metadata in resource-server mode = %d, want 404", code)
	}
	ht.Want401(t, "no token", e.Post("", "", ht.PingBody),
		`Bearer resource_metadata="`+e.origin+`/.well-known/oauth-protected-resource/mcp", scope="mcp"`)
	if _, err := e.rt.NewPairingCode(context.Background(), "read-only"); err == nil {
		t.Error("a pairing code in resource-server mode")
	}

	sid := e.Initialize(alice)
	e.WantPing("alice again", alice, sid)
	second := p.token(t, "alice", resource, "mcp mcp:write", now.Add(time.Second), now.Add(time.Hour))
	e.WantPing("another token of alice, same namespace", second, sid)
	res := e.Post(second, sid, capabilitiesCall)
	if !strings.Contains(string(res.Body), `"access":"read-write"`) {
		t.Errorf("capabilities of a read-write JWT = %s", res)
	}
	owner := e.rt.MCPSessions()[0].Owner
	if !strings.HasPrefix(owner, "client:cl_") {
		t.Fatalf("owner %q", owner)
	}

	other := p.token(t, "alice", "https://other.example/mcp", "mcp", now, now.Add(time.Hour))
	unknown := e.Post("eyJhbGciOiJSUzI1NiJ9.e30.c2ln", "", ht.InitBody(ht.LatestVersion))
	ht.SameAsUnknown(t, "another audience", e.Post(other, "", ht.InitBody(ht.LatestVersion)), unknown)
	if !slices.Contains(e.kinds(), "audience_refused/audience_mismatch") {
		t.Errorf("events %v, want audience_refused", e.kinds())
	}
	noScope := p.token(t, "bob", resource, "openid", now, now.Add(time.Hour))
	ht.Want401(t, "without the required scope", e.Post(noScope, "", ht.InitBody(ht.LatestVersion)), `Bearer error="invalid_token", resource_metadata="`+e.origin+`/.well-known/oauth-protected-resource/mcp", scope="mcp"`)

	st := e.Stream(alice, sid)
	noErr(t, e.rt.RevokeClient(context.Background(), owner[len("client:"):]))
	st.WantEnd(t, "revoked subject")
	waitSessionGone(t, e.rt, "revoked subject", sid)
	ht.Want401(t, "alice's older token after revocation", e.Post(alice, "", ht.InitBody(ht.LatestVersion)), `Bearer error="invalid_token", resource_metadata="`+e.origin+`/.well-known/oauth-protected-resource/mcp", scope="mcp"`)
	clock.Advance(time.Minute)
	fresh := p.token(t, "alice", resource, "mcp", clock.Now(), clock.Now().Add(time.Hour))
	e.Initialize(fresh)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	noErr(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

package oauth

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// testIssuer is an external authorization server: RFC 8414 metadata and a
// JWKS over TLS on loopback, and the private keys to sign with.
type testIssuer struct {
	srv         *httptest.Server
	mu          sync.Mutex
	keys        map[string]any // kid → private key (published)
	jwksFetch   atomic.Int32
	unpublished map[string]any // kid → private key (not in the JWKS)
}

func newTestIssuer(t *testing.T) *testIssuer {
	t.Helper()
	is := &testIssuer{keys: map[string]any{}, unpublished: map[string]any{}}
	is.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/oauth-authorization-server":
			json.NewEncoder(w).Encode(map[string]string{"issuer": is.srv.URL, "jwks_uri": is.srv.URL + "/jwks"})
		case "/jwks":
			is.jwksFetch.Add(1)
			json.NewEncoder(w).Encode(is.jwks())
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(is.srv.Close)
	is.addKey(t, "k1", true)
	return is
}

func (is *testIssuer) url() string { return is.srv.URL }

func (is *testIssuer) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(is.srv.Certificate())
	return p
}

// addKey makes an RSA key kid, published in the JWKS or not.
func (is *testIssuer) addKey(t *testing.T, kid string, publish bool) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	is.mu.Lock()
	defer is.mu.Unlock()
	if publish {
		is.keys[kid] = k
	} else {
		is.unpublished[kid] = k
	}
}

func (is *testIssuer) publish(kid string) {
	is.mu.Lock()
	defer is.mu.Unlock()
	is.keys[kid] = is.unpublished[kid]
}

func (is *testIssuer) jwks() jose.JSONWebKeySet {
	is.mu.Lock()
	defer is.mu.Unlock()
	var set jose.JSONWebKeySet
	for kid, k := range is.keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: &k.(*rsa.PrivateKey).PublicKey, KeyID: kid, Algorithm: string(jose.RS256), Use: "sig"})
	}
	return set
}

func (is *testIssuer) private(kid string) any {
	is.mu.Lock()
	defer is.mu.Unlock()
	if k, ok := is.keys[kid]; ok {
		return k
	}
	return is.unpublished[kid]
}

// jwtClaims are a token's claims; sign fills the defaults.
type jwtClaims struct {
	Issuer, Subject, Audience string
	Expiry, NotBefore, Issued time.Time
	Scope                     string
	NoExpiry                  bool
}

// sign signs claims with kid's key (RS256).
func (is *testIssuer) sign(t *testing.T, kid string, c jwtClaims) string {
	t.Helper()
	return signWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: is.private(kid)}, kid, c)
}

func signWith(t *testing.T, key jose.SigningKey, kid string, c jwtClaims) string {
	t.Helper()
	opts := (&jose.SignerOptions{}).WithType("at+jwt")
	if kid != "" {
		opts = opts.WithHeader("kid", kid)
	}
	signer, err := jose.NewSigner(key, opts)
	if err != nil {
		t.Fatal(err)
	}
	std := jwt.Claims{Issuer: c.Issuer, Subject: c.Subject, Audience: jwt.Audience{c.Audience}, IssuedAt: jwt.NewNumericDate(c.Issued)}
	if !c.NoExpiry {
		std.Expiry = jwt.NewNumericDate(c.Expiry)
	}
	if !c.NotBefore.IsZero() {
		std.NotBefore = jwt.NewNumericDate(c.NotBefore)
	}
	tok, err := jwt.Signed(signer).Claims(std).Claims(map[string]any{"scope": c.Scope}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func ecKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

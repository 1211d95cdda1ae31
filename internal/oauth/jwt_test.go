package oauth

import (
	"context"
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

const jwtResource = "https://rt.example/mcp"

func newVerifier(t *testing.T, is *testIssuer, c *clock, opts ...func(*VerifierConfig)) *Verifier {
	t.Helper()
	cfg := VerifierConfig{
		Issuer: is.url(), Resource: jwtResource, RequiredScopes: []string{"mcp"}, ReadWriteScope: "mcp:write",
		RootCAs: is.pool(), Now: c.Now, Logger: slog.New(slog.DiscardHandler),
	}
	for _, o := range opts {
		o(&cfg)
	}
	v, err := NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func (is *testIssuer) good() jwtClaims {
	return jwtClaims{Issuer: is.url(), Subject: "alice", Audience: jwtResource, Issued: t0, Expiry: t0.Add(time.Hour), Scope: "mcp"}
}

// SPEC §5c: a JWT of the issuer, for this resource, in time, with the
// required scopes, signs its (iss, sub) in; every JWT of the subject maps
// to one grant.
func TestVerifyAccepts(t *testing.T) {
	is := newTestIssuer(t)
	c := &clock{now: t0}
	v := newVerifier(t, is, c)
	ctx := context.Background()
	s, err := v.Verify(ctx, is.sign(t, "k1", is.good()))
	if err != nil {
		t.Fatalf("Verify = %v", err)
	}
	if s.Grant != GrantID(is.url(), "alice") || s.Access != AccessReadOnly || !s.Expires.Equal(t0.Add(time.Hour+MaxSkew)) || s.Label != "jwt: alice" {
		t.Errorf("Verify = %+v", s)
	}
	rw := is.good()
	rw.Scope = "mcp mcp:write"
	rw.Issued = t0.Add(time.Second)
	s2, err := v.Verify(ctx, is.sign(t, "k1", rw))
	if err != nil || s2.Grant != s.Grant || s2.Access != AccessReadWrite {
		t.Errorf("a second token of alice with the read-write scope = %+v, %v; want the same grant, read-write", s2, err)
	}
	if GrantID(is.url(), "bob") == s.Grant || GrantID("https://other", "alice") == s.Grant {
		t.Error("two subjects share a grant")
	}
	// Skew: 50 s past exp still passes, 70 s does not.
	c.Advance(time.Hour + 50*time.Second)
	if _, err := v.Verify(ctx, is.sign(t, "k1", is.good())); err != nil {
		t.Errorf("within the skew: %v", err)
	}
	c.Advance(20 * time.Second)
	if _, err := v.Verify(ctx, is.sign(t, "k1", is.good())); !errors.Is(err, ErrJWTExpired) {
		t.Errorf("past the skew: %v, want ErrJWTExpired", err)
	}
}

// SPEC §5c refusals: a JWT with a wrong audience, a wrong issuer, expired,
// not yet valid, without exp, alg none, HMAC keyed with the public key,
// an unknown key, a bad signature, without the required scope, without
// subject.
func TestVerifyRefusals(t *testing.T) {
	is := newTestIssuer(t)
	is.addKey(t, "rogue", false)
	pub := is.jwks().Keys[0].Key.(*rsa.PublicKey)
	der := pub.N.Bytes()
	tests := []struct {
		name string
		tok  func(t *testing.T) string
		want error
	}{
		{"wrong audience", func(t *testing.T) string {
			c := is.good()
			c.Audience = "https://other.example/mcp"
			return is.sign(t, "k1", c)
		}, ErrJWTAudience},
		{"wrong issuer", func(t *testing.T) string {
			c := is.good()
			c.Issuer = "https://evil.example"
			return is.sign(t, "k1", c)
		}, ErrJWTIssuer},
		{"expired", func(t *testing.T) string {
			c := is.good()
			c.Expiry = t0.Add(-2 * time.Minute)
			return is.sign(t, "k1", c)
		}, ErrJWTExpired},
		{"not yet valid", func(t *testing.T) string {
			c := is.good()
			c.NotBefore = t0.Add(2 * time.Minute)
			return is.sign(t, "k1", c)
		}, ErrJWTExpired},
		{"without exp", func(t *testing.T) string {
			c := is.good()
			c.NoExpiry = true
			return is.sign(t, "k1", c)
		}, ErrJWTExpired},
		{"alg none", func(t *testing.T) string {
			good := is.sign(t, "k1", is.good())
			parts := strings.Split(good, ".")
			header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","kid":"k1"}`))
			return header + "." + parts[1] + "."
		}, ErrJWTMalformed},
		{"HS256 keyed with the public key", func(t *testing.T) string {
			return signWith(t, jose.SigningKey{Algorithm: jose.HS256, Key: der}, "k1", is.good())
		}, ErrJWTMalformed},
		{"unknown key", func(t *testing.T) string { return is.sign(t, "rogue", is.good()) }, ErrJWTUnknownKey},
		{"a published kid, another key's signature", func(t *testing.T) string {
			return signWith(t, jose.SigningKey{Algorithm: jose.RS256, Key: is.private("rogue")}, "k1", is.good())
		}, ErrJWTSignature},
		{"an EC key under a published kid", func(t *testing.T) string {
			return signWith(t, jose.SigningKey{Algorithm: jose.ES256, Key: ecKey(t)}, "k1", is.good())
		}, ErrJWTUnknownKey},
		{"no required scope", func(t *testing.T) string {
			c := is.good()
			c.Scope = "openid"
			return is.sign(t, "k1", c)
		}, ErrJWTScope},
		{"no subject", func(t *testing.T) string {
			c := is.good()
			c.Subject = ""
			return is.sign(t, "k1", c)
		}, ErrJWTSubject},
		{"not a JWT", func(*testing.T) string { return "a.b.c" }, ErrJWTMalformed},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			v := newVerifier(t, is, &clock{now: t0})
			if _, err := v.Verify(context.Background(), test.tok(t)); !errors.Is(err, test.want) {
				t.Errorf("Verify = %v, want %v", err, test.want)
			}
		})
	}
}

// Keys rotate: a token of a key id the cached set lacks refetches the
// JWKS, at most once per interval.
func TestVerifyKeyRotation(t *testing.T) {
	is := newTestIssuer(t)
	c := &clock{now: t0}
	v := newVerifier(t, is, c)
	ctx := context.Background()
	if _, err := v.Verify(ctx, is.sign(t, "k1", is.good())); err != nil {
		t.Fatal(err)
	}
	is.addKey(t, "k2", false)
	if _, err := v.Verify(ctx, is.sign(t, "k2", is.good())); !errors.Is(err, ErrJWTUnknownKey) {
		t.Fatalf("an unpublished key = %v", err)
	}
	fetches := is.jwksFetch.Load()
	is.publish("k2")
	for range 3 {
		if _, err := v.Verify(ctx, is.sign(t, "k2", is.good())); !errors.Is(err, ErrJWTUnknownKey) {
			t.Fatalf("within the interval = %v, want ErrJWTUnknownKey (no refetch yet)", err)
		}
	}
	if n := is.jwksFetch.Load(); n != fetches {
		t.Errorf("%d JWKS fetches within the interval, want none", n-fetches)
	}
	c.Advance(time.Minute)
	if _, err := v.Verify(ctx, is.sign(t, "k2", is.good())); err != nil {
		t.Errorf("the rotated key once the interval passed = %v", err)
	}
	if n := is.jwksFetch.Load(); n != fetches+1 {
		t.Errorf("%d JWKS fetches, want one more", n-fetches)
	}
}

// A revoked subject's tokens issued before the revocation stay refused;
// a newer token signs it in again.
func TestVerifyRevokedSubject(t *testing.T) {
	is := newTestIssuer(t)
	c := &clock{now: t0}
	v := newVerifier(t, is, c)
	old := is.sign(t, "k1", is.good())
	v.Revoked(GrantID(is.url(), "alice"), t0.Add(time.Second))
	if _, err := v.Verify(context.Background(), old); !errors.Is(err, ErrJWTRevoked) {
		t.Errorf("a token issued before the revocation = %v, want ErrJWTRevoked", err)
	}
	newer := is.good()
	newer.Issued = t0.Add(2 * time.Second)
	if _, err := v.Verify(context.Background(), is.sign(t, "k1", newer)); err != nil {
		t.Errorf("a token issued after = %v", err)
	}
}

// The protected-resource metadata names the external issuer and the
// required scopes.
func TestVerifierMetadata(t *testing.T) {
	is := newTestIssuer(t)
	v := newVerifier(t, is, &clock{now: t0})
	ts := httptest.NewServer(v)
	defer ts.Close()
	resp, err := http.Get(ts.URL + PathResourceMetadata + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m ResourceMetadataDoc
	if err := jsonDecode(resp, &m); err != nil || m.Resource != jwtResource || len(m.AuthorizationServers) != 1 || m.AuthorizationServers[0] != is.url() || m.ScopesSupported[0] != "mcp" {
		t.Errorf("metadata = %+v, %v", m, err)
	}
	if v.ResourceMetadataURL() != "https://rt.example"+PathResourceMetadata+"/mcp" {
		t.Errorf("ResourceMetadataURL = %s", v.ResourceMetadataURL())
	}
	if !LooksLikeJWT(is.sign(t, "k1", is.good())) || LooksLikeJWT("mcprt_x") || LooksLikeJWT("a.b") {
		t.Error("LooksLikeJWT")
	}
}

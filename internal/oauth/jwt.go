package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/agenthost/mcpruntime/internal/httpguard"
)

// Algorithms are the JWS algorithms a JWT may be signed with: asymmetric
// only. "none" is never accepted, nor any HMAC (a public key must never
// verify as a shared secret).
var Algorithms = []jose.SignatureAlgorithm{
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512,
	jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
}

// MaxSkew bounds the clock skew allowed on exp, nbf and iat.
const MaxSkew = 60 * time.Second

// Refusals of Verify. Each matches ErrJWT.
var (
	ErrJWT            = errors.New("jwt refused")
	ErrJWTMalformed   = fmt.Errorf("%w: malformed or of a refused algorithm", ErrJWT)
	ErrJWTUnknownKey  = fmt.Errorf("%w: signed by no key of the issuer", ErrJWT)
	ErrJWTSignature   = fmt.Errorf("%w: bad signature", ErrJWT)
	ErrJWTIssuer      = fmt.Errorf("%w: wrong issuer", ErrJWT)
	ErrJWTAudience    = fmt.Errorf("%w: wrong audience", ErrJWT)
	ErrJWTExpired     = fmt.Errorf("%w: expired, not yet valid, or without exp", ErrJWT)
	ErrJWTScope       = fmt.Errorf("%w: a required scope is missing", ErrJWT)
	ErrJWTSubject     = fmt.Errorf("%w: no subject", ErrJWT)
	ErrJWTRevoked     = fmt.Errorf("%w: its subject's grant was revoked after it was issued", ErrJWT)
	ErrJWTUnavailable = fmt.Errorf("%w: the issuer's keys could not be fetched", ErrJWT)
)

// VerifierConfig configures the resource-server mode.
type VerifierConfig struct {
	// Issuer is the external authorization server's issuer identifier: its
	// metadata is at Issuer's RFC 8414 (or OpenID) well-known URL. https,
	// or http on loopback. Required.
	Issuer string
	// Resource is the MCP endpoint's URL, the audience a JWT must name.
	// Required.
	Resource string
	// RequiredScopes must all be in a JWT's scope (or scp) claim.
	RequiredScopes []string
	// ReadWriteScope makes a JWT carrying it read-write; "": every JWT is
	// read-only.
	ReadWriteScope string
	// Skew is the clock skew allowed on exp, nbf and iat, at most MaxSkew.
	// Zero: MaxSkew.
	Skew time.Duration
	// RefetchInterval bounds the JWKS fetches: a key id not in the cached
	// set refetches it at most once per interval. Zero: 1 min.
	RefetchInterval time.Duration
	// RootCAs verifies the issuer's server. Nil: the system's.
	RootCAs *x509.CertPool
	// Guard is the listener's DNS-rebinding guard, for the metadata route.
	Guard httpguard.Guard
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Verifier verifies an external issuer's JWT access tokens, and serves the
// protected-resource metadata naming that issuer. Safe for concurrent use.
type Verifier struct {
	cfg      VerifierConfig
	client   *http.Client
	metaPath string
	prMeta   []byte

	mu        sync.Mutex // guards the fields below
	jwksURI   string
	keys      jose.JSONWebKeySet
	fetched   time.Time            // of the last JWKS fetch attempt
	revokedAt map[string]time.Time // grant id → when the host revoked it
}

// NewVerifier returns the verifier. It fetches nothing yet: the issuer's
// metadata and keys are fetched at the first JWT.
func NewVerifier(cfg VerifierConfig) (*Verifier, error) {
	iss, err := url.Parse(cfg.Issuer)
	if err != nil || iss.Host == "" || iss.RawQuery != "" || iss.Fragment != "" ||
		!(iss.Scheme == "https" || iss.Scheme == "http" && loopbackHost(iss.Hostname())) {
		return nil, fmt.Errorf("oauth issuer %q: want an https URL (http on loopback only)", cfg.Issuer)
	}
	res, err := url.Parse(cfg.Resource)
	if err != nil || res.Host == "" {
		return nil, fmt.Errorf("resource %q: want an absolute URL", cfg.Resource)
	}
	if cfg.Skew <= 0 || cfg.Skew > MaxSkew {
		cfg.Skew = MaxSkew
	}
	if cfg.RefetchInterval <= 0 {
		cfg.RefetchInterval = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	v := &Verifier{
		cfg: cfg, metaPath: PathResourceMetadata + res.Path, revokedAt: map[string]time.Time{},
		client: &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: cfg.RootCAs, MinVersion: tls.VersionTLS12}, Proxy: http.ProxyFromEnvironment},
		},
	}
	v.prMeta = mustJSON(ResourceMetadata(cfg.Resource, cfg.Issuer, cfg.RequiredScopes))
	return v, nil
}

// Resource returns the resource, the audience a JWT must name.
func (v *Verifier) Resource() string { return v.cfg.Resource }

// ResourceMetadataURL is the URL of the protected-resource metadata.
func (v *Verifier) ResourceMetadataURL() string {
	u, _ := url.Parse(v.cfg.Resource)
	return u.Scheme + "://" + u.Host + v.metaPath
}

// ServeHTTP serves the protected-resource metadata, naming the issuer;
// every other path is a JSON 404.
func (v *Verifier) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	g := v.cfg.Guard
	if g.Check(r) != nil {
		writeJSONError(w, http.StatusForbidden, "access_denied", "origin or host not allowed")
		return
	}
	if r.URL.Path != v.metaPath && r.URL.Path != PathResourceMetadata {
		writeJSONError(w, http.StatusNotFound, "not_found", "not found")
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(v.prMeta)
}

// LooksLikeJWT reports whether tok has the shape of a compact JWS: three
// base64url parts. A cheap pre-filter.
func LooksLikeJWT(tok string) bool {
	if len(tok) > 16<<10 || strings.Count(tok, ".") != 2 {
		return false
	}
	for i := 0; i < len(tok); i++ {
		c := tok[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// Subject is who a verified JWT signs in: its grant, and what it may do.
type Subject struct {
	Grant   string    // client grant id, the same for every JWT of (iss, sub)
	Label   string    // "jwt: <sub>"
	Access  string    // AccessReadOnly or AccessReadWrite
	Expires time.Time // exp plus the skew: when the token stops authenticating
}

// GrantID is the client grant of (iss, sub): "cl_" and 128 bits of their
// SHA-256, so that every JWT of one subject shares one namespace.
func GrantID(iss, sub string) string {
	sum := sha256.Sum256([]byte(iss + "\x00" + sub))
	return "cl_" + hex.EncodeToString(sum[:16])
}

// claims are the claims read besides the registered ones.
type claims struct {
	Scope string          `json:"scope"`
	Scp   json.RawMessage `json:"scp"`
}

func (c claims) scopes() []string {
	out := strings.Fields(c.Scope)
	if len(c.Scp) > 0 {
		var list []string
		var one string
		if json.Unmarshal(c.Scp, &list) == nil {
			out = append(out, list...)
		} else if json.Unmarshal(c.Scp, &one) == nil {
			out = append(out, strings.Fields(one)...)
		}
	}
	return out
}

// Verify checks a JWT: an allowed algorithm, a signature by a key of the
// issuer's JWKS (refetched at most once per interval on an unknown key
// id), iss, aud = the resource, exp (required) and nbf and iat within the
// skew, a subject, the required scopes, and that its subject's grant was
// not revoked after it was issued. Errors match ErrJWT.
func (v *Verifier) Verify(ctx context.Context, tok string) (Subject, error) {
	t, err := jwt.ParseSigned(tok, Algorithms)
	if err != nil || len(t.Headers) != 1 {
		return Subject{}, ErrJWTMalformed
	}
	key, err := v.key(ctx, t.Headers[0])
	if err != nil {
		return Subject{}, err
	}
	var std jwt.Claims
	var extra claims
	if err := t.Claims(key.Key, &std, &extra); err != nil {
		return Subject{}, ErrJWTSignature
	}
	now := v.cfg.Now()
	switch err := std.ValidateWithLeeway(jwt.Expected{Issuer: v.cfg.Issuer, AnyAudience: jwt.Audience{v.cfg.Resource}, Time: now}, v.cfg.Skew); {
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return Subject{}, ErrJWTIssuer
	case errors.Is(err, jwt.ErrInvalidAudience):
		return Subject{}, ErrJWTAudience
	case err != nil:
		return Subject{}, ErrJWTExpired
	}
	if std.Expiry == nil {
		return Subject{}, ErrJWTExpired
	}
	if std.Subject == "" || len(std.Subject) > 256 {
		return Subject{}, ErrJWTSubject
	}
	scopes := extra.scopes()
	for _, s := range v.cfg.RequiredScopes {
		if !slices.Contains(scopes, s) {
			return Subject{}, ErrJWTScope
		}
	}
	grant := GrantID(std.Issuer, std.Subject)
	v.mu.Lock()
	revoked, ok := v.revokedAt[grant]
	v.mu.Unlock()
	if ok && (std.IssuedAt == nil || !std.IssuedAt.Time().After(revoked)) {
		return Subject{}, ErrJWTRevoked
	}
	s := Subject{Grant: grant, Label: "jwt: " + std.Subject, Access: AccessReadOnly, Expires: std.Expiry.Time().Add(v.cfg.Skew)}
	if v.cfg.ReadWriteScope != "" && slices.Contains(scopes, v.cfg.ReadWriteScope) {
		s.Access = AccessReadWrite
	}
	return s, nil
}

// Revoked records that the host revoked grant at: JWTs of its subject
// issued (iat) until then, or without iat, are refused from now on; the
// issuer's newer tokens sign it in again.
func (v *Verifier) Revoked(grant string, at time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.revokedAt[grant] = at
}

// key finds the verification key of a JWS header: by its key id, or the
// only key when it names none. An unknown key id refetches the JWKS, at
// most once per RefetchInterval.
func (v *Verifier) key(ctx context.Context, h jose.Header) (*jose.JSONWebKey, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if k := pick(v.keys, h); k != nil {
		return k, nil
	}
	now := v.cfg.Now()
	if !v.fetched.IsZero() && now.Sub(v.fetched) < v.cfg.RefetchInterval {
		return nil, ErrJWTUnknownKey
	}
	v.fetched = now
	// The fetch holds the lock: concurrent requests with an unknown key
	// wait for it rather than fetch again.
	keys, err := v.fetchKeys(ctx)
	if err != nil {
		v.cfg.Logger.Warn("oauth: fetch the issuer's keys", "issuer", v.cfg.Issuer, "err", err)
		if len(v.keys.Keys) == 0 {
			return nil, ErrJWTUnavailable
		}
		return nil, ErrJWTUnknownKey
	}
	v.keys = keys
	if k := pick(v.keys, h); k != nil {
		return k, nil
	}
	return nil, ErrJWTUnknownKey
}

// pick returns the public signing key of set that h names.
func pick(set jose.JSONWebKeySet, h jose.Header) *jose.JSONWebKey {
	var candidates []jose.JSONWebKey
	if h.KeyID != "" {
		candidates = set.Key(h.KeyID)
	} else if len(set.Keys) == 1 {
		candidates = set.Keys
	}
	for i := range candidates {
		k := &candidates[i]
		if k.IsPublic() && k.Valid() && (k.Use == "" || k.Use == "sig") && (k.Algorithm == "" || k.Algorithm == h.Algorithm) {
			return k
		}
	}
	return nil
}

// fetchKeys reads the issuer's metadata (RFC 8414, else OpenID discovery)
// for its jwks_uri, once, then the key set.
func (v *Verifier) fetchKeys(ctx context.Context) (jose.JSONWebKeySet, error) {
	if v.jwksURI == "" {
		uri, err := v.discover(ctx)
		if err != nil {
			return jose.JSONWebKeySet{}, err
		}
		v.jwksURI = uri
	}
	var set jose.JSONWebKeySet
	if err := v.getJSON(ctx, v.jwksURI, &set); err != nil {
		return jose.JSONWebKeySet{}, err
	}
	return set, nil
}

// discover finds the issuer's jwks_uri.
func (v *Verifier) discover(ctx context.Context) (string, error) {
	iss, _ := url.Parse(v.cfg.Issuer)
	path := strings.TrimSuffix(iss.Path, "/")
	base := iss.Scheme + "://" + iss.Host
	var errs []error
	for _, u := range []string{
		base + "/.well-known/oauth-authorization-server" + path,
		base + "/.well-known/openid-configuration" + path,
		strings.TrimSuffix(v.cfg.Issuer, "/") + "/.well-known/openid-configuration",
	} {
		var meta struct {
			Issuer  string `json:"issuer"`
			JWKSURI string `json:"jwks_uri"`
		}
		if err := v.getJSON(ctx, u, &meta); err != nil {
			errs = append(errs, err)
			continue
		}
		if meta.Issuer != v.cfg.Issuer {
			return "", fmt.Errorf("metadata %s names issuer %q, want %q", u, meta.Issuer, v.cfg.Issuer)
		}
		if meta.JWKSURI == "" {
			return "", fmt.Errorf("metadata %s has no jwks_uri", u)
		}
		return meta.JWKSURI, nil
	}
	return "", errors.Join(errs...)
}

func (v *Verifier) getJSON(ctx context.Context, u string, dst any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := v.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", u, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, dst)
}

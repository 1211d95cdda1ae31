package oauth

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/httpguard"
)

// Scope is the one scope the authorization server knows: access to the MCP
// endpoint. What a grant may do (read-only or read-write) is the pairing
// code's, not the scope's.
const Scope = "mcp"

// Paths the server serves, below the issuer.
const (
	PathResourceMetadata = "/.well-known/oauth-protected-resource"
	PathServerMetadata   = "/.well-known/oauth-authorization-server"
	PathRegister         = "/oauth/register"
	PathAuthorize        = "/oauth/authorize"
	PathToken            = "/oauth/token"
)

// Defaults where a Config field is zero.
const (
	DefaultPairingTTL      = 5 * time.Minute
	DefaultCodeTTL         = 60 * time.Second
	DefaultRequestTTL      = 10 * time.Minute
	DefaultMaxPairingCodes = 100
	DefaultMaxCodes        = 1024
	DefaultMaxPending      = 1024
	DefaultAttemptsPerReq  = 5
	// DefaultClientFailuresPerMinute, DefaultSourceFailuresPerMinute and
	// DefaultFailuresPerMinute are the wrong-code budgets of one client,
	// one source address and the whole server: the server's is 16
	// clients' (SPEC §5c.8).
	DefaultClientFailuresPerMinute = 20
	DefaultSourceFailuresPerMinute = 40
	DefaultFailuresPerMinute       = 16 * DefaultClientFailuresPerMinute
	DefaultMaxConfirmedRedirects   = 1024
)

// MinSecretBytes is the least runtime secret accepted.
const MinSecretBytes = 32

// Grants is what the server asks of the runtime: the client grants its
// tokens are. The runtime's client-grant actors implement it.
type Grants interface {
	// IssueGrant creates a client grant and returns its first access
	// token, bound to req.Audience, and a refresh token for the OAuth
	// client whose client_id hashes to req.ClientHash.
	IssueGrant(ctx context.Context, req GrantRequest) (Tokens, error)
	// RefreshGrant redeems a refresh token of the client whose client_id
	// hashes to clientHash: the same grant's next access token and a new
	// refresh token. A spent token presented again — of any earlier
	// generation of the grant's refresh tokens — revokes the grant
	// (fault.ErrRefreshReused); any other refusal is fault.ErrInvalidGrant.
	RefreshGrant(ctx context.Context, refreshToken, clientHash string) (Tokens, error)
	// RevokeGrant revokes grant id and every token it has — requests with
	// them fail, its sessions end, its streams close — recording reason in
	// the audit trail (an authorization code presented again:
	// "code_reused").
	RevokeGrant(ctx context.Context, id, reason string) error
}

// GrantRequest asks for a new client grant.
type GrantRequest struct {
	Label      string // "oauth: <client name>"
	Access     string // "read-only" or "read-write"
	Audience   string // the resource
	ClientHash string // hex SHA-256 of the OAuth client_id
}

// Tokens are what a grant's issue or refresh returns.
type Tokens struct {
	Grant        string // the grant id
	Access       string
	AccessToken  string
	RefreshToken string
	Expires      time.Time // the access token's expiry; zero: never
}

// Config configures the authorization server. Zero values mean the
// defaults above.
type Config struct {
	// Issuer is the public origin, scheme://host[:port] without a path:
	// the issuer identifier, and the base of every URL in the metadata.
	// Required.
	Issuer string
	// Resource is the MCP endpoint's URL (RFC 8707): Issuer + its path.
	// Required.
	Resource string
	// Secret MACs stateless client ids and CSRF tokens; at least
	// MinSecretBytes. Required.
	Secret []byte
	// Grants issues and refreshes the tokens. Required.
	Grants Grants
	// ServerName names the runtime on the consent page. Zero: "mcpruntime".
	ServerName string
	// PairingTTL is how long a pairing code may be used. Zero: 5 min.
	PairingTTL time.Duration
	// CodeTTL is how long an authorization code may be exchanged, at most
	// 60 s. Zero: 60 s.
	CodeTTL time.Duration
	// RequestTTL is how long a consent page may be answered. Zero: 10 min.
	RequestTTL time.Duration
	// MaxPairingCodes, MaxCodes and MaxPending bound the pairing codes,
	// authorization codes and consent pages outstanding at once. Zero:
	// 100, 1024, 1024.
	MaxPairingCodes, MaxCodes, MaxPending int
	// AttemptsPerRequest is how many wrong pairing codes one consent page
	// takes before it is dropped. Zero: 5.
	AttemptsPerRequest int
	// FailuresPerMinute bounds the wrong pairing codes of all consent pages
	// together, a backstop: past it every submission is refused (429) until
	// the minute's budget refills. It must be at least twice the client's
	// and the source's budgets, so that no one of them spends it alone.
	// Zero: 16 times ClientFailuresPerMinute, and at least that twice.
	FailuresPerMinute int
	// ClientFailuresPerMinute bounds the wrong pairing codes of one client
	// id (of one client id from one source address, where the source is
	// known): past it that client's submissions are refused (429), a right
	// code included (not spent), while other clients' are checked. Zero: 20.
	ClientFailuresPerMinute int
	// SourceFailuresPerMinute bounds the wrong pairing codes from one
	// source address other than loopback (an IPv6 one by its /64), whatever
	// the clients: registration is free. Zero: twice
	// ClientFailuresPerMinute.
	SourceFailuresPerMinute int
	// MaxPendingPerClient and MaxPendingPerSource are one client id's (from
	// one source) and one non-loopback source address's share of the
	// pending consent pages: a client or source at its share gives way, its
	// own oldest first. Zero: MaxPending/16 and MaxPending/8, at least 1.
	MaxPendingPerClient, MaxPendingPerSource int
	// MaxConfirmedRedirects bounds the redirect URIs remembered as confirmed
	// by a completed sign-in of their client, the least recently used
	// forgotten first: only to a confirmed one does the authorization
	// endpoint send an error back. Zero: 1024.
	MaxConfirmedRedirects int
	// AccessTokenTTL is the lifetime of an access token, for expires_in
	// when a grant does not say. Zero or negative: not said.
	AccessTokenTTL time.Duration
	// Guard is the listener's DNS-rebinding guard; the issuer's own host and
	// origin are allowed besides what it lists.
	Guard httpguard.Guard
	// ClientMetadata configures the fetching of Client ID Metadata
	// Documents.
	ClientMetadata CIMDConfig
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// Events receives the audit records of refusals (pairing and
	// authorization failures). Nil: none.
	Events func(credential.Event)
	// State makes the server's state (pairing codes, authorization codes,
	// wrong-code budgets, confirmed redirect URIs) of the limits given:
	// shared by every node of several (package cluster's, in etcd). Nil:
	// NewMemoryState, this process's.
	State func(Limits) State
	// Node is this node's id, of several: every consent page's request id
	// names it, so that a form posted to another node is sent here
	// (Forward). "": one node.
	Node string
	// Forward sends r, a consent form (its body as read, its headers as
	// sent) of a page that node shows, to that node's
	// ServeForwardedConsent, and writes its answer to w. An error means
	// nothing was written (node is gone): the form is answered as an
	// expired page's. Nil: such a form is an expired page's.
	Forward func(w http.ResponseWriter, r *http.Request, node string) error
	// Available reports whether the node serves now (several nodes: its
	// replica proved current, SPEC §5d.2); while it does not, the
	// authorization and token endpoints answer 503 with Retry-After before
	// anything is spent. Nil: always.
	Available func() bool
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// CIMDConfig configures the fetching of Client ID Metadata Documents.
type CIMDConfig struct {
	// Disabled refuses https client ids.
	Disabled bool
	// AllowPrivate lets a document be fetched from loopback, private,
	// link-local and other non-public addresses. For tests only.
	AllowPrivate bool
	// RootCAs verifies the documents' servers. Nil: the system's. For
	// tests.
	RootCAs *x509.CertPool
	// Timeout bounds one fetch. Zero: 5 s.
	Timeout time.Duration
	// MaxBytes bounds a document. Zero: 5 KiB.
	MaxBytes int64
	// CacheTTL is how long a fetched document is used. Zero: 5 min.
	CacheTTL time.Duration
	// CacheSize bounds the documents cached. Zero: 256.
	CacheSize int
}

func (c Config) withDefaults() Config {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	defInt := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.PairingTTL, DefaultPairingTTL)
	def(&c.CodeTTL, DefaultCodeTTL)
	c.CodeTTL = min(c.CodeTTL, DefaultCodeTTL)
	def(&c.RequestTTL, DefaultRequestTTL)
	defInt(&c.MaxPairingCodes, DefaultMaxPairingCodes)
	defInt(&c.MaxCodes, DefaultMaxCodes)
	defInt(&c.MaxPending, DefaultMaxPending)
	defInt(&c.AttemptsPerRequest, DefaultAttemptsPerReq)
	defInt(&c.ClientFailuresPerMinute, DefaultClientFailuresPerMinute)
	defInt(&c.SourceFailuresPerMinute, 2*c.ClientFailuresPerMinute)
	defInt(&c.FailuresPerMinute, max(16*c.ClientFailuresPerMinute, 2*c.SourceFailuresPerMinute))
	defInt(&c.MaxPendingPerClient, max(c.MaxPending/16, 1))
	defInt(&c.MaxPendingPerSource, max(c.MaxPending/8, 1))
	defInt(&c.MaxConfirmedRedirects, DefaultMaxConfirmedRedirects)
	def(&c.ClientMetadata.Timeout, 5*time.Second)
	if c.ClientMetadata.MaxBytes <= 0 {
		c.ClientMetadata.MaxBytes = 5 << 10
	}
	def(&c.ClientMetadata.CacheTTL, 5*time.Minute)
	defInt(&c.ClientMetadata.CacheSize, 256)
	if c.ServerName == "" {
		c.ServerName = "mcpruntime"
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Events == nil {
		c.Events = func(credential.Event) {}
	}
	return c
}

// Server is the authorization server, an http.Handler of the paths above.
type Server struct {
	cfg      Config
	guard    httpguard.Guard
	metaPath string // PathResourceMetadata + the resource's path
	asMeta   []byte // the RFC 8414 document
	prMeta   []byte // the RFC 9728 document
	// state holds the pairing codes, authorization codes, wrong-code
	// budgets and the redirect URIs a completed sign-in confirmed.
	state   State
	pending *pendingRequests // the consent pages this node shows
	cimd    *cimdFetcher
}

// ParseOrigin checks a public origin: http or https, a host, no path,
// query, fragment or user info. It returns it without a trailing slash.
func ParseOrigin(origin string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSuffix(origin, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil || u.Opaque != "" {
		return nil, fmt.Errorf("public origin %q: want scheme://host[:port], no path", origin)
	}
	return u, nil
}

// New returns the authorization server.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	iss, err := ParseOrigin(cfg.Issuer)
	if err != nil {
		return nil, err
	}
	cfg.Issuer = iss.String()
	res, err := url.Parse(cfg.Resource)
	if err != nil || !strings.HasPrefix(cfg.Resource, cfg.Issuer+"/") || res.RawQuery != "" || res.Fragment != "" {
		return nil, fmt.Errorf("resource %q: want the issuer %s followed by the endpoint's path", cfg.Resource, cfg.Issuer)
	}
	if len(cfg.Secret) < MinSecretBytes {
		return nil, fmt.Errorf("oauth secret of %d bytes: want at least %d", len(cfg.Secret), MinSecretBytes)
	}
	if cfg.Grants == nil {
		return nil, errors.New("oauth: no Grants")
	}
	if most := max(cfg.ClientFailuresPerMinute, cfg.SourceFailuresPerMinute); cfg.FailuresPerMinute < 2*most {
		return nil, fmt.Errorf("oauth: %d wrong codes a minute for the whole server: want at least %d, twice a client's or a source's budget, so that no one of them spends it alone", cfg.FailuresPerMinute, 2*most)
	}
	s := &Server{cfg: cfg, guard: cfg.Guard, metaPath: PathResourceMetadata + res.Path}
	s.guard.AllowedHosts = append(append([]string(nil), cfg.Guard.AllowedHosts...), iss.Hostname())
	s.guard.AllowedOrigins = append(append([]string(nil), cfg.Guard.AllowedOrigins...), cfg.Issuer)
	s.prMeta = mustJSON(ResourceMetadata(cfg.Resource, cfg.Issuer, []string{Scope}))
	s.asMeta = mustJSON(s.serverMetadata())
	newState := cfg.State
	if newState == nil {
		newState = NewMemoryState
	}
	s.state = newState(Limits{
		MaxPairingCodes: cfg.MaxPairingCodes, MaxCodes: cfg.MaxCodes, MaxConfirmedRedirects: cfg.MaxConfirmedRedirects,
		ClientFailuresPerMinute: cfg.ClientFailuresPerMinute, SourceFailuresPerMinute: cfg.SourceFailuresPerMinute,
		FailuresPerMinute: cfg.FailuresPerMinute,
	})
	s.pending = newPendingRequests(cfg.Node, cfg.MaxPending, cfg.MaxPendingPerClient, cfg.MaxPendingPerSource)
	s.cimd = newCIMDFetcher(cfg.ClientMetadata)
	return s, nil
}

// Issuer returns the issuer identifier.
func (s *Server) Issuer() string { return s.cfg.Issuer }

// Resource returns the resource the server's tokens are bound to.
func (s *Server) Resource() string { return s.cfg.Resource }

// ResourceMetadataURL is the URL of the protected-resource metadata, for
// the MCP endpoint's WWW-Authenticate challenge.
func (s *Server) ResourceMetadataURL() string { return s.cfg.Issuer + s.metaPath }

// ResourceMetadataDoc is the RFC 9728 document of resource, whose
// authorization server is issuer.
type ResourceMetadataDoc struct {
	Resource               string   `json:"resource"`
	AuthorizationServers   []string `json:"authorization_servers"`
	ScopesSupported        []string `json:"scopes_supported,omitempty"`
	BearerMethodsSupported []string `json:"bearer_methods_supported"`
	ResourceName           string   `json:"resource_name,omitempty"`
}

// ResourceMetadata returns the protected-resource metadata of resource.
func ResourceMetadata(resource, issuer string, scopes []string) ResourceMetadataDoc {
	return ResourceMetadataDoc{
		Resource: resource, AuthorizationServers: []string{issuer}, ScopesSupported: scopes,
		BearerMethodsSupported: []string{"header"}, ResourceName: "mcpruntime",
	}
}

// serverMetadata is the RFC 8414 document.
func (s *Server) serverMetadata() map[string]any {
	iss := s.cfg.Issuer
	return map[string]any{
		"issuer":                                         iss,
		"authorization_endpoint":                         iss + PathAuthorize,
		"token_endpoint":                                 iss + PathToken,
		"registration_endpoint":                          iss + PathRegister,
		"scopes_supported":                               []string{Scope},
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"code_challenge_methods_supported":               []string{"S256"},
		"authorization_response_iss_parameter_supported": true,
		"client_id_metadata_document_supported":          !s.cfg.ClientMetadata.Disabled,
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return append(b, '\n')
}

// ServeHTTP serves the paths above; any other is a JSON 404.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	if s.guard.Check(r) != nil {
		writeJSONError(w, http.StatusForbidden, "access_denied", "origin or host not allowed")
		return
	}
	if p := r.URL.Path; (p == PathAuthorize || p == PathToken) && s.cfg.Available != nil && !s.cfg.Available() {
		h.Set("Retry-After", "1")
		if p == PathToken {
			writeJSONError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "this node is not serving; try again")
			return
		}
		s.errorPage(w, http.StatusServiceUnavailable, "This server is not available right now; try again in a moment.", "unavailable", nil)
		return
	}
	switch p := r.URL.Path; {
	case p == s.metaPath || p == PathResourceMetadata:
		s.serveDoc(w, r, s.prMeta)
	case p == PathServerMetadata:
		s.serveDoc(w, r, s.asMeta)
	case p == PathRegister:
		s.only(w, r, http.MethodPost, s.register)
	case p == PathAuthorize:
		switch r.Method {
		case http.MethodGet:
			s.authorize(w, r)
		case http.MethodPost:
			s.consent(w, r)
		default:
			h.Set("Allow", "GET, POST")
			writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
		}
	case p == PathToken:
		s.only(w, r, http.MethodPost, s.token)
	default:
		writeJSONError(w, http.StatusNotFound, "not_found", "not found")
	}
}

// forwardedKey marks the context of a consent form another node
// forwarded here: it is never forwarded again.
type forwardedKey struct{}

// ServeForwardedConsent serves a consent form (POST PathAuthorize, its
// path whatever the internal listener's) that another node forwarded to
// this one, the node of its page: ServeHTTP's checks and the form's, but
// never forwarded again. r.RemoteAddr must be the client's address as the
// forwarding node saw it (the wrong-code budgets are per source). Mount
// it on the node-to-node listener only.
func (s *Server) ServeForwardedConsent(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(context.WithValue(r.Context(), forwardedKey{}, true))
	u := *r.URL
	u.Path, u.RawPath = PathAuthorize, ""
	r.URL = &u
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
		return
	}
	s.ServeHTTP(w, r)
}

func (s *Server) serveDoc(w http.ResponseWriter, r *http.Request, doc []byte) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET")
		writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Write(doc)
}

func (s *Server) only(w http.ResponseWriter, r *http.Request, method string, h http.HandlerFunc) {
	if r.Method != method {
		w.Header().Set("Allow", method)
		writeJSONError(w, http.StatusMethodNotAllowed, "invalid_request", "method not allowed")
		return
	}
	h(w, r)
}

// writeJSONError writes an OAuth error answer (RFC 6749 §5.2).
func writeJSONError(w http.ResponseWriter, status int, code, description string) {
	writeJSON(w, status, map[string]string{"error": code, "error_description": description})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	w.WriteHeader(status)
	w.Write(mustJSON(v))
}

// refused records a refusal in the audit trail.
func (s *Server) refused(kind, reason string, c *Client) {
	e := credential.Event{Kind: kind, Via: "oauth", Reason: reason, At: s.cfg.Now()}
	if c != nil {
		e.ClientName = c.Name
	}
	s.cfg.Events(e)
}

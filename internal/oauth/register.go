package oauth

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Bounds of a registration (SPEC §5c).
const (
	maxRegistrationBody = 16 << 10
	maxRedirectURIs     = 5
	maxRedirectURILen   = 512
	maxClientNameBytes  = 128
	maxClientIDLen      = 4096
	clientIDPrefix      = "mcpc_"
)

// Client is a registered OAuth client: what its client id carries (a
// stateless registration) or what its metadata document says.
type Client struct {
	ID           string
	Name         string
	RedirectURIs []string
	Issued       time.Time // zero for a metadata document
	Document     bool      // the id is a Client ID Metadata Document URL
}

// Hash is the hex SHA-256 of the client id, which binds refresh tokens.
func (c *Client) Hash() string {
	sum := sha256.Sum256([]byte(c.ID))
	return hex.EncodeToString(sum[:])
}

// registration is the payload a stateless client id carries.
type registration struct {
	Name     string   `json:"n"`
	Redirect []string `json:"r"`
	Issued   int64    `json:"t"`
	// Nonce makes every registration's id its own, even of the same
	// metadata in the same second: refresh tokens are bound to the id.
	Nonce string `json:"x"`
}

// errClient is any client id this server did not issue, that was altered,
// or whose document cannot be had: the authorization endpoint answers it
// with an error page, the token endpoint with invalid_client.
var errClient = errors.New("unknown client")

// mintClientID returns the client id carrying reg, MACed under the secret.
func (s *Server) mintClientID(reg registration) string {
	payload := base64.RawURLEncoding.EncodeToString(mustJSON(reg))
	return clientIDPrefix + payload + "." + s.mac("client-id", payload)
}

// mac is the base64url HMAC-SHA256 of msg under the runtime secret, for
// purpose (so a MAC made for one thing never verifies as another).
func (s *Server) mac(purpose, msg string) string {
	m := hmac.New(sha256.New, s.cfg.Secret)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(msg))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// macEqual compares a presented MAC with the right one in constant time.
func (s *Server) macEqual(purpose, msg, presented string) bool {
	return hmac.Equal([]byte(s.mac(purpose, msg)), []byte(presented))
}

// parseClientID verifies a stateless client id and returns its client.
func (s *Server) parseClientID(id string) (*Client, error) {
	if len(id) > maxClientIDLen {
		return nil, errClient
	}
	body, ok := strings.CutPrefix(id, clientIDPrefix)
	if !ok {
		return nil, errClient
	}
	payload, sig, ok := strings.Cut(body, ".")
	if !ok || !s.macEqual("client-id", payload, sig) {
		return nil, errClient
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil {
		return nil, errClient
	}
	var reg registration
	if err := json.Unmarshal(raw, &reg); err != nil {
		return nil, errClient
	}
	return &Client{ID: id, Name: reg.Name, RedirectURIs: reg.Redirect, Issued: time.Unix(reg.Issued, 0)}, nil
}

// client resolves a client id: a stateless registration, or an https URL
// whose metadata document is fetched (cimd.go).
func (s *Server) client(r *http.Request, id string) (*Client, error) {
	if strings.HasPrefix(id, "https://") {
		if s.cfg.ClientMetadata.Disabled {
			return nil, errClient
		}
		c, err := s.cimd.get(r.Context(), id, s.cfg.Now())
		if err != nil {
			s.cfg.Logger.Debug("oauth: client metadata document refused", "err", err)
		}
		return c, err
	}
	return s.parseClientID(id)
}

// registrationRequest is the part of RFC 7591 client metadata the server
// reads; other members are ignored.
type registrationRequest struct {
	RedirectURIs            []string `json:"redirect_uris"`
	ClientName              string   `json:"client_name"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	Scope                   string   `json:"scope"`
}

// register is POST /oauth/register (RFC 7591): the answer's client id
// carries the registration; nothing is stored. Every client is public
// (token_endpoint_auth_method "none", PKCE): a client that asked for a
// secret is told "none".
func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	if !isJSON(r.Header.Get("Content-Type")) {
		writeJSONError(w, http.StatusBadRequest, "invalid_client_metadata", "Content-Type must be application/json")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRegistrationBody))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "invalid_client_metadata", fmt.Sprintf("body unreadable or over %d bytes", maxRegistrationBody))
		return
	}
	var req registrationRequest
	if err := json.Unmarshal(raw, &req); err != nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		writeJSONError(w, http.StatusBadRequest, "invalid_client_metadata", "body must be a JSON object of client metadata")
		return
	}
	name, uris, err := checkMetadata(req.ClientName, req.RedirectURIs, req.GrantTypes, req.ResponseTypes)
	if err != nil {
		code := "invalid_client_metadata"
		if errors.Is(err, errRedirectURI) {
			code = "invalid_redirect_uri"
		}
		s.refused(kindAuthFailed, "registration_refused", nil)
		writeJSONError(w, http.StatusBadRequest, code, err.Error())
		return
	}
	now := s.cfg.Now()
	reg := registration{Name: name, Redirect: uris, Issued: now.Unix(), Nonce: randomText(9)}
	id := s.mintClientID(reg)
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id":                  id,
		"client_id_issued_at":        reg.Issued,
		"client_name":                name,
		"redirect_uris":              uris,
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"token_endpoint_auth_method": "none",
		"scope":                      Scope,
	})
}

// errRedirectURI is a redirect URI the server does not accept.
var errRedirectURI = errors.New("redirect URI refused")

// checkMetadata validates what a registration or a metadata document says
// and returns the name to show and the redirect URIs.
func checkMetadata(name string, uris, grants, responses []string) (string, []string, error) {
	if len(uris) < 1 || len(uris) > maxRedirectURIs {
		return "", nil, fmt.Errorf("%w: want 1 to %d redirect_uris, got %d", errRedirectURI, maxRedirectURIs, len(uris))
	}
	for _, u := range uris {
		if err := checkRedirectURI(u); err != nil {
			return "", nil, err
		}
	}
	for _, g := range grants {
		if g != "authorization_code" && g != "refresh_token" {
			return "", nil, fmt.Errorf("grant_types: %q is not supported (authorization_code, refresh_token)", truncate(g))
		}
	}
	for _, rt := range responses {
		if rt != "code" {
			return "", nil, fmt.Errorf("response_types: %q is not supported (code)", truncate(rt))
		}
	}
	if len(name) > maxClientNameBytes || !utf8.ValidString(name) || strings.ContainsFunc(name, unicode.IsControl) {
		return "", nil, fmt.Errorf("client_name: at most %d bytes of printable UTF-8", maxClientNameBytes)
	}
	if name == "" {
		name = "an unnamed client"
	}
	return name, slices.Clone(uris), nil
}

// checkRedirectURI accepts an absolute https URL, or http on a loopback
// host (RFC 8252 §7.3), without fragment or user info, of at most 512
// bytes.
func checkRedirectURI(raw string) error {
	if len(raw) > maxRedirectURILen {
		return fmt.Errorf("%w: over %d bytes", errRedirectURI, maxRedirectURILen)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Fragment != "" || strings.Contains(raw, "#") || u.User != nil || u.Opaque != "" {
		return fmt.Errorf("%w: %q is not an absolute URL without fragment or user info", errRedirectURI, truncate(raw))
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && loopbackHost(u.Hostname()):
	default:
		return fmt.Errorf("%w: %q: want https, or http on a loopback host", errRedirectURI, truncate(raw))
	}
	if port := u.Port(); port != "" {
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return fmt.Errorf("%w: %q: the port must be 1 to 65535", errRedirectURI, truncate(raw))
		}
	}
	if strings.HasSuffix(u.Host, ":") {
		return fmt.Errorf("%w: %q: an empty port", errRedirectURI, truncate(raw))
	}
	return nil
}

// loopbackHost reports whether host is localhost or a loopback IP.
func loopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// matchRedirect returns the registered URI that presented matches, or "".
// A loopback http URI matches ignoring its port (RFC 8252 §7.3: a native
// client listens on a port it learns only at run time); anything else
// must be byte for byte the registered one.
func (c *Client) matchRedirect(presented string) bool {
	if slices.Contains(c.RedirectURIs, presented) {
		return true
	}
	p, err := url.Parse(presented)
	if err != nil || p.Scheme != "http" || !loopbackHost(p.Hostname()) || checkRedirectURI(presented) != nil {
		return false
	}
	for _, reg := range c.RedirectURIs {
		q, err := url.Parse(reg)
		if err != nil || q.Scheme != "http" || !loopbackHost(q.Hostname()) {
			continue
		}
		if q.Hostname() == p.Hostname() && q.EscapedPath() == p.EscapedPath() && q.RawQuery == p.RawQuery {
			return true
		}
	}
	return false
}

// truncate shortens a string quoted in an error answer.
func truncate(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "…"
}

func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

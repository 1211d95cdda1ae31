package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
)

// Bounds of a token request's parameters.
const (
	minVerifierLen  = 43
	maxVerifierLen  = 128
	maxTokenParam   = 4096 // code, refresh token
	grantCodeType   = "authorization_code"
	grantRefreshTyp = "refresh_token"
)

// tokenAnswer is the RFC 6749 §5.1 answer.
type tokenAnswer struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in,omitempty"`
	RefreshToken string `json:"refresh_token,omitempty"`
	Scope        string `json:"scope"`
}

// token is POST /oauth/token.
func (s *Server) token(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "Content-Type must be application/x-www-form-urlencoded", "bad_form", nil)
		return
	}
	if err := r.ParseForm(); err != nil {
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "the form could not be read", "bad_form", nil)
		return
	}
	f := r.PostForm
	for name, vs := range f {
		if len(vs) > 1 {
			s.tokenError(w, http.StatusBadRequest, "invalid_request", "a parameter is repeated", "duplicate_parameter", nil)
			return
		}
		if len(vs[0]) > maxTokenParam {
			s.tokenError(w, http.StatusBadRequest, "invalid_request", name+" is too long", "parameter_too_long", nil)
			return
		}
	}
	clientID := f.Get("client_id")
	if id, _, ok := r.BasicAuth(); ok && clientID == "" {
		clientID, _ = url.QueryUnescape(id)
	}
	switch f.Get("grant_type") {
	case grantCodeType:
		s.exchangeCode(w, r, f, clientID)
	case grantRefreshTyp:
		s.refresh(w, r, f, clientID)
	case "":
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "grant_type is required", "no_grant_type", nil)
	default:
		s.tokenError(w, http.StatusBadRequest, "unsupported_grant_type", "grant_type must be authorization_code or refresh_token", "unsupported_grant_type", nil)
	}
}

// exchangeCode is the authorization_code grant. The code is spent first,
// so that whatever goes wrong after, it cannot be tried again (SPEC §5c).
func (s *Server) exchangeCode(w http.ResponseWriter, r *http.Request, f url.Values, clientID string) {
	code := f.Get("code")
	if code == "" {
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "code is required", "no_code", nil)
		return
	}
	hash := codeHash(code)
	g, first, found, err := s.state.SpendCode(r.Context(), hash)
	if err != nil {
		s.cfg.Logger.Error("oauth: spend a code", "err", err)
		s.unavailable(w, "the code could not be checked", "spend_failed")
		return
	}
	now := s.cfg.Now()
	switch {
	case !found:
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown, used or expired", "code_unknown_or_used", nil)
	case !first:
		// A replay, whoever presents it: the code leaked, so what its
		// exchange issued goes (RFC 6749 §4.1.2). Answered as an unknown
		// code.
		s.revokeReplayed(r, hash, g.Grant)
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown, used or expired", credential.ReasonCodeReused, g.client())
	case !now.Before(g.Expires):
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown, used or expired", "code_expired", g.client())
	case clientID != g.ClientID:
		// Answered as an unknown code: whose a code is stays untold.
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown, used or expired", "client_mismatch", g.client())
	case f.Get("redirect_uri") != g.Redirect:
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "redirect_uri is not the one of the authorization request", "redirect_uri_mismatch", g.client())
	case f.Get("resource") != "" && f.Get("resource") != g.Resource:
		s.tokenError(w, http.StatusBadRequest, "invalid_target", "resource must be "+g.Resource, "resource_mismatch", g.client())
	case !pkceText(f.Get("code_verifier"), minVerifierLen, maxVerifierLen):
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "code_verifier must be 43 to 128 characters", "pkce_mismatch", g.client())
	case !s256Matches(f.Get("code_verifier"), g.Challenge):
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "code_verifier does not match the code_challenge", "pkce_mismatch", g.client())
	default:
		c := g.client()
		toks, err := s.cfg.Grants.IssueGrant(r.Context(), GrantRequest{
			Label: "oauth: " + c.Name, Access: g.Access, Audience: g.Resource, ClientHash: c.Hash(),
		})
		if err != nil {
			s.cfg.Logger.Error("oauth: issue a grant", "err", err)
			s.tokenError(w, http.StatusServiceUnavailable, "temporarily_unavailable", "the grant could not be issued", "issue_failed", c)
			return
		}
		replayed, err := s.state.CodeIssued(r.Context(), hash, toks.Grant)
		switch {
		case err != nil:
			// Unrecorded, a replay could not revoke it: it goes now.
			s.cfg.Logger.Error("oauth: record the grant of a code", "err", err)
			if err := s.cfg.Grants.RevokeGrant(r.Context(), toks.Grant, "issue_failed"); err != nil {
				s.cfg.Logger.Error("oauth: revoke an unrecorded grant", "client", toks.Grant, "err", err)
			}
			s.unavailable(w, "the grant could not be recorded", "issue_failed")
		case replayed:
			// Replayed while the grant was being issued: it goes at once.
			s.revokeReplayed(r, "", toks.Grant)
			s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the code is unknown, used or expired", credential.ReasonCodeReused, c)
		default:
			s.writeTokens(w, toks, now)
		}
	}
}

// unavailable answers a token request the server cannot serve now: 503
// temporarily_unavailable with Retry-After.
func (s *Server) unavailable(w http.ResponseWriter, description, reason string) {
	w.Header().Set("Retry-After", "1")
	s.tokenError(w, http.StatusServiceUnavailable, "temporarily_unavailable", description, reason, nil)
}

// revokeReplayed revokes grant, issued from the code of hash presented
// again; "" (the code's exchange issued nothing) revokes nothing. A grant
// that could not be revoked now (its home node unreachable) is recorded
// in the code's entry again, so that the next replay tries again.
func (s *Server) revokeReplayed(r *http.Request, hash, grant string) {
	if grant == "" {
		return
	}
	// A grant gone already (revoked since, by the host or a refresh
	// token's reuse) is what was wanted.
	err := s.cfg.Grants.RevokeGrant(r.Context(), grant, credential.ReasonCodeReused)
	if err == nil || errors.Is(err, fault.ErrUnknownClient) {
		return
	}
	s.cfg.Logger.Warn("oauth: revoke the grant of a replayed code", "client", grant, "err", err)
	if hash != "" {
		if _, err := s.state.CodeIssued(context.WithoutCancel(r.Context()), hash, grant); err != nil {
			s.cfg.Logger.Error("oauth: keep the grant of a replayed code", "client", grant, "err", err)
		}
	}
}

// refresh is the refresh_token grant: the same grant, a rotated refresh
// token.
func (s *Server) refresh(w http.ResponseWriter, r *http.Request, f url.Values, clientID string) {
	rt := f.Get("refresh_token")
	if rt == "" || clientID == "" {
		s.tokenError(w, http.StatusBadRequest, "invalid_request", "refresh_token and client_id are required", "no_refresh_token", nil)
		return
	}
	if f.Get("resource") != "" && f.Get("resource") != s.cfg.Resource {
		s.tokenError(w, http.StatusBadRequest, "invalid_target", "resource must be "+s.cfg.Resource, "resource_mismatch", nil)
		return
	}
	c := &Client{ID: clientID}
	toks, err := s.cfg.Grants.RefreshGrant(r.Context(), rt, c.Hash())
	switch {
	case errors.Is(err, fault.ErrRefreshReused):
		// The grant actor revoked the grant and recorded why.
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the refresh token was already used: the grant is revoked", "", nil)
	case errors.Is(err, fault.ErrInvalidGrant):
		s.tokenError(w, http.StatusBadRequest, "invalid_grant", "the refresh token is unknown, expired or not this client's", "refresh_invalid", nil)
	case err != nil:
		s.cfg.Logger.Error("oauth: refresh a grant", "err", err)
		s.unavailable(w, "the grant could not be refreshed", "refresh_failed")
	default:
		s.writeTokens(w, toks, s.cfg.Now())
	}
}

func (s *Server) writeTokens(w http.ResponseWriter, t Tokens, now time.Time) {
	a := tokenAnswer{AccessToken: t.AccessToken, TokenType: "Bearer", RefreshToken: t.RefreshToken, Scope: Scope}
	switch {
	case !t.Expires.IsZero():
		a.ExpiresIn = max(int64(t.Expires.Sub(now)/time.Second), 1)
	case s.cfg.AccessTokenTTL > 0:
		a.ExpiresIn = int64(s.cfg.AccessTokenTTL / time.Second)
	}
	writeJSON(w, http.StatusOK, a)
}

// tokenError answers a refused token request (RFC 6749 §5.2) and records
// it, unless reason is "" (recorded elsewhere).
func (s *Server) tokenError(w http.ResponseWriter, status int, code, description, reason string, c *Client) {
	if reason != "" {
		s.refused(kindAuthFailed, reason, c)
	}
	writeJSONError(w, status, code, description)
}

// s256Matches reports whether BASE64URL(SHA256(verifier)) is challenge
// (RFC 7636 §4.6), compared in constant time.
func s256Matches(verifier, challenge string) bool {
	sum := sha256.Sum256([]byte(verifier))
	got := base64.RawURLEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(got), []byte(challenge)) == 1
}

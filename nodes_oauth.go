package mcpruntime

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/internal/oauth"
)

// OAuth sign-in on several nodes (SPEC §5d.9). The authorization
// server's state — pairing codes, authorization codes, wrong-code budgets,
// confirmed redirect URIs — is the cluster's (oauthStateNode, in etcd), so
// any node serves any step of a sign-in. What stays a node's own goes to
// that node over the internal listener, with the cluster's secret:
//
//	POST /internal/oauth/consent   a consent form of a page this node shows (the page's id names its node)
//	POST /internal/oauth/refresh   a refresh token of a grant homed here: its actor rotates it
//	POST /internal/oauth/revoke    a grant homed here, revoked (a replayed authorization code's)
//
// Each is served once: what arrives over the internal listener is never
// sent on.
const (
	pathOAuthConsent = "/internal/oauth/consent"
	pathOAuthRefresh = "/internal/oauth/refresh"
	pathOAuthRevoke  = "/internal/oauth/revoke"
	// headerClientAddr carries, from the node a consent form reached to
	// the page's node, the client's address as the first node saw it:
	// set by that node, never taken from the client (its wrong-code
	// budgets are per source).
	headerClientAddr = "Mcpruntime-Client-Addr"
)

// oauthStateNode is a membership that keeps the authorization server's
// state where every node reaches it: package cluster's, in etcd.
type oauthStateNode interface {
	OAuthState(oauth.Limits) oauth.State
}

// checkClusterOAuth refuses, before joining, an OAuth configuration that
// several nodes cannot serve: a secret each node would generate for
// itself (a client id or a consent form MACed on one node must verify on
// every other), and the resource-server mode, whose subjects' grants and
// revocations are still one node's.
func checkClusterOAuth(c OAuthConfig) error {
	switch {
	case c.PublicOrigin == "":
		return nil
	case c.Issuer != "":
		return fmt.Errorf("cluster: OAuthConfig.Issuer (resource-server mode) is not available on several nodes yet (SPEC §5d.10): %w", ErrInvalidArgument)
	case len(c.Secret) == 0:
		return fmt.Errorf("cluster: OAuth sign-in on several nodes needs OAuthConfig.Secret, the same on every node (SPEC §5d.9): %w", ErrInvalidArgument)
	}
	return nil
}

// clusterOAuth fills in the authorization server's configuration of a
// node of several: the cluster's state, this node's id in its consent
// pages, forwarding to the other nodes' pages, and the fence.
func (r *Runtime) clusterOAuth(cfg *oauth.Config) error {
	if r.cluster == nil {
		return nil
	}
	sn, ok := r.cluster.Node.(oauthStateNode)
	if !ok {
		return fmt.Errorf("cluster: this membership keeps no OAuth state: %w", ErrInvalidArgument)
	}
	cfg.State, cfg.Node, cfg.Forward, cfg.Available = sn.OAuthState, r.node(), r.forwardConsent, r.serving
	return nil
}

// nodeClient makes the OAuth requests between nodes: no proxy, no
// redirect followed (a consent form's 303 goes back to the browser as
// it is), and with the internal listener's mutual TLS when it has one
// (tlsConfig: the node's certificate, the cluster's CA; nil: plain HTTP).
func newNodeClient(tlsConfig *tls.Config) *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			TLSClientConfig:     tlsConfig,
			Proxy:               nil,
			DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 8,
			IdleConnTimeout:     90 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// nodeRequest is a request to node's internal listener at path, with the
// cluster's secret; an error when node is no member.
func (r *Runtime) nodeRequest(ctx context.Context, node, path string, body io.Reader) (*http.Request, error) {
	m, ok := r.cluster.Member(node)
	if !ok || m.URL == "" {
		return nil, fmt.Errorf("node %s is not a member: %w", node, ErrUnavailable)
	}
	u, err := url.JoinPath(m.URL, path)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, body)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", node, err)
	}
	req.Header.Set(membership.NodeAuthHeader, r.cluster.Secret())
	return req, nil
}

// hopHeaders are not sent on with a forwarded consent form (RFC 9110
// §7.6.1).
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// maxConsentAnswer bounds the answer of a forwarded consent form (a page
// of a few KiB).
const maxConsentAnswer = 1 << 20

// forwardConsent is the authorization server's Forward: the consent form
// in, its headers as sent, its Host, the body as read, goes to node's
// internal listener with the client's address, and the answer comes back
// as it is. An error means nothing was written.
func (r *Runtime) forwardConsent(w http.ResponseWriter, in *http.Request, node string) error {
	ctx, cancel := context.WithTimeout(in.Context(), r.budget(opFanout, ""))
	defer cancel()
	out, err := r.nodeRequest(ctx, node, pathOAuthConsent, in.Body)
	if err != nil {
		return err
	}
	secret := out.Header.Get(membership.NodeAuthHeader)
	out.Header = in.Header.Clone()
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	out.Header.Set(membership.NodeAuthHeader, secret)
	out.Header.Set(headerClientAddr, in.RemoteAddr)
	out.Host, out.ContentLength = in.Host, in.ContentLength
	resp, err := r.cluster.http.Do(out)
	if err != nil {
		r.cfg.Logger.Warn("oauth: forward a consent form", "node", node, "err", errors.Unwrap(err))
		return fmt.Errorf("forward a consent form to %s: %w", node, ErrUnavailable)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden && resp.Header.Get("Content-Type") == "" {
		// The internal listener refused the secret: a misconfigured node.
		r.cfg.Logger.Error("oauth: node refused a forwarded consent form", "node", node)
		return fmt.Errorf("forward a consent form to %s: refused: %w", node, ErrUnavailable)
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, io.LimitReader(resp.Body, maxConsentAnswer))
	return nil
}

// serveOAuthInternal serves the OAuth routes of the internal listener
// (behind NodeAuth).
func (r *Runtime) serveOAuthInternal(w http.ResponseWriter, req *http.Request) {
	if r.oauth == nil {
		http.NotFound(w, req)
		return
	}
	switch req.URL.Path {
	case pathOAuthConsent:
		addr := req.Header.Get(headerClientAddr)
		req.Header.Del(headerClientAddr)
		req.Header.Del(membership.NodeAuthHeader)
		req.RemoteAddr = addr
		r.oauth.ServeForwardedConsent(w, req)
	case pathOAuthRefresh:
		r.serveRefreshCall(w, req)
	case pathOAuthRevoke:
		r.serveRevokeCall(w, req)
	default:
		http.NotFound(w, req)
	}
}

// refreshCall asks a grant's home to redeem a refresh token.
type refreshCall struct {
	RefreshToken string `json:"refreshToken"`
	ClientHash   string `json:"clientHash"`
}

// revokeCall asks a grant's home to revoke it.
type revokeCall struct {
	Grant  string `json:"grant"`
	Reason string `json:"reason"`
}

// nodeAnswer is the home's answer to either call: the tokens of a
// refresh, or a refusal, one of the words below.
type nodeAnswer struct {
	Tokens *oauth.Tokens `json:"tokens,omitempty"`
	Error  string        `json:"error,omitempty"`
}

// Refusals of the node-to-node calls, as words.
const (
	answerReused      = "refresh_reused" // fault.ErrRefreshReused: the grant is revoked
	answerInvalid     = "invalid_grant"  // fault.ErrInvalidGrant
	answerUnknown     = "unknown_client" // fault.ErrUnknownClient
	answerUnavailable = "unavailable"    // anything else: try again
)

func answerOf(err error) (int, string) {
	switch {
	case errors.Is(err, fault.ErrRefreshReused):
		return http.StatusConflict, answerReused
	case errors.Is(err, fault.ErrInvalidGrant):
		return http.StatusBadRequest, answerInvalid
	case errors.Is(err, fault.ErrUnknownClient):
		return http.StatusNotFound, answerUnknown
	}
	return http.StatusServiceUnavailable, answerUnavailable
}

func errorOf(word string) error {
	switch word {
	case answerReused:
		return fault.ErrRefreshReused
	case answerInvalid:
		return fault.ErrInvalidGrant
	case answerUnknown:
		return fault.ErrUnknownClient
	}
	return ErrUnavailable
}

// maxCallBytes bounds a node-to-node call's body and answer.
const maxCallBytes = 16 << 10

func writeNodeAnswer(w http.ResponseWriter, status int, a nodeAnswer) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(a)
}

func (r *Runtime) serveRefreshCall(w http.ResponseWriter, req *http.Request) {
	var c refreshCall
	if err := json.NewDecoder(io.LimitReader(req.Body, maxCallBytes)).Decode(&c); err != nil {
		writeNodeAnswer(w, http.StatusBadRequest, nodeAnswer{Error: answerInvalid})
		return
	}
	toks, err := r.refreshGrant(req.Context(), c.RefreshToken, c.ClientHash, true)
	if err != nil {
		status, word := answerOf(err)
		writeNodeAnswer(w, status, nodeAnswer{Error: word})
		return
	}
	writeNodeAnswer(w, http.StatusOK, nodeAnswer{Tokens: &toks})
}

func (r *Runtime) serveRevokeCall(w http.ResponseWriter, req *http.Request) {
	var c revokeCall
	if err := json.NewDecoder(io.LimitReader(req.Body, maxCallBytes)).Decode(&c); err != nil || c.Grant == "" {
		writeNodeAnswer(w, http.StatusBadRequest, nodeAnswer{Error: answerInvalid})
		return
	}
	if err := r.revokeGrant(req.Context(), c.Grant, c.Reason, true); err != nil {
		status, word := answerOf(err)
		writeNodeAnswer(w, status, nodeAnswer{Error: word})
		return
	}
	writeNodeAnswer(w, http.StatusOK, nodeAnswer{})
}

// callHome sends call to node's path and decodes its answer: the error of
// a refusal, ErrUnavailable when the node cannot be reached or answers
// nothing that can be read. Sent once, never again: a refresh is not
// idempotent (sent twice, its second redemption would be a reuse, and
// revoke the grant).
func (r *Runtime) callHome(ctx context.Context, node, path string, call any) (*oauth.Tokens, error) {
	ctx, cancel := context.WithTimeout(ctx, r.budget(opFanout, ""))
	defer cancel()
	body, err := json.Marshal(call)
	if err != nil {
		return nil, err
	}
	req, err := r.nodeRequest(ctx, node, path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.cluster.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s on node %s: %w", path, node, ErrUnavailable)
	}
	defer resp.Body.Close()
	var a nodeAnswer
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCallBytes)).Decode(&a); err != nil {
		return nil, fmt.Errorf("%s on node %s: %s: %w", path, node, resp.Status, ErrUnavailable)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s on node %s: %w", path, node, errorOf(a.Error))
	}
	return a.Tokens, nil
}

// adoptionWait bounds how long a replayed code's revoke waits for a
// survivor to adopt a grant whose home is gone.
func (r *Runtime) adoptionWait() time.Duration { return r.budget(opFanout, "") }

// revokeGrant revokes grant id wherever it lives: here, or at its home
// (once: a call that came from another node is not sent on). On several
// nodes, a grant whose home is gone or being adopted is waited for, up to
// adoptionWait, so that a replayed code's grant goes even while its home
// is replaced.
func (r *Runtime) revokeGrant(ctx context.Context, id, reason string, forwarded bool) error {
	if r.cluster != nil && !forwarded {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.adoptionWait())
		defer cancel()
	}
	for {
		err := r.revokeClient(ctx, id, reason)
		if nh, ok := errors.AsType[*NotHomeError](err); ok {
			if forwarded {
				return fmt.Errorf("client %s lives on %s: %w", id, nh.Home, ErrUnavailable)
			}
			_, err = r.callHome(ctx, nh.Home, pathOAuthRevoke, revokeCall{Grant: id, Reason: reason})
		}
		if r.cluster == nil || forwarded || !errors.Is(err, ErrUnavailable) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

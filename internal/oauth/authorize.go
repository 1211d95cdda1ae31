package oauth

import (
	"bytes"
	"container/list"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

// Bounds of an authorization request.
const (
	maxStateLen     = 1024
	minChallengeLen = 43 // a base64url SHA-256
	maxChallengeLen = 128
	maxFormBytes    = 16 << 10
)

// authRequest is an authorization request whose consent page was shown,
// waiting for its pairing code.
type authRequest struct {
	client    *Client
	redirect  string // as presented (a loopback one with its port)
	state     string
	challenge string
	resource  string
	expires   time.Time
	failures  int // wrong pairing codes so far

	// Its place in the pending table, under the table's lock.
	id     string
	seq    uint64           // order of arrival: every request lives RequestTTL, so the oldest expires first
	groups [2]string        // its client's group and (from a known source) its source's, "" for none
	elems  [2]*list.Element // its element in each group's list
}

// pendingRequests are the consent pages outstanding, by request id,
// shared fairly (SPEC §5c.16): each client (each client from each source,
// where the source is known) and each source address other than loopback
// has a share; a group at its share gives way, its own oldest first, and
// a full table evicts the oldest request of the group holding the most.
// So one registration or one source flooding the endpoint pushes out only
// its own pages, never another's.
type pendingRequests struct {
	max, perClient, perSource int
	node                      string     // "<node>." of several nodes, the prefix of every id; "" on one
	mu                        sync.Mutex // guards the fields below
	byID                      map[string]*authRequest
	groups                    map[string]*list.List // group → its requests, oldest first
	seq                       uint64
}

func newPendingRequests(node string, max, perClient, perSource int) *pendingRequests {
	if node != "" {
		node += "."
	}
	return &pendingRequests{node: node, max: max, perClient: perClient, perSource: perSource, byID: map[string]*authRequest{}, groups: map[string]*list.List{}}
}

// pageNode is the node whose table holds the consent page of request id:
// what precedes its last '.' (a node id may hold dots, base64url does
// not); "" for an id of one node.
func pageNode(id string) string {
	i := strings.LastIndexByte(id, '.')
	if i < 0 {
		return ""
	}
	return id[:i]
}

// add stores a request made from source (sourceKey's) and returns its id,
// making room by the rules above.
func (p *pendingRequests) add(req *authRequest, source string, now time.Time) string {
	req.groups = [2]string{"c\x00" + req.client.Hash() + "\x00" + source, ""}
	if source != "" {
		req.groups[1] = "s\x00" + source
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, share := range [2]int{p.perClient, p.perSource} {
		if l := p.groups[req.groups[i]]; l != nil && l.Len() >= share {
			p.removeLocked(l.Front().Value.(*authRequest))
		}
	}
	if len(p.byID) >= p.max {
		for _, q := range p.byID {
			if !now.Before(q.expires) {
				p.removeLocked(q)
			}
		}
	}
	if len(p.byID) >= p.max {
		p.removeLocked(p.largestOldestLocked())
	}
	p.seq++
	req.id, req.seq = p.node+randomText(16), p.seq
	p.byID[req.id] = req
	for i, g := range req.groups {
		if g == "" {
			continue
		}
		l := p.groups[g]
		if l == nil {
			l = list.New()
			p.groups[g] = l
		}
		req.elems[i] = l.PushBack(req)
	}
	return req.id
}

// largestOldestLocked is the oldest request of the group holding the most
// (of those, the group whose oldest is oldest). The table is not empty.
func (p *pendingRequests) largestOldestLocked() *authRequest {
	var pick *authRequest
	n := 0
	for _, l := range p.groups {
		q := l.Front().Value.(*authRequest)
		if l.Len() > n || l.Len() == n && q.seq < pick.seq {
			pick, n = q, l.Len()
		}
	}
	return pick
}

// removeLocked takes req out of the table and its groups.
func (p *pendingRequests) removeLocked(req *authRequest) {
	delete(p.byID, req.id)
	for i, g := range req.groups {
		if req.elems[i] == nil {
			continue
		}
		l := p.groups[g]
		l.Remove(req.elems[i])
		req.elems[i] = nil
		if l.Len() == 0 {
			delete(p.groups, g)
		}
	}
}

// get returns the request id names, while it lasts, and keeps it.
func (p *pendingRequests) get(id string, now time.Time) *authRequest {
	p.mu.Lock()
	defer p.mu.Unlock()
	req := p.byID[id]
	if req == nil {
		return nil
	}
	if !now.Before(req.expires) {
		p.removeLocked(req)
		return nil
	}
	return req
}

// drop removes request id; it reports whether it was there (of two
// submissions of one page, one wins).
func (p *pendingRequests) drop(id string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	req := p.byID[id]
	if req != nil {
		p.removeLocked(req)
	}
	return req != nil
}

// failed counts a wrong pairing code against request id and reports
// whether it may try again.
func (p *pendingRequests) failed(id string, limit int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	req := p.byID[id]
	if req == nil {
		return false
	}
	req.failures++
	if req.failures >= limit {
		p.removeLocked(req)
		return false
	}
	return true
}

// count is the number of requests held (expired ones included), for
// testing.
func (p *pendingRequests) count() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.byID)
}

// randomText is n random bytes in base64url.
func randomText(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// authorize is GET /oauth/authorize: it checks the request and shows the
// consent page. A request whose client or redirect URI cannot be trusted
// gets an error page, never a redirect (RFC 6749 §4.1.2.1); any other
// refusal is a redirect with error, state and iss if a completed sign-in
// confirmed that redirect URI for this client, and the error page (with
// the error code) otherwise: a self-registered URI no user approved is no
// open redirector (RFC 9700 §4.11.2).
func (s *Server) authorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for _, name := range []string{"client_id", "redirect_uri", "response_type", "state", "code_challenge", "code_challenge_method", "resource", "scope"} {
		if len(q[name]) > 1 {
			s.errorPage(w, http.StatusBadRequest, "The request repeats "+name+".", "duplicate_parameter", nil)
			return
		}
	}
	c, err := s.client(r, q.Get("client_id"))
	if err != nil {
		s.errorPage(w, http.StatusBadRequest, "This client is not known to this server.", "unknown_client", nil)
		return
	}
	redirect := q.Get("redirect_uri")
	if redirect == "" && len(c.RedirectURIs) == 1 {
		redirect = c.RedirectURIs[0]
	}
	if !c.matchRedirect(redirect) {
		s.errorPage(w, http.StatusBadRequest, "The redirect URI is not one this client registered.", "redirect_uri_mismatch", c)
		return
	}
	back := func(code, description, reason string) {
		if !s.confirmed(r.Context(), c.ID, redirect) {
			s.refusalPage(w, http.StatusBadRequest, code, "The application's sign-in request was refused: "+description+".", reason, c)
			return
		}
		s.refused(kindAuthFailed, reason, c)
		redirectError(w, r, redirect, code, description, q.Get("state"), s.cfg.Issuer)
	}
	switch {
	case q.Get("response_type") != "code":
		back("unsupported_response_type", "response_type must be code", "unsupported_response_type")
	case q.Get("code_challenge_method") != "S256":
		back("invalid_request", "PKCE with code_challenge_method S256 is required", "pkce_method")
	case !pkceText(q.Get("code_challenge"), minChallengeLen, maxChallengeLen):
		back("invalid_request", "code_challenge must be 43 to 128 characters of base64url", "pkce_challenge")
	case len(q.Get("state")) > maxStateLen:
		back("invalid_request", "state is too long", "state_too_long")
	case q.Get("resource") != "" && q.Get("resource") != s.cfg.Resource:
		back("invalid_target", "resource must be "+s.cfg.Resource, "resource_mismatch")
	default:
		req := &authRequest{
			client: c, redirect: redirect, state: q.Get("state"), challenge: q.Get("code_challenge"),
			resource: s.cfg.Resource, expires: s.cfg.Now().Add(s.cfg.RequestTTL),
		}
		id := s.pending.add(req, sourceKey(r.RemoteAddr), s.cfg.Now())
		s.consentPage(w, http.StatusOK, id, req, "")
	}
}

// consent is POST /oauth/authorize, the consent form: the request id, its
// CSRF token, and the pairing code (or a denial). A form of a page another
// node shows goes to that node whole (Config.Forward).
func (s *Server) consent(w http.ResponseWriter, r *http.Request) {
	if origin := r.Header.Get("Origin"); origin != "" && origin != s.cfg.Issuer {
		s.errorPage(w, http.StatusForbidden, "This form was not sent from this server's page.", "csrf_origin", nil)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFormBytes))
	var form url.Values
	if err == nil {
		form, err = url.ParseQuery(string(body))
	}
	if err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		s.errorPage(w, http.StatusBadRequest, "The form could not be read.", "bad_form", nil)
		return
	}
	r.PostForm = form
	id := form.Get("request")
	if !s.macEqual("csrf", id, form.Get("csrf")) || id == "" {
		s.errorPage(w, http.StatusForbidden, "This form has no valid CSRF token; reload the sign-in page from the client.", "csrf", nil)
		return
	}
	if node := pageNode(id); node != s.cfg.Node {
		// Another node's page (its id is under the MAC: no client names a
		// node of its choosing). Forwarded once: a form that came from
		// another node is never sent on.
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		if r.Context().Value(forwardedKey{}) != nil || s.cfg.Forward == nil || s.cfg.Forward(w, r, node) != nil {
			s.errorPage(w, http.StatusBadRequest, "This sign-in page has expired or was already answered; start again from the client.", "request_expired", nil)
		}
		return
	}
	now := s.cfg.Now()
	req := s.pending.get(id, now)
	if req == nil {
		s.errorPage(w, http.StatusBadRequest, "This sign-in page has expired or was already answered; start again from the client.", "request_expired", nil)
		return
	}
	ctx := r.Context()
	if r.PostForm.Get("action") == "deny" {
		switch {
		case !s.pending.drop(id):
			s.errorPage(w, http.StatusBadRequest, "This sign-in page was already answered.", "request_expired", req.client)
		case !s.confirmed(ctx, req.client.ID, req.redirect):
			s.refusalPage(w, http.StatusForbidden, "access_denied", "You denied this sign-in.", "access_denied", req.client)
		default:
			s.refused(kindAuthFailed, "access_denied", req.client)
			redirectError(w, r, req.redirect, "access_denied", "the user denied access", req.state, s.cfg.Issuer)
		}
		return
	}
	unavailable := func(what string, err error) {
		s.cfg.Logger.Error("oauth: "+what, "err", err)
		s.errorPage(w, http.StatusServiceUnavailable, "The sign-in cannot be checked right now; try again in a moment.", "unavailable", req.client)
	}
	clientHash, source := req.client.Hash(), sourceKey(r.RemoteAddr)
	open, err := s.state.BudgetOpen(ctx, clientHash, source, now)
	if err != nil {
		unavailable("read the wrong-code budgets", err)
		return
	}
	if !open {
		s.refused(kindPairingFailed, "rate_limited", req.client)
		s.consentPage(w, http.StatusTooManyRequests, id, req, "Too many wrong pairing codes were tried; wait a minute and try again.")
		return
	}
	room, err := s.state.CodeRoom(ctx, now)
	if err != nil {
		unavailable("make room for a code", err)
		return
	}
	if !room {
		s.errorPage(w, http.StatusServiceUnavailable, "Too many sign-ins are finishing at once; try again in a minute.", "too_many_codes", req.client)
		return
	}
	access, ok := "", false
	if hash, valid := PairingHash(r.PostForm.Get("pairing_code")); valid {
		if access, ok, err = s.state.TakePairing(ctx, hash, now); err != nil {
			unavailable("take a pairing code", err)
			return
		}
	}
	if !ok {
		if err := s.state.BudgetFail(ctx, clientHash, source, now); err != nil {
			s.cfg.Logger.Error("oauth: spend the wrong-code budgets", "err", err)
		}
		s.refused(kindPairingFailed, "wrong_code", req.client)
		if !s.pending.failed(id, s.cfg.AttemptsPerRequest) {
			s.errorPage(w, http.StatusForbidden, "Too many wrong pairing codes for this sign-in; start again from the client.", "too_many_attempts", req.client)
			return
		}
		s.consentPage(w, http.StatusForbidden, id, req, "That pairing code was not accepted. Ask the host for a new one.")
		return
	}
	if !s.pending.drop(id) {
		// The other submission of this page won; this code is spent all
		// the same (it was typed into a page that is gone).
		s.errorPage(w, http.StatusBadRequest, "This sign-in page was already answered.", "request_expired", req.client)
		return
	}
	if err := s.state.Confirm(ctx, req.client.ID, req.redirect); err != nil {
		s.cfg.Logger.Warn("oauth: confirm a redirect URI", "err", err)
	}
	code := randomText(32)
	err = s.state.AddCode(ctx, codeHash(code), Code{
		ClientID: req.client.ID, ClientName: req.client.Name, Redirect: req.redirect, Challenge: req.challenge,
		Resource: req.resource, Access: access, Expires: now.Add(s.cfg.CodeTTL),
	})
	if err != nil {
		unavailable("store an authorization code", err)
		return
	}
	v := url.Values{"code": {code}, "iss": {s.cfg.Issuer}}
	if req.state != "" {
		v.Set("state", req.state)
	}
	http.Redirect(w, r, withQuery(req.redirect, v), http.StatusSeeOther)
}

// confirmed reports whether redirect is confirmed for clientID; one that
// cannot be read is not (the page, never a redirect).
func (s *Server) confirmed(ctx context.Context, clientID, redirect string) bool {
	ok, err := s.state.Confirmed(ctx, clientID, redirect)
	if err != nil {
		s.cfg.Logger.Warn("oauth: read a confirmed redirect URI", "err", err)
	}
	return ok && err == nil
}

// redirectError sends the client's user agent back with an error (RFC 6749
// §4.1.2.1, RFC 9207's iss).
func redirectError(w http.ResponseWriter, r *http.Request, redirect, code, description, state, iss string) {
	v := url.Values{"error": {code}, "error_description": {description}, "iss": {iss}}
	if state != "" {
		v.Set("state", state)
	}
	http.Redirect(w, r, withQuery(redirect, v), http.StatusSeeOther)
}

// withQuery adds v to the query of redirect, keeping what it had.
func withQuery(redirect string, v url.Values) string {
	sep := "?"
	if strings.Contains(redirect, "?") {
		sep = "&"
	}
	return redirect + sep + v.Encode()
}

// pkceText reports whether s is n characters of the PKCE alphabet
// ([A-Za-z0-9-._~], RFC 7636 §4.1), lo ≤ n ≤ hi.
func pkceText(s string, lo, hi int) bool {
	if len(s) < lo || len(s) > hi {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_' || c == '~') {
			return false
		}
	}
	return true
}

// codes are one process's authorization codes outstanding and the spent
// ones remembered, by their hash, at most max in all.
type codes struct {
	max    int
	mu     sync.Mutex // guards byHash
	byHash map[string]*Code
}

func newCodes(max int) *codes { return &codes{max: max, byHash: map[string]*Code{}} }

func codeHash(code string) string {
	sum := sha256.Sum256([]byte("code\x00" + code))
	return hex.EncodeToString(sum[:])
}

// room reports whether another code may be added, dropping the entries
// past their time when full and, if still full, the spent code that
// expired first: remembering spent codes never refuses a sign-in.
func (c *codes) room(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.byHash) < c.max {
		return true
	}
	oldest := ""
	for h, g := range c.byHash {
		switch {
		case !now.Before(g.KeptUntil()):
			delete(c.byHash, h)
		case g.Spent && (oldest == "" || g.Expires.Before(c.byHash[oldest].Expires)):
			oldest = h
		}
	}
	if len(c.byHash) >= c.max && oldest != "" {
		delete(c.byHash, oldest)
	}
	return len(c.byHash) < c.max
}

// add stores the code of hash; room said there is room for it (two
// consents racing for the last slot may overshoot by one each: the bound
// is soft by the number of requests in flight).
func (c *codes) add(hash string, g *Code) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byHash[hash] = g
}

// spend is State.SpendCode: nil for no such code.
func (c *codes) spend(hash string) (g *Code, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byHash[hash]
	if e == nil {
		return nil, false
	}
	was, first := e.Spend()
	return &was, first
}

// issued is State.CodeIssued.
func (c *codes) issued(hash, grant string) (replayed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byHash[hash]
	if e == nil {
		return false
	}
	e.Grant = grant
	return e.Replayed
}

package oauth

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

var discard = slog.New(slog.DiscardHandler)

// s256 is the PKCE challenge of verifier.
func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// clock is a test clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// fakeGrants stands in for the runtime's client grants: it records what
// it was asked and answers made-up tokens.
type fakeGrants struct {
	mu      sync.Mutex
	issued  []GrantRequest
	refresh map[string]string // refresh token → client hash
	spent   map[string]bool
	n       int
	revoked []revokedGrant
}

func (g *fakeGrants) IssueGrant(_ context.Context, req GrantRequest) (Tokens, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.issued = append(g.issued, req)
	return g.mintLocked(req.Access, req.ClientHash), nil
}

func (g *fakeGrants) mintLocked(access, clientHash string) Tokens {
	g.n++
	if g.refresh == nil {
		g.refresh, g.spent = map[string]string{}, map[string]bool{}
	}
	rt := fmt.Sprintf("refresh-%d", g.n)
	g.refresh[rt] = clientHash
	return Tokens{Grant: "cl_1", Access: access, AccessToken: fmt.Sprintf("access-%d", g.n), RefreshToken: rt, Expires: t0.Add(time.Hour)}
}

func (g *fakeGrants) RefreshGrant(_ context.Context, rt, clientHash string) (Tokens, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spent[rt] {
		return Tokens{}, fault.ErrRefreshReused
	}
	if h, ok := g.refresh[rt]; !ok || h != clientHash {
		return Tokens{}, fault.ErrInvalidGrant
	}
	g.spent[rt] = true
	return g.mintLocked("read-only", clientHash), nil
}

func (g *fakeGrants) requests() []GrantRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]GrantRequest(nil), g.issued...)
}

// env is an authorization server on a test HTTP server.
type env struct {
	t      *testing.T
	srv    *Server
	http   *httptest.Server
	clock  *clock
	grants *fakeGrants
	mu     sync.Mutex
	events []credential.Event
}

type envOpt func(*Config)

func newEnv(t *testing.T, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, clock: &clock{now: t0}, grants: &fakeGrants{}}
	e.http = httptest.NewUnstartedServer(nil)
	origin := "http://" + e.http.Listener.Addr().String()
	cfg := Config{
		Issuer: origin, Resource: origin + "/mcp", Secret: []byte(strings.Repeat("s", 32)),
		Grants: e.grants, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler),
		Events: func(ev credential.Event) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.events = append(e.events, ev)
		},
	}
	for _, o := range opts {
		o(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.srv = srv
	e.http.Config.Handler = srv
	e.http.Start()
	t.Cleanup(e.http.Close)
	return e
}

// reasons returns the reasons of the audit records of kind.
func (e *env) reasons(kind string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		if ev.Kind == kind {
			out = append(out, ev.Reason)
		}
	}
	return out
}

// noRedirects is a client that shows a redirect instead of following it.
var noRedirects = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

type answer struct {
	status int
	header http.Header
	body   string
}

func (a answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(a.body), &m); err != nil {
		t.Fatalf("answer %d %q is not JSON: %v", a.status, a.body, err)
	}
	return m
}

func (e *env) do(method, path, contentType, body string, hdr ...string) answer {
	e.t.Helper()
	req, err := http.NewRequest(method, e.http.URL+path, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := noRedirects.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
}

const redirectURI = "http://127.0.0.1/callback"

// register registers a client with redirect URIs and returns its id.
func (e *env) register(uris ...string) string {
	e.t.Helper()
	if len(uris) == 0 {
		uris = []string{redirectURI}
	}
	b, _ := json.Marshal(map[string]any{"client_name": "Test Client", "redirect_uris": uris})
	a := e.do(http.MethodPost, PathRegister, "application/json", string(b))
	if a.status != http.StatusCreated {
		e.t.Fatalf("register = %d %s", a.status, a.body)
	}
	return a.json(e.t)["client_id"].(string)
}

// pkce returns a verifier and its S256 challenge.
func pkce(seed string) (verifier, challenge string) {
	verifier = strings.Repeat(seed, 43/len(seed)+1)[:43]
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

// authParams are the authorization request's parameters, overridable.
func (e *env) authParams(clientID, challenge string) url.Values {
	return url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {"http://127.0.0.1:5555/callback"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "state": {"st-1"},
		"resource": {e.srv.Resource()}, "scope": {Scope},
	}
}

var (
	hiddenRe = regexp.MustCompile(`name="(request|csrf)" value="([^"]*)"`)
)

// consentForm is what a consent page's form carries.
type consentForm struct{ request, csrf string }

// openConsent GETs the authorization endpoint and returns the page's form.
func (e *env) openConsent(v url.Values) (consentForm, answer) {
	e.t.Helper()
	a := e.do(http.MethodGet, PathAuthorize+"?"+v.Encode(), "", "")
	var f consentForm
	for _, m := range hiddenRe.FindAllStringSubmatch(a.body, -1) {
		if m[1] == "request" {
			f.request = m[2]
		} else {
			f.csrf = m[2]
		}
	}
	return f, a
}

// submit posts the consent form with a pairing code.
func (e *env) submit(f consentForm, code string, hdr ...string) answer {
	e.t.Helper()
	v := url.Values{"request": {f.request}, "csrf": {f.csrf}, "pairing_code": {code}, "action": {"approve"}}
	return e.do(http.MethodPost, PathAuthorize, "application/x-www-form-urlencoded", v.Encode(), hdr...)
}

// pair mints a pairing code.
func (e *env) pair(access string) string {
	e.t.Helper()
	pc, err := e.srv.NewPairingCode(context.Background(), access)
	if err != nil {
		e.t.Fatal(err)
	}
	return pc.Code
}

// approve runs the authorization request to its redirect and returns the
// redirect's query.
func (e *env) approve(v url.Values, access string) url.Values {
	e.t.Helper()
	f, a := e.openConsent(v)
	if a.status != http.StatusOK || f.request == "" {
		e.t.Fatalf("consent page = %d %s", a.status, a.body)
	}
	a = e.submit(f, e.pair(access))
	if a.status != http.StatusSeeOther {
		e.t.Fatalf("consent submit = %d %s", a.status, a.body)
	}
	u, err := url.Parse(a.header.Get("Location"))
	if err != nil {
		e.t.Fatal(err)
	}
	return u.Query()
}

// exchange posts the token request of a code.
func (e *env) exchange(clientID, code, verifier string, extra ...string) answer {
	e.t.Helper()
	v := url.Values{
		"grant_type": {"authorization_code"}, "code": {code}, "client_id": {clientID},
		"redirect_uri": {"http://127.0.0.1:5555/callback"}, "code_verifier": {verifier}, "resource": {e.srv.Resource()},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		v.Set(extra[i], extra[i+1])
	}
	return e.do(http.MethodPost, PathToken, "application/x-www-form-urlencoded", v.Encode())
}

func mustQuery(t *testing.T, location string) url.Values {
	t.Helper()
	u, err := url.Parse(location)
	if err != nil {
		t.Fatal(err)
	}
	return u.Query()
}

func jsonDecode(resp *http.Response, dst any) error { return json.NewDecoder(resp.Body).Decode(dst) }

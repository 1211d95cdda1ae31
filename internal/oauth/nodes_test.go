package oauth

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// errGone is a Forward's answer for a node that is gone.
var errGone = errors.New("node gone")

// TestConsentFormOfAnotherNode (SPEC §5d.9): with several nodes, a consent
// page's request id names its node, and a form posted to another node is
// sent to the page's (Config.Forward) and answered there, its pairing code
// and code in the shared State: the code is exchanged on the first node. A
// form that came from another node is never sent on, and one whose page's
// node is gone is an expired page's answer.
func TestConsentFormOfAnotherNode(t *testing.T) {
	var shared State
	var once sync.Once
	state := func(l Limits) State {
		once.Do(func() { shared = NewMemoryState(l) })
		return shared
	}
	var b *Server
	var mu sync.Mutex
	var asked []string // the nodes a's Forward was asked for
	e := newEnv(t, func(c *Config) {
		c.Node, c.State = "a", state
		c.Forward = func(w http.ResponseWriter, r *http.Request, node string) error {
			mu.Lock()
			asked = append(asked, node)
			mu.Unlock()
			if node != "b" {
				return errGone
			}
			b.ServeForwardedConsent(w, r)
			return nil
		}
	})
	b, err := New(Config{
		Issuer: e.srv.Issuer(), Resource: e.srv.Resource(), Secret: e.srv.cfg.Secret, Grants: e.grants,
		Now: e.clock.Now, Logger: discard, Node: "b", State: state,
		Forward: func(http.ResponseWriter, *http.Request, string) error {
			t.Error("b was asked to send a form on")
			return errGone
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	bHTTP := httptest.NewServer(b)
	defer bHTTP.Close()

	id := e.register()
	verifier, challenge := pkce("abc")
	resp, err := noRedirects.Get(bHTTP.URL + PathAuthorize + "?" + e.authParams(id, challenge).Encode())
	if err != nil {
		t.Fatal(err)
	}
	page := readAll(t, resp)
	var f consentForm
	for _, m := range hiddenRe.FindAllStringSubmatch(page, -1) {
		if m[1] == "request" {
			f.request = m[2]
		} else {
			f.csrf = m[2]
		}
	}
	if !strings.HasPrefix(f.request, "b.") {
		t.Fatalf("b's page has request id %q, want it to name b", f.request)
	}
	a := e.submit(f, e.pair(AccessReadOnly))
	if a.status != http.StatusSeeOther {
		t.Fatalf("b's form posted to a = %d %s, want 303 (answered by b)", a.status, a.body)
	}
	if mu.Lock(); len(asked) != 1 || asked[0] != "b" {
		t.Errorf("a's Forward asked for %v, want [b]", asked)
	}
	mu.Unlock()
	code := mustQuery(t, a.header.Get("Location")).Get("code")
	if x := e.exchange(id, code, verifier); x.status != http.StatusOK {
		t.Fatalf("the code of b's page exchanged on a = %d %s, want 200 (the state is shared)", x.status, x.body)
	}

	form := func(request string) url.Values {
		return url.Values{"request": {request}, "csrf": {e.srv.mac("csrf", request)}, "pairing_code": {"00000-00000"}, "action": {"approve"}}
	}
	// A form of c's page that came to b from another node: not sent on.
	r := httptest.NewRequest(http.MethodPost, "/internal/oauth/consent", strings.NewReader(form("c.xyz").Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	r.Host = "127.0.0.1" // as the client sent it to the first node
	w := httptest.NewRecorder()
	b.ServeForwardedConsent(w, r)
	if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "expired") {
		t.Errorf("a forwarded form of another node's page = %d %s, want 400, the expired page", w.Code, w.Body)
	}
	// A form of a page whose node is gone.
	a = e.do(http.MethodPost, PathAuthorize, "application/x-www-form-urlencoded", form("gone.xyz").Encode())
	if a.status != http.StatusBadRequest || !strings.Contains(a.body, "expired") {
		t.Errorf("the form of a gone node's page = %d %s, want 400, the expired page", a.status, a.body)
	}
}

// TestUnavailableNode (SPEC §5d.9): while Config.Available says the node
// does not serve, the authorization and token endpoints answer 503 with
// Retry-After before anything is spent; the metadata is served.
func TestUnavailableNode(t *testing.T) {
	serving := true
	var mu sync.Mutex
	e := newEnv(t, func(c *Config) {
		c.Available = func() bool {
			mu.Lock()
			defer mu.Unlock()
			return serving
		}
	})
	id := e.register()
	verifier, challenge := pkce("abc")
	f, _ := e.openConsent(e.authParams(id, challenge))
	pc := e.pair(AccessReadOnly)
	mu.Lock()
	serving = false
	mu.Unlock()
	for _, a := range []answer{
		e.do(http.MethodGet, PathAuthorize+"?"+e.authParams(id, challenge).Encode(), "", ""),
		e.submit(f, pc),
		e.exchange(id, "a-code", verifier),
	} {
		if a.status != http.StatusServiceUnavailable || a.header.Get("Retry-After") == "" {
			t.Errorf("while not serving: %d (Retry-After %q) %s, want 503 with Retry-After", a.status, a.header.Get("Retry-After"), a.body)
		}
	}
	if a := e.do(http.MethodGet, PathServerMetadata, "", ""); a.status != http.StatusOK {
		t.Errorf("metadata while not serving = %d, want 200", a.status)
	}
	mu.Lock()
	serving = true
	mu.Unlock()
	if a := e.submit(f, pc); a.status != http.StatusSeeOther {
		t.Errorf("the page and pairing code refused while not serving, afterwards = %d %s, want 303 (nothing spent)", a.status, a.body)
	}
}

func readAll(t *testing.T, resp *http.Response) string {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	if _, err := io.Copy(&b, resp.Body); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/internal/mcphttp/mcphttptest"
)

// oauthEnv is a runtime with its own authorization server, its MCP
// endpoint mounted at "/" (which serves the OAuth routes too) on a
// loopback port known before the runtime starts: the public origin.
type oauthEnv struct {
	*mcpEnv
	origin string
	mu     sync.Mutex
	events []mcpruntime.CredentialEvent
}

func newOAuthEnv(t *testing.T, cfg mcpruntime.Config) *oauthEnv {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &oauthEnv{origin: "http://" + ln.Addr().String()}
	cfg.OAuth.PublicOrigin = e.origin
	rt := newRuntime(t, cfg)
	unsubscribe := rt.SubscribeCredentialEvents(func(ev mcpruntime.CredentialEvent) {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.events = append(e.events, ev)
	})
	t.Cleanup(unsubscribe)
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(ep)
	ts.Listener.Close()
	ts.Listener = ln
	ts.Start()
	t.Cleanup(func() {
		ep.Close()
		ts.Close()
	})
	e.mcpEnv = &mcpEnv{Client: &ht.Client{T: t, TS: ts, URL: ts.URL + "/mcp"}, rt: rt, srv: ep}
	return e
}

// kinds returns the kind/reason of every credential event so far.
func (e *oauthEnv) kinds() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for _, ev := range e.events {
		out = append(out, ev.Kind+"/"+ev.Reason)
	}
	return out
}

var noFollow = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

var formField = regexp.MustCompile(`<input type="hidden" name="(request|csrf)" value="([^"]*)">`)

// approveInPage plays the user: it opens the consent page at authURL,
// types a pairing code of access into its form and submits it, and
// returns the redirect it answers (code, state, iss in its query).
func approveInPage(t *testing.T, rt *mcpruntime.Runtime, authURL, access string) *url.URL {
	t.Helper()
	resp, err := noFollow.Get(authURL)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("consent page = %d %s", resp.StatusCode, page)
	}
	form := url.Values{"action": {"approve"}}
	for _, m := range formField.FindAllStringSubmatch(string(page), -1) {
		form.Set(m[1], m[2])
	}
	pc, err := rt.NewPairingCode(context.Background(), access)
	noErr(t, err)
	form.Set("pairing_code", pc.Code)
	u, _ := url.Parse(authURL)
	u.RawQuery = ""
	resp, err = noFollow.PostForm(u.String(), form)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("consent submit = %d", resp.StatusCode)
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// postToken posts a token request and decodes its answer.
func postToken(t *testing.T, origin string, form url.Values) (int, map[string]any) {
	t.Helper()
	resp, err := http.PostForm(origin+"/oauth/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("token answer %d: %v", resp.StatusCode, err)
	}
	return resp.StatusCode, m
}

// signIn runs the whole flow by hand — registration, consent with a
// pairing code of access, code exchange — and returns the client id and
// the token answer.
func (e *oauthEnv) signIn(access string) (clientID string, tokens map[string]any) {
	t := e.T
	t.Helper()
	body := `{"client_name":"hand client","redirect_uris":["http://127.0.0.1/cb"]}`
	resp, err := http.Post(e.origin+"/oauth/register", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var reg map[string]any
	json.NewDecoder(resp.Body).Decode(&reg)
	resp.Body.Close()
	clientID, _ = reg["client_id"].(string)
	const verifier = "verifier-verifier-verifier-verifier-verifier"
	challenge := s256(verifier)
	q := url.Values{
		"response_type": {"code"}, "client_id": {clientID}, "redirect_uri": {"http://127.0.0.1:4242/cb"},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "state": {"s"}, "resource": {e.origin + "/mcp"},
	}
	loc := approveInPage(t, e.rt, e.origin+"/oauth/authorize?"+q.Encode(), access)
	status, tokens := postToken(t, e.origin, url.Values{
		"grant_type": {"authorization_code"}, "code": {loc.Query().Get("code")}, "client_id": {clientID},
		"redirect_uri": {"http://127.0.0.1:4242/cb"}, "code_verifier": {verifier}, "resource": {e.origin + "/mcp"},
	})
	if status != http.StatusOK {
		t.Fatalf("exchange = %d %v", status, tokens)
	}
	return clientID, tokens
}

// refresh redeems a refresh token.
func (e *oauthEnv) refresh(clientID, refreshToken string) (int, map[string]any) {
	e.T.Helper()
	return postToken(e.T, e.origin, url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refreshToken}, "client_id": {clientID}})
}

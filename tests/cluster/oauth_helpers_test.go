package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime"
)

// OAuth on several nodes (SPEC §5d.9): the nodes share one public origin
// (they stand behind one load balancer) and one OAuth secret; a client
// reaches each node's MCP listener directly.
const (
	oauthOrigin   = "http://mcp.example.test"
	oauthResource = oauthOrigin + "/mcp"
	oauthRedirect = "http://127.0.0.1:9/callback"
)

var oauthSecret = []byte("cluster-oauth-secret-0123456789abcdef")

// withOAuth is cfg with OAuth sign-in on, as every node of a test cluster
// has it.
func withOAuth(cfg mcpruntime.Config) mcpruntime.Config {
	cfg.OAuth = mcpruntime.OAuthConfig{PublicOrigin: oauthOrigin, Secret: oauthSecret}
	return cfg
}

// oauthHTTP follows no redirect: a consent form's 303 is the answer.
var oauthHTTP = &http.Client{
	Timeout:       20 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// baseOf is the origin of a node's MCP URL.
func baseOf(mcpURL string) string { return strings.TrimSuffix(mcpURL, "/mcp") }

// answer is an HTTP answer, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a answer) json() map[string]any {
	var m map[string]any
	json.Unmarshal(a.body, &m)
	return m
}

func (a answer) String() string { return fmt.Sprintf("%d %s", a.status, a.body) }

// send sends a request and reads its answer.
func send(method, u, contentType, body string) (answer, error) {
	return sendWith(method, u, map[string]string{"Content-Type": contentType}, body)
}

// sendWith is send with headers ("" values left out).
func sendWith(method, u string, headers map[string]string, body string) (answer, error) {
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		return answer{}, err
	}
	for k, v := range headers {
		if v != "" {
			req.Header.Set(k, v)
		}
	}
	resp, err := oauthHTTP.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, header: resp.Header, body: b}, err
}

// retryGate sends a step until the node it reached serves: a 503 that
// the authorization and token endpoints answer before anything is looked
// at or spent, while a node does not serve (a healthy node's fence may
// lapse for a moment under load), is sent again, for at most 10 s; any
// other answer is returned. TestOAuthUnavailableNode sends without it.
func retryGate(step func() (answer, error)) (answer, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		a, err := step()
		if err != nil || !gated(a) {
			return a, err
		}
		if time.Now().After(deadline) {
			return a, fmt.Errorf("the node did not serve within 10 s: %v", a)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// gated reports whether a is the answer of a node that does not serve.
func gated(a answer) bool {
	return a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") != "" &&
		(bytes.Contains(a.body, []byte("this node is not serving")) || bytes.Contains(a.body, []byte("not available right now")))
}

// registerClient registers an OAuth client through the node at base and
// returns its client id.
func registerClient(t tb, base, name string) string {
	t.Helper()
	a, err := send(http.MethodPost, base+"/oauth/register", "application/json",
		`{"client_name":"`+name+`","redirect_uris":["`+oauthRedirect+`"]}`)
	id, _ := a.json()["client_id"].(string)
	if err != nil || a.status != http.StatusCreated || id == "" {
		t.Fatalf("register through %s: %v, %v", base, a, err)
	}
	return id
}

// pkcePair is a PKCE verifier and its S256 challenge, derived from seed.
func pkcePair(seed string) (verifier, challenge string) {
	verifier = strings.Repeat(seed, 43/len(seed)+1)[:43]
	sum := sha256.Sum256([]byte(verifier))
	return verifier, base64.RawURLEncoding.EncodeToString(sum[:])
}

var consentField = regexp.MustCompile(`<input type="hidden" name="(request|csrf)" value="([^"]*)">`)

// consentPage is a consent page's form: its request id and CSRF token.
type consentPage struct{ request, csrf string }

// openConsent asks the node at base for the consent page of a sign-in of
// client with challenge.
func openConsent(t tb, base, client, challenge string) consentPage {
	t.Helper()
	p, a, err := getConsent(base, client, challenge)
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("consent page through %s: %v, %v", base, a, err)
	}
	return p
}

// getConsent is openConsent's request: the page's form when the answer is
// a 200 with one.
func getConsent(base, client, challenge string) (consentPage, answer, error) {
	q := url.Values{
		"response_type": {"code"}, "client_id": {client}, "redirect_uri": {oauthRedirect},
		"code_challenge": {challenge}, "code_challenge_method": {"S256"}, "state": {"st"}, "resource": {oauthResource},
	}
	a, err := retryGate(func() (answer, error) { return send(http.MethodGet, base+"/oauth/authorize?"+q.Encode(), "", "") })
	if err != nil || a.status != http.StatusOK {
		return consentPage{}, a, err
	}
	var p consentPage
	for _, m := range consentField.FindAllStringSubmatch(string(a.body), -1) {
		switch m[1] {
		case "request":
			p.request = m[2]
		case "csrf":
			p.csrf = m[2]
		}
	}
	if p.request == "" || p.csrf == "" {
		return p, a, fmt.Errorf("consent page through %s without its form: %s", base, a.body)
	}
	return p, a, nil
}

// submitConsent posts p's form with pairing code through the node at
// base.
func submitConsent(base string, p consentPage, code string) (answer, error) {
	form := url.Values{"request": {p.request}, "csrf": {p.csrf}, "pairing_code": {code}, "action": {"approve"}}
	return retryGate(func() (answer, error) {
		return send(http.MethodPost, base+"/oauth/authorize", "application/x-www-form-urlencoded", form.Encode())
	})
}

// codeOf is the authorization code of an approved consent's 303.
func codeOf(a answer) (string, error) {
	if a.status != http.StatusSeeOther {
		return "", fmt.Errorf("consent: %v, want 303", a)
	}
	u, err := url.Parse(a.header.Get("Location"))
	if err != nil || !strings.HasPrefix(u.String(), oauthRedirect) || u.Query().Get("code") == "" ||
		u.Query().Get("state") != "st" || u.Query().Get("iss") != oauthOrigin {
		return "", fmt.Errorf("consent: Location %q, want the redirect URI with code, state and iss", a.header.Get("Location"))
	}
	return u.Query().Get("code"), nil
}

// exchangeCode exchanges code through the node at base.
func exchangeCode(base, client, code, verifier string) (answer, error) {
	form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "client_id": {client},
		"redirect_uri": {oauthRedirect}, "code_verifier": {verifier}, "resource": {oauthResource}}
	return retryGate(func() (answer, error) {
		return send(http.MethodPost, base+"/oauth/token", "application/x-www-form-urlencoded", form.Encode())
	})
}

// redeemRefresh redeems a refresh token through the node at base.
func redeemRefresh(base, client, refresh string) (answer, error) {
	form := url.Values{"grant_type": {"refresh_token"}, "refresh_token": {refresh}, "client_id": {client}}
	return retryGate(func() (answer, error) {
		return send(http.MethodPost, base+"/oauth/token", "application/x-www-form-urlencoded", form.Encode())
	})
}

// oauthTokens are a token answer's tokens.
type oauthTokens struct{ access, refresh string }

// tokensOf reads a 200 token answer.
func tokensOf(a answer, err error) (oauthTokens, error) {
	if err != nil {
		return oauthTokens{}, err
	}
	m := a.json()
	at, _ := m["access_token"].(string)
	rt, _ := m["refresh_token"].(string)
	if a.status != http.StatusOK || at == "" || rt == "" || a.header.Get("Cache-Control") != "no-store" {
		return oauthTokens{}, fmt.Errorf("token answer %v, want 200 with both tokens, no-store", a)
	}
	return oauthTokens{access: at, refresh: rt}, nil
}

// isInvalidGrant reports whether a is RFC 6749's invalid_grant (400).
func isInvalidGrant(a answer) bool {
	return a.status == http.StatusBadRequest && a.json()["error"] == "invalid_grant"
}

// pairingCode mints a pairing code of access on rt.
func pairingCode(t tb, rt *mcpruntime.Runtime, access string) string {
	t.Helper()
	pc, err := rt.NewPairingCode(context.Background(), access)
	if err != nil {
		t.Fatalf("NewPairingCode: %v", err)
	}
	return pc.Code
}

// signInAt signs client in: the consent page from pageAt, the form
// posted to consentAt with pairing code pc, the code exchanged at
// exchangeAt (each the origin of a node's MCP listener). It returns the
// tokens.
func signInAt(t tb, client string, pageAt, consentAt, exchangeAt string, pc, seed string) oauthTokens {
	t.Helper()
	verifier, challenge := pkcePair(seed)
	p := openConsent(t, pageAt, client, challenge)
	a, err := submitConsent(consentAt, p, pc)
	if err != nil {
		t.Fatalf("consent through %s: %v", consentAt, err)
	}
	code, err := codeOf(a)
	if err != nil {
		t.Fatalf("consent through %s (page of %s): %v", consentAt, pageAt, err)
	}
	toks, err := tokensOf(exchangeCode(exchangeAt, client, code, verifier))
	if err != nil {
		t.Fatalf("exchange through %s: %v", exchangeAt, err)
	}
	return toks
}

// listTools sends a 2026-07-28 tools/list with tok to an MCP endpoint and
// returns the HTTP status.
func listTools(mcpURL, tok string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, mcpURL, strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`))
	if err != nil {
		return 0, err
	}
	for k, v := range modernHeaders(tok, "tools/list", "") {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := oauthHTTP.Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

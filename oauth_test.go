package mcpruntime_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/modelcontextprotocol/go-sdk/oauthex"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

func s256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// challengeOf is the WWW-Authenticate of a client's 401 at e's endpoint.
func (e *oauthEnv) challengeOf(invalid bool) string {
	c := `resource_metadata="` + e.origin + `/.well-known/oauth-protected-resource/mcp", scope="mcp"`
	if invalid {
		return `Bearer error="invalid_token", ` + c
	}
	return "Bearer " + c
}

// SPEC §5c, end to end with the official go-sdk client's OAuth support
// (auth.AuthorizationCodeHandler): from nothing but the URL, a 401 leads
// it to the metadata; it registers, the "browser" step approves with a
// pairing code, it exchanges the code and calls tools. Then the grant's
// refresh keeps the same MCP session, and the host's revocation ends it.
func TestOAuthGoSDKClient(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	ctx := context.Background()
	var authURLs []string
	handler, err := auth.NewAuthorizationCodeHandler(&auth.AuthorizationCodeHandlerConfig{
		DynamicClientRegistrationConfig: &auth.DynamicClientRegistrationConfig{Metadata: &oauthex.ClientRegistrationMetadata{
			ClientName: "go-sdk test client", RedirectURIs: []string{"http://127.0.0.1/callback"},
			TokenEndpointAuthMethod: "none", GrantTypes: []string{"authorization_code", "refresh_token"},
		}},
		AuthorizationCodeFetcher: func(_ context.Context, args *auth.AuthorizationArgs) (*auth.AuthorizationResult, error) {
			authURLs = append(authURLs, args.URL)
			loc := approveInPage(t, e.rt, args.URL, "read-write")
			q := loc.Query()
			return &auth.AuthorizationResult{Code: q.Get("code"), State: q.Get("state"), Iss: q.Get("iss")}, nil
		},
	})
	noErr(t, err)
	client := mcp.NewClient(&mcp.Implementation{Name: "go-sdk-oauth", Version: "1"}, nil)
	// Pinned to 2025-11-25: the test is about the MCP session a refresh
	// keeps (unpinned, v1.8.0 speaks 2026-07-28, which has none).
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.URL, OAuthHandler: handler}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	defer cs.Close()
	if len(authURLs) != 1 || !strings.Contains(authURLs[0], "resource="+urlQueryEscape(e.origin+"/mcp")) || !strings.Contains(authURLs[0], "code_challenge_method=S256") {
		t.Errorf("authorization URLs %v, want one, with the resource and S256", authURLs)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil || !slices.ContainsFunc(tools.Tools, func(tl *mcp.Tool) bool { return tl.Name == "thread_list" }) {
		t.Fatalf("ListTools = %v, %v", tools, err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "runtime_capabilities", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("runtime_capabilities = %+v, %v", res, err)
	}
	caps := res.StructuredContent.(map[string]any)
	grant, _ := caps["clientId"].(string)
	if caps["namespaceKind"] != "client" || caps["access"] != "read-write" || grant == "" {
		t.Fatalf("runtime_capabilities = %v, want a read-write client", caps)
	}

	// Refresh: the same grant, the same MCP session.
	src, err := handler.TokenSource(ctx)
	noErr(t, err)
	tok, err := src.Token()
	noErr(t, err)
	status, next := e.refresh(clientIDOf(t, authURLs[0]), tok.RefreshToken)
	if status != http.StatusOK {
		t.Fatalf("refresh = %d %v", status, next)
	}
	newTok := next["access_token"].(string)
	if newTok == tok.AccessToken || next["refresh_token"] == tok.RefreshToken {
		t.Fatalf("refresh returned the old tokens")
	}
	if got := e.Post(newTok, cs.ID(), capabilitiesCall); got.Status != http.StatusOK || !strings.Contains(string(got.Body), grant) {
		t.Errorf("the go-sdk client's session with the refreshed token = %s, want the same grant's answer", got)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "thread_list", Arguments: map[string]any{}}); err != nil {
		t.Errorf("the session after the refresh: %v", err)
	}

	// The host revokes the grant: 401, leading back to the metadata.
	noErr(t, e.rt.RevokeClient(ctx, grant))
	ht.Want401(t, "the refreshed token after revocation", e.Post(newTok, cs.ID(), capabilitiesCall), e.challengeOf(true))
	waitSessionGone(t, e.rt, "revoked grant", cs.ID())
	want := []string{"issued/", "refreshed/", "rotated/", "revoked/admin"}
	if got := e.kinds(); !slices.Equal(got, want) {
		t.Errorf("credential events %v, want %v", got, want)
	}
}

func urlQueryEscape(s string) string {
	return strings.NewReplacer(":", "%3A", "/", "%2F").Replace(s)
}

// clientIDOf reads the client_id of an authorization URL.
func clientIDOf(t *testing.T, authURL string) string {
	t.Helper()
	i := strings.Index(authURL, "?")
	q, err := url.ParseQuery(authURL[i+1:])
	noErr(t, err)
	return q.Get("client_id")
}

// SPEC §5c: a refresh keeps the grant — a session and a stream opened
// with the first token go on with the next — and the admin revocation
// gives 401 and closes the stream.
func TestOAuthRefreshKeepsSessions(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	ctx := context.Background()
	clientID, toks := e.signIn("read-only")
	first := toks["access_token"].(string)
	if toks["expires_in"].(float64) != mcpruntime.DefaultClientTokenTTL.Seconds() || toks["scope"] != "mcp" || toks["token_type"] != "Bearer" {
		t.Errorf("token answer %v", toks)
	}
	sid := e.Initialize(first)
	st := e.Stream(first, sid)
	status, next := e.refresh(clientID, toks["refresh_token"].(string))
	if status != http.StatusOK {
		t.Fatalf("refresh = %d %v", status, next)
	}
	second := next["access_token"].(string)
	// The refresh kept the first token (checked when it returned, without
	// a wait): its stream has nothing to end it.
	assertLive(t, e.rt, "the first token once the refresh returned", first)
	e.WantPing("the refreshed token on the first token's session", second, sid)
	if !st.IsOpen() {
		t.Fatal("the first token's stream closed on refresh")
	}
	grant := e.rt.MCPSessions()[0].Owner[len("client:"):]
	noErr(t, e.rt.RevokeClient(ctx, grant))
	st.WantEnd(t, "revoked grant")
	ht.Want401(t, "after revocation", e.Post(second, sid, ht.PingBody), e.challengeOf(true))
}

// SPEC §5c refusal: a spent refresh token presented again revokes the
// grant: its access tokens get 401 and its streams close.
func TestOAuthRefreshReuse(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	clientID, toks := e.signIn("read-write")
	rt1 := toks["refresh_token"].(string)
	status, next := e.refresh(clientID, rt1)
	if status != http.StatusOK {
		t.Fatalf("refresh = %d %v", status, next)
	}
	tok := next["access_token"].(string)
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)
	status, again := e.refresh(clientID, rt1)
	if status != http.StatusBadRequest || again["error"] != "invalid_grant" {
		t.Fatalf("reused refresh = %d %v, want invalid_grant", status, again)
	}
	st.WantEnd(t, "reuse")
	ht.Want401(t, "the newest access token after reuse", e.Post(tok, sid, ht.PingBody), e.challengeOf(true))
	if status, m := e.refresh(clientID, next["refresh_token"].(string)); status != http.StatusBadRequest {
		t.Errorf("the newest refresh token after reuse = %d %v, want refused", status, m)
	}
	if got := e.kinds(); !slices.Contains(got, "revoked/refresh_reused") {
		t.Errorf("credential events %v, want revoked/refresh_reused", got)
	}
	if n := e.rt.Stats().Clients; n != 0 {
		t.Errorf("%d client grants left, want 0", n)
	}
}

// SPEC §5c: a token bound to this resource is refused by an endpoint of
// another resource exactly as an unknown token is (same status, headers,
// body), and the refusal is audited.
func TestOAuthAudienceRefused(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	_, toks := e.signIn("read-only")
	tok := toks["access_token"].(string)
	other := newMCPEnv(t, e.rt, mcpruntime.MCPOptions{Path: "/other"})
	other.URL = other.TS.URL + "/other"
	got := other.Post(tok, "", ht.InitBody(ht.LatestVersion))
	unknown := other.Post("mcprc_"+strings.Repeat("A", 43), "", ht.InitBody(ht.LatestVersion))
	ht.SameAsUnknown(t, "another audience", got, unknown)
	ht.Want401(t, "another audience", got, ht.InvalidToken)
	if kinds := e.kinds(); !slices.Contains(kinds, "audience_refused/audience_mismatch") {
		t.Errorf("credential events %v, want audience_refused", kinds)
	}
	e.Initialize(tok) // its own resource takes it
}

// SPEC §5c: a provider-shaped token is never offered OAuth discovery,
// whether live, revoked or made up; a request without a token or with a
// client token is.
func TestOAuthProviderNeverChallenged(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	registerInproc(t, e.rt, "A")
	createThreads(t, e.rt, "T")
	ps, tok := openMinted(t, e.rt, "T", "A")
	noErr(t, e.rt.ReleaseProviderSession(context.Background(), ps.ID))
	ht.Want401(t, "a released provider token", e.Post(tok, "", ht.InitBody(ht.LatestVersion)), ht.InvalidToken)
	ht.Want401(t, "a made-up provider token", e.Post("mcprt_nope", "", ht.PingBody), ht.InvalidToken)
	ht.Want401(t, "no token", e.Post("", "", ht.PingBody), e.challengeOf(false))
	ct, err := e.rt.IssueClient(context.Background(), "admin-issued", "read-only")
	noErr(t, err)
	noErr(t, e.rt.RevokeClient(context.Background(), ct.ClientID))
	ht.Want401(t, "a revoked admin-issued client token", e.Post(ct.Token, "", ht.PingBody), e.challengeOf(true))
}

// The pairing code's access level is the grant's: a read-only sign-in
// cannot post, a read-write one can.
func TestOAuthAccessFromPairingCode(t *testing.T) {
	e := newOAuthEnv(t, mcpruntime.Config{})
	createThreads(t, e.rt, "T")
	post := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"thread_post","arguments":{"threadId":"T","text":"hi"}}}`
	for _, test := range []struct{ access, want string }{{"read-only", `"isError":true`}, {"read-write", `"text":"hi"`}} {
		_, toks := e.signIn(test.access)
		tok := toks["access_token"].(string)
		sid := e.Initialize(tok)
		if got := e.Post(tok, sid, post); got.Status != http.StatusOK || !strings.Contains(string(got.Body), test.want) {
			t.Errorf("%s thread_post = %s, want %s", test.access, got, test.want)
		}
	}
}

func TestNewPairingCode(t *testing.T) {
	rt := newRuntime(t, mcpruntime.Config{})
	if _, err := rt.NewPairingCode(context.Background(), "read-only"); !errors.Is(err, mcpruntime.ErrOAuthDisabled) {
		t.Errorf("NewPairingCode without OAuth = %v, want ErrOAuthDisabled", err)
	}
	e := newOAuthEnv(t, mcpruntime.Config{})
	if _, err := e.rt.NewPairingCode(context.Background(), "admin"); !errors.Is(err, mcpruntime.ErrInvalidArgument) {
		t.Errorf("NewPairingCode(admin) = %v, want ErrInvalidArgument", err)
	}
	pc, err := e.rt.NewPairingCode(context.Background(), "read-write")
	if err != nil || len(pc.Code) != 11 || pc.Access != "read-write" || pc.ExpiresAt.IsZero() {
		t.Errorf("NewPairingCode = %+v, %v", pc, err)
	}
}

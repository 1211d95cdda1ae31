package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// fakeClock is a Config.Now that moves only when a test advances it: the
// one fake clock of the tests (actortest's).
type fakeClock = actortest.Clock

func newFakeClock() *fakeClock {
	return actortest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
}

// quietRuntime is newRuntime with the runtime's logs discarded.
func quietRuntime(t *testing.T, cfg mcpruntime.Config) *mcpruntime.Runtime {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return newRuntime(t, cfg)
}

// registerInproc registers in-process provider instances.
func registerInproc(t *testing.T, rt *mcpruntime.Runtime, ids ...string) {
	t.Helper()
	for _, id := range ids {
		noErr(t, rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{Driver: driver.InprocKind}))
	}
}

// registerMulti registers an in-process instance whose one session serves
// every thread.
func registerMulti(t *testing.T, rt *mcpruntime.Runtime, id string) {
	t.Helper()
	noErr(t, rt.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{
		Driver: driver.InprocKind, Config: json.RawMessage(`{"multiThread":true}`),
	}))
}

func createThreads(t *testing.T, rt *mcpruntime.Runtime, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{})
		noErr(t, err)
	}
}

// openMinted opens a provider session for (thread, instance), requires that
// it minted a credential, and returns the session and its raw token.
func openMinted(t *testing.T, rt *mcpruntime.Runtime, thread, instance string) (mcpruntime.ProviderSession, string) {
	t.Helper()
	ps, err := rt.OpenProviderSession(context.Background(), thread, instance)
	if err != nil {
		t.Fatalf("OpenProviderSession(%s, %s) = %v", thread, instance, err)
	}
	if ps.Reused || ps.Authorization == "" {
		t.Fatalf("OpenProviderSession(%s, %s) = %+v, want a minted credential", thread, instance, ps)
	}
	return ps, bearer(t, ps.Authorization)
}

// authReason returns "" when tok authenticates, else the AuthError reason.
func authReason(t *testing.T, rt *mcpruntime.Runtime, tok string) string {
	t.Helper()
	_, err := rt.Authenticate(tok)
	if err == nil {
		return ""
	}
	var ae *mcpruntime.AuthError
	if !errors.As(err, &ae) || !errors.Is(err, mcpruntime.ErrUnauthenticated) {
		t.Fatalf("Authenticate = %v (%T), want an *AuthError matching ErrUnauthenticated", err, err)
	}
	return ae.Reason
}

func assertReason(t *testing.T, rt *mcpruntime.Runtime, what, tok, want string) {
	t.Helper()
	if got := authReason(t, rt, tok); got != want {
		t.Fatalf("%s: Authenticate reason = %q, want %q", what, got, want)
	}
}

// waitUntil polls cond until it holds, for at most hangAfter: for asynchronous
// effects such as a driver reporting a session's death.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, hangAfter)
		}
		time.Sleep(time.Millisecond)
	}
}

func waitDead(t *testing.T, rt *mcpruntime.Runtime, what, tok string) {
	t.Helper()
	waitUntil(t, what+": token revoked", func() bool {
		_, err := rt.Authenticate(tok)
		return errors.Is(err, mcpruntime.ErrUnauthenticated)
	})
}

// liveCredentials returns the ids of the live credentials of (thread,
// instance) at the runtime's current time; instance "" means all instances.
func liveCredentials(t *testing.T, rt *mcpruntime.Runtime, now time.Time, thread, instance string) []string {
	t.Helper()
	var out []string
	for _, c := range rt.Credentials(thread) {
		live := c.State == memdb.StateLive && (c.Expires.IsZero() || now.Before(c.Expires))
		if live && (instance == "" || c.Instance == instance) {
			out = append(out, c.ID)
		}
	}
	slices.Sort(out)
	return out
}

// credentialOf returns the credential id of thread (the runtime's view).
func credentialOf(t *testing.T, rt *mcpruntime.Runtime, thread, id string) mcpruntime.CredentialInfo {
	t.Helper()
	for _, c := range rt.Credentials(thread) {
		if c.ID == id {
			return c
		}
	}
	t.Fatalf("thread %s has no credential %s", thread, id)
	return mcpruntime.CredentialInfo{}
}

func threadOf(t *testing.T, rt *mcpruntime.Runtime, id string) mcpruntime.Thread {
	t.Helper()
	th, err := rt.Thread(context.Background(), id)
	if err != nil {
		t.Fatalf("Thread(%s) = %v", id, err)
	}
	return th
}

// newRuntime starts a runtime closed when the test ends. Unless cfg names
// a driver "inproc" of its own, the in-process driver is the test double
// (providertest.Inproc), which inprocOf returns.
func newRuntime(t *testing.T, cfg mcpruntime.Config) *mcpruntime.Runtime {
	t.Helper()
	in := &providertest.Inproc{}
	if _, ok := cfg.Drivers[driver.InprocKind]; !ok {
		cfg.Drivers = maps.Clone(cfg.Drivers)
		if cfg.Drivers == nil {
			cfg.Drivers = map[string]driver.Factory{}
		}
		cfg.Drivers[driver.InprocKind] = in.Factory()
	}
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	inprocs.Store(rt, in)
	t.Cleanup(func() {
		if err := rt.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		inprocs.Delete(rt)
	})
	return rt
}

// inprocs holds the in-process driver of each runtime newRuntime started.
var inprocs sync.Map // *mcpruntime.Runtime → *providertest.Inproc

// inprocOf returns the in-process driver of rt, a runtime newRuntime
// started: what its sessions were given, and the knobs that make them fail.
func inprocOf(rt *mcpruntime.Runtime) *providertest.Inproc {
	in, _ := inprocs.Load(rt)
	return in.(*providertest.Inproc)
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func bearer(t *testing.T, authz string) string {
	t.Helper()
	const p = "Bearer "
	if len(authz) <= len(p) || authz[:len(p)] != p {
		t.Fatalf("Authorization %q is not a bearer value", authz)
	}
	return authz[len(p):]
}

// The root's HTTP tests are end to end: the MCP endpoint of a real
// runtime, for what needs real credentials — revocation by release,
// archive, delete, rotate and refresh, expiry by the credential window,
// rotated and refreshed principals. The endpoint's own behaviour is tested
// beside it, in transport, against a fake backend.

// hangAfter bounds every wait of the root package's tests for something
// that must happen. It only detects a hang: a correct runtime is never near
// it, however busy the machine.
const hangAfter = ht.HangAfter

// mcpEnv is an MCP endpoint of a real runtime behind httptest.NewServer.
type mcpEnv struct {
	*ht.Client
	rt  *mcpruntime.Runtime
	srv *mcpruntime.MCPEndpoint
}

// newMCPEnv mounts rt.MCPHandler(opts) on an httptest server. Its cleanup
// ends the sessions (so open streams return) and closes the server; it is
// registered after the runtime's, so it runs before rt.Close.
func newMCPEnv(t *testing.T, rt *mcpruntime.Runtime, opts mcpruntime.MCPOptions) *mcpEnv {
	t.Helper()
	srv, err := rt.MCPHandler(opts)
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	return &mcpEnv{Client: ht.New(t, srv), rt: rt, srv: srv}
}

const capabilitiesCall = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"runtime_capabilities","arguments":{}}}`

// sessionRequests are the requests that name a session.
var sessionRequests = ht.SessionRequests(capabilitiesCall)

// mcpRecords returns the ids of the ownership records in the store.
func mcpRecords(t *testing.T, rt *mcpruntime.Runtime) []string {
	t.Helper()
	recs := rt.MCPSessions()
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	return ids
}

// hasRecord reports whether the ownership record of sid exists.
func hasRecord(rt *mcpruntime.Runtime, sid string) bool {
	for _, r := range rt.MCPSessions() {
		if r.ID == sid {
			return true
		}
	}
	return false
}

// waitSessionGone polls until the ownership record of sid is removed.
func waitSessionGone(t *testing.T, rt *mcpruntime.Runtime, what, sid string) {
	t.Helper()
	waitUntil(t, what+": session record removed", func() bool { return !hasRecord(rt, sid) })
}

// registerBlockingTool registers a read tool that blocks until its context
// is done (ht.Blocking).
func registerBlockingTool(t *testing.T, rt *mcpruntime.Runtime, name string, progress bool) *ht.Blocking {
	t.Helper()
	b := ht.NewBlocking()
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: name},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			var p func(float64, float64, string)
			if progress {
				p = call.Progress
			}
			return nil, b.Run(ctx, p)
		},
	}))
	return b
}

// waitInFlight waits until the endpoint holds exactly want.
func (e *mcpEnv) waitInFlight(what string, want transport.InFlight) {
	e.T.Helper()
	waitUntil(e.T, fmt.Sprintf("%s: in flight %+v", what, want), func() bool { return mcpruntime.EndpointInFlight(e.srv) == want })
}

// recOutput is an transport.Output that records what a request sent back.
type recOutput struct {
	mu       sync.Mutex
	progress []float64
	logs     []string // level:data
	closed   int
}

func (o *recOutput) Progress(p, _ float64, _ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.progress = append(o.progress, p)
}

func (o *recOutput) Log(level mcp.LoggingLevel, _ string, data any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, _ := json.Marshal(data)
	o.logs = append(o.logs, string(level)+":"+string(b))
}

func (o *recOutput) CloseStream() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed++
}

// recFeed is a change feed that records what the registries told it.
type recFeed struct {
	mu      sync.Mutex
	changed []string
	updated []string
}

func (f *recFeed) ListChanged(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changed = append(f.changed, kind)
}

func (f *recFeed) ResourceUpdated(uri string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = append(f.updated, uri)
}

func (f *recFeed) take() (changed, updated []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed, updated = slices.Clone(f.changed), slices.Clone(f.updated)
	f.changed, f.updated = nil, nil
	return changed, updated
}

// serveReq is one request to a backend: the caller, the era (0: a 2025
// session), the client's capabilities (nil: none), the method and params,
// and for a later round the answers and the state.
type serveReq struct {
	caller mcpruntime.Principal
	era    transport.Era
	caps   *mcp.ClientCapabilities
	method string
	params string
	inputs mcp.InputResponseMap
	state  string
	out    transport.Output
}

func serve(t *testing.T, b transport.Backend, r serveReq) transport.Response {
	t.Helper()
	if r.era == 0 {
		r.era = transport.EraSession
	}
	if r.caps == nil {
		r.caps = &mcp.ClientCapabilities{}
	}
	if r.params == "" {
		r.params = "{}"
	}
	if r.out == nil {
		r.out = &recOutput{}
	}
	res := transport.Dispatch(context.Background(), b, r.method, json.RawMessage(r.params), &transport.Request{
		Caller: r.caller, Era: r.era, ClientCapabilities: r.caps, InputResponses: r.inputs, State: r.state, Out: r.out,
	})
	set := 0
	if res.Result != nil {
		set++
	}
	if len(res.InputRequests) > 0 {
		set++
	}
	if res.Err != nil {
		set++
	}
	if set != 1 {
		t.Fatalf("Serve(%s %s) = %+v: want exactly one of Result, InputRequests, Err", r.method, r.params, res)
	}
	return res
}

// wire is a value as the client would see it: its JSON, decoded.
func wire(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not an object: %v", b, err)
	}
	return m
}

// wantRPCError fails unless res is the JSON-RPC error code.
func wantRPCError(t *testing.T, what string, res transport.Response, code int) *transport.RPCError {
	t.Helper()
	if res.Err == nil || res.Err.Code != code {
		t.Fatalf("%s = %+v (err %+v), want JSON-RPC error %d", what, res, res.Err, code)
	}
	return res.Err
}

// resultOf returns res's result as a T.
func resultOf[T any](t *testing.T, what string, res transport.Response) T {
	t.Helper()
	v, ok := res.Result.(T)
	if !ok {
		t.Fatalf("%s = %+v (err %+v), want a %T result", what, res, res.Err, *new(T))
	}
	return v
}

// clientOf issues a client grant of access and returns its principal.
func clientOf(t *testing.T, rt *mcpruntime.Runtime, access string) mcpruntime.Principal {
	t.Helper()
	ct, err := rt.IssueClient(context.Background(), "test", access)
	noErr(t, err)
	p, err := rt.Authenticate(ct.Token)
	noErr(t, err)
	return p
}

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

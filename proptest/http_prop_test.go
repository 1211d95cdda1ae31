package proptest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
)

// The HTTP machine drives the runtime through its MCP endpoint (SPEC §5),
// over real HTTP, next to every lifecycle operation of the lifecycle
// machine, which it embeds. Each HTTP action draws a bearer token and an
// Mcp-Session-Id from everything that ever existed — live, revoked,
// expired, removed, another namespace's, made up, or none — and the model
// (model_test.go plus the MCP-session records below) predicts the status
// and, for tools/call, isError and structuredContent.code. After every step
// the machine checks SPEC §6 invariants 1 (via the embedded Check), 2, 3, 6
// and 7; at the end it DELETEs every session and checks that the session
// table and the session actors are back to zero.
//
// Client tokens never expire in this machine (ClientTokenTTL NoExpiry): an
// MCP session ends when its owner namespace has no live credential left,
// and the runtime learns about a fake-clock expiry only on its next store
// change, so a client namespace whose tokens all expired and that a refresh
// revived would keep or lose its sessions by timing. Provider credentials
// still expire; their sessions may linger until the credential is revoked,
// which the invariant-7 check allows (and which the owner cannot observe:
// its token answers 401).

// httpChecks: how many checks TestHTTPMachine and TestConcurrentMachine
// run when -rapid.checks (or RAPID_CHECKS) is not given explicitly.
// The concurrent machine, cheaper per check, runs three times as many.
var httpChecks = flag.Int("prop.httpchecks", 25, "checks of the HTTP machine (the concurrent machine: 3x) when -rapid.checks is not given explicitly")

// machineChecks returns how many checks a heavy machine runs: the explicit
// -rapid.checks / RAPID_CHECKS if given, else *httpChecks times scale.
func machineChecks(scale int) int {
	if _, ok := os.LookupEnv("RAPID_CHECKS"); ok {
		return 1 << 30
	}
	for _, a := range os.Args[1:] {
		a = strings.TrimLeft(a, "-")
		if a == "rapid.checks" || strings.HasPrefix(a, "rapid.checks=") || strings.HasPrefix(a, "test.rapid.checks") {
			return 1 << 30
		}
	}
	return *httpChecks * scale
}

// limited wraps prop so that only the first n checks do anything; the rest
// return at once (rapid's check count is one flag for the whole package).
// Once a check has failed, every later run does its work, so that
// shrinking and the final replay see the real property.
func limited(n int, prop func(*rapid.T)) func(*rapid.T) {
	var passed atomic.Int64
	var failed atomic.Bool
	return func(t *rapid.T) {
		if !failed.Load() && passed.Load() >= int64(n) {
			return
		}
		ok := false
		defer func() {
			if ok {
				passed.Add(1)
			} else {
				failed.Store(true)
			}
		}()
		prop(t)
		ok = true
	}
}

const (
	madeUpToken   = "mcprt_not_a_token_0000000000000000000000000000"
	madeUpSession = "mcps_00000000000000000000000000000000"
	protoVersion  = "2025-11-25"
)

var sessionIDPattern = regexp.MustCompile(`^mcps_[0-9a-f]{32}$`)

// mcpSess is one MCP session the endpoint ever created.
type mcpSess struct {
	id      string
	owner   string // namespace
	deleted bool   // DELETEd by its owner
	// subs are the URIs it subscribed (resources/subscribe accepted, no
	// unsubscribe since); nil while none.
	subs map[string]bool
}

// mcpState is the model of the MCP endpoint's sessions.
type mcpState struct {
	sessions []*mcpSess
	byID     map[string]*mcpSess
}

func newMCPState() *mcpState { return &mcpState{byID: map[string]*mcpSess{}} }

func (st *mcpState) clone() *mcpState {
	out := newMCPState()
	for _, s := range st.sessions {
		c := *s
		c.subs = maps.Clone(s.subs)
		out.sessions = append(out.sessions, &c)
		out.byID[c.id] = &c
	}
	return out
}

func (st *mcpState) add(id, owner string) {
	s := &mcpSess{id: id, owner: owner}
	st.sessions = append(st.sessions, s)
	st.byID[id] = s
}

// nsState is what the model knows of a namespace's liveness.
type nsState int

const (
	nsLive  nsState = iota
	nsMaybe         // only expired (not revoked) credentials: the runtime may not have noticed yet
	nsDead
)

// namespaceState: a provider namespace is its one credential, a client
// namespace every token of the grant.
func (m *model) namespaceState(ns string) nsState {
	if id, ok := strings.CutPrefix(ns, "cred:"); ok {
		c := m.credByID[id]
		switch {
		case c == nil || c.state != credLive:
			return nsDead
		case m.expired(c):
			return nsMaybe
		}
		return nsLive
	}
	client := strings.TrimPrefix(ns, "client:")
	state := nsDead
	for _, c := range m.creds {
		if c.kind == kindClient && c.client == client && c.state == credLive {
			if !m.expired(c) {
				return nsLive
			}
			state = nsMaybe
		}
	}
	return state
}

// clone deep-copies the model (the concurrent machine tries orders on
// copies).
func (m *model) clone() *model {
	out := newModel(m.now, m.window, m.clientTTL, m.idle, m.endpoint)
	for k, v := range m.instances {
		out.instances[k] = modelInstance{caps: slices.Clone(v.caps), multi: v.multi, turns: v.turns}
	}
	for k, v := range m.threads {
		t := *v
		t.messages = slices.Clone(v.messages)
		out.threads[k] = &t
	}
	for _, c := range m.creds {
		cc := *c
		cc.caps = slices.Clone(c.caps)
		out.creds = append(out.creds, &cc)
		if cc.id != "" {
			out.credByID[cc.id] = &cc
		}
	}
	for _, s := range m.sessions {
		ss := *s
		ss.threads = slices.Clone(s.threads)
		ss.creds = slices.Clone(s.creds)
		out.sessions = append(out.sessions, &ss)
		out.sessByID[ss.id] = &ss
	}
	for _, c := range m.clients {
		cc := *c
		out.clients = append(out.clients, &cc)
		out.clientByID[cc.id] = &cc
	}
	out.runs = slices.Clone(m.runs)
	for k, v := range m.failNext {
		out.failNext[k] = v
	}
	return out
}

// caller is the bearer an HTTP action presents: a token ever minted, a made
// up one, or none at all.
type caller struct {
	token   string // "" with missing
	missing bool
}

func (c caller) String() string {
	switch {
	case c.missing:
		return "no token"
	case c.token == madeUpToken:
		return "made-up token"
	}
	return "token " + c.token[:min(len(c.token), 12)] + "…"
}

// credOf returns the model's credential of a token, nil if none.
func (m *model) credOf(tok string) *modelCred {
	for _, c := range m.creds {
		if c.token == tok {
			return c
		}
	}
	return nil
}

// admit is SPEC §5 steps 2–3 in the model: 401, 404, or 0 when the request
// gets through (to its session, if it names one).
func admit(m *model, st *mcpState, who caller, sid string) (int, *modelCred) {
	if who.missing {
		return http.StatusUnauthorized, nil
	}
	c := m.credOf(who.token)
	if c == nil || !m.live(c) {
		return http.StatusUnauthorized, nil
	}
	if sid == "" {
		return 0, c
	}
	s := st.byID[sid]
	if s == nil || s.deleted || s.owner != m.principal(c).Namespace {
		return http.StatusNotFound, c
	}
	return 0, c
}

// toolOutcome is what a tools/call answers.
type toolOutcome struct {
	isError bool
	code    string
	seq     uint64 // thread_post
	author  string // thread_post
	status  string // thread_read: the thread's status
	msgs    int    // thread_read: messages returned
}

func codeFor(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, mcpruntime.ErrNotLive):
		return mcpruntime.CodeParentNotActive
	case errors.Is(err, mcpruntime.ErrReadOnly):
		return mcpruntime.CodeCapabilityDenied
	case errors.Is(err, mcpruntime.ErrCredentialRequired):
		return mcpruntime.CodeThreadCredentialRequired
	case errors.Is(err, mcpruntime.ErrUnknownThread), errors.Is(err, mcpruntime.ErrArchivedThread):
		return mcpruntime.CodeThreadNotFound
	case errors.Is(err, mcpruntime.ErrInvalidArgument):
		return mcpruntime.CodeInvalidArguments
	}
	return "unexpected: " + err.Error()
}

// predictRead is thread_read for caller c (live or not: a read checks
// nothing beyond authentication).
func predictRead(m *model, c *modelCred, target string) toolOutcome {
	id := target
	if id == "" {
		if c.kind != kindProvider {
			return toolOutcome{isError: true, code: mcpruntime.CodeThreadCredentialRequired}
		}
		id = c.thread
	}
	t := m.threads[id]
	if t == nil {
		return toolOutcome{isError: true, code: mcpruntime.CodeThreadNotFound}
	}
	status := "active"
	if t.archived {
		status = "archived"
	}
	return toolOutcome{status: status, msgs: min(len(t.messages), 50)}
}

// applyPost is thread_post for caller c: the class check (a read-only
// grant is refused before anything else), the schema (text non-empty), then
// the mutation, applied to m when it succeeds.
func applyPost(m *model, c *modelCred, target, text string) toolOutcome {
	if c.kind == kindClient && c.access != readWrite {
		return toolOutcome{isError: true, code: mcpruntime.CodeCapabilityDenied}
	}
	if text == "" {
		return toolOutcome{isError: true, code: mcpruntime.CodeInvalidArguments}
	}
	msg, err := m.post(c, target, text)
	if err != nil {
		return toolOutcome{isError: true, code: codeFor(err)}
	}
	return toolOutcome{seq: msg.seq, author: msg.author}
}

// ---- the machine ----

// countingObserver counts the endpoint's finished requests and session
// lifecycles. A GET's Request is reported once its handler has returned,
// i.e. after it told the session actor its stream closed.
type countingObserver struct {
	done           atomic.Int64
	opened, closed atomic.Int64
}

func (o *countingObserver) Request(string, string, int, time.Duration) { o.done.Add(1) }
func (o *countingObserver) AuthFailure(string)                         {}
func (o *countingObserver) SessionOpened()                             { o.opened.Add(1) }
func (o *countingObserver) SessionClosed(string)                       { o.closed.Add(1) }
func (o *countingObserver) Refused(string)                             {}
func (o *countingObserver) Forward(string)                             {}

// httpMachine is the lifecycle machine plus the MCP endpoint over HTTP.
type httpMachine struct {
	*lifecycleMachine
	mcp *mcpState
	srv interface{ Sessions() int }
	// ep is the endpoint of the moment, handler serves it, opts made it (a
	// restart makes another, restart_http_prop_test.go).
	ep      *mcpruntime.MCPEndpoint
	handler *swapHandler
	opts    mcpruntime.MCPOptions
	url     string
	origin  string // the public origin: OAuth's issuer, the resource is origin + "/mcp"
	client  *http.Client
	obs     *countingObserver
	issued  int64 // requests sent
	rpcID   int
	// lastBatch describes the concurrent machine's last batch and the
	// order that explained it, for failures found after it.
	lastBatch string
	// statsSeen: the session count Stats last agreed with.
	statsSeen int
	// tools names the barrier tools ResourceUpdated registers.
	tools int
	// header, while set, goes on every request (Resume's Last-Event-ID).
	header http.Header
	// asks are the calls of ask_confirm whose ask is pending in the model
	// (asks_prop_test.go); asksEnded counts those whose stream ended, which
	// the endpoint counted among its requests but issued does not.
	asks      []*pendingAsk
	asksEnded atomic.Int64
	// listens are the listen streams the model holds open
	// (http_listen_prop_test.go); listensDone counts the listen requests
	// whose answer ended, which the endpoint counted among its requests
	// but issued does not. opened is every listen ever made, for the
	// cleanup (listenMu guards it: a batch's listens open at once), and
	// pendingListens the listens of the batch being drawn, by namespace.
	listens        []*listenStream
	listensDone    atomic.Int64
	listenMu       sync.Mutex
	opened         []*listenStream
	listenCleanup  bool
	pendingListens map[string]int
	// states are the requestStates the endpoint gave the machine
	// (http_state_prop_test.go).
	states []*modelState
}

func newHTTPMachine(t *rapid.T) *httpMachine { return newHTTPMachineOn(t, "") }

// testOAuthSecret is the durable HTTP machine's OAuthConfig.Secret: an
// embedder keeps its secret across restarts, so that the client ids it
// minted stay valid.
var testOAuthSecret = []byte("proptest oauth secret, 32 bytes or more")

// newHTTPMachineOn is newHTTPMachine on the state file path, in memory
// when "".
func newHTTPMachineOn(t *rapid.T, stateFile string) *httpMachine {
	clock := actortest.NewClock(testStart)
	in := &providertest.Inproc{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	origin := "http://" + ln.Addr().String()
	cfg := mcpruntime.Config{
		OAuth:            mcpruntime.OAuthConfig{PublicOrigin: origin, RefreshTokenTTL: mcpruntime.NoExpiry},
		Drivers:          map[string]driver.Factory{driver.InprocKind: in.Factory()},
		Endpoint:         testEndpoint,
		CredentialWindow: testWindow,
		ClientTokenTTL:   mcpruntime.NoExpiry,
		ProviderIdle:     testProviderIdle,
		RevokedKept:      1 << 20,
		Now:              clock.Now,
		Logger:           slog.New(slog.DiscardHandler),
		StateFile:        stateFile,
	}
	if stateFile != "" {
		cfg.OAuth.Secret = testOAuthSecret
	}
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		ln.Close()
		t.Fatalf("New: %v", err)
	}
	obs := &countingObserver{}
	opts := mcpruntime.MCPOptions{
		IdleTimeout:             -1, // the fake clock drives no timers
		MaxSessionsPerNamespace: 1 << 20,
		AskTimeout:              time.Hour, // an ask ends only as the model says
		Observer:                obs,
		// Small, so that the model's 429 finds a stream the endpoint
		// failed to forget (http_listen_prop_test.go).
		MaxListenStreamsPerNamespace: listenPerNamespace,
		RequestStateTTL:              testStateTTL,
	}
	srv, err := rt.MCPHandler(opts)
	if err != nil {
		ln.Close()
		_ = rt.Close()
		t.Fatalf("MCPHandler: %v", err)
	}
	handler := &swapHandler{}
	handler.h.Store(srv)
	hs := httptest.NewUnstartedServer(handler)
	hs.Listener.Close()
	hs.Listener = ln
	hs.Start()
	tr := &http.Transport{}
	lm := &lifecycleMachine{
		ctx:    context.Background(),
		rt:     rt,
		inproc: in,
		clock:  clock,
		m:      newModel(testStart, testWindow, 0, testProviderIdle, testEndpoint),
		turns:  map[string]*machineTurn{},
		cfg:    cfg,
	}
	t.Cleanup(func() {
		hs.Close()
		tr.CloseIdleConnections()
		_ = lm.rt.Close() // the runtime of the moment: a restart replaces it
	})
	registerAskTool(t, rt)
	registerAskPostTool(t, rt)
	lm.unsubscribe = subscribeCounting(rt.SubscribeProviderEvents, &lm.closes)
	t.Cleanup(func() { lm.unsubscribe() })
	for _, inst := range testInstances {
		if err := rt.RegisterInstance(lm.ctx, inst.id, instanceSpec(inst.caps, inst.config)); err != nil {
			t.Fatalf("RegisterInstance(%q): %v", inst.id, err)
		}
		lm.m.instances[inst.id] = modelInstance{caps: inst.caps, multi: inst.multi, turns: inst.turns}
	}
	h := &httpMachine{
		lifecycleMachine: lm,
		mcp:              newMCPState(),
		srv:              srv,
		ep:               srv,
		handler:          handler,
		opts:             opts,
		url:              hs.URL + "/mcp",
		origin:           origin,
		client:           &http.Client{Transport: tr},
		obs:              obs,
	}
	// Before the server's close (cleanups run last first): a check that
	// stopped early leaves calls waiting on their asks, which only the
	// sessions' end returns, and httptest's Close waits for them.
	t.Cleanup(func() {
		if len(h.asks) > 0 {
			h.ep.Close()
			for _, a := range h.asks {
				a.stream.cancel()
			}
		}
	})
	return h
}

// swapHandler serves with the endpoint of the moment: a restart replaces
// it behind the same listener, so that the origin (the OAuth issuer and
// the tokens' audience) stays.
type swapHandler struct {
	h atomic.Pointer[mcpruntime.MCPEndpoint]
}

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.h.Load().ServeHTTP(w, r) }

// httpWeight: extra keys for the actions that build state, and for the
// HTTP actions (see extraWeight).
var httpWeight = map[string]int{
	"CreateThread":        1,
	"OpenProviderSession": 2,
	"StartRun":            1,
	"IssueClient":         1,
	"Initialize":          3,
	"CallPost":            2,
	"CallRead":            1,
	"Stream":              1,
	"Delete":              1,
	"HTTPSubscribe":       3,
	"ResourceUpdated":     2,
	"Resume":              1,
	"OAuthSignIn":         2,
	"OAuthRefresh":        3,
	"Ask":                 1,
	"Answer":              2,
	"ModernCallRead":      1,
	"ModernCallPost":      1,
	"Listen":              1,
	"ListenNotify":        1,
	"ModernAsk":           2,
	"ModernRetry":         3,
}

func weighted(actions map[string]func(*rapid.T), weights map[string]int) map[string]func(*rapid.T) {
	for name, extra := range weights {
		for i := 1; i <= extra; i++ {
			actions[fmt.Sprintf("+%s#%d", name, i)] = actions[name]
		}
	}
	return actions
}

func httpProp(t *rapid.T) {
	s := newHTTPMachine(t)
	t.Repeat(weighted(rapid.StateMachineActions(s), httpWeight))
	s.finish(t)
}

// TestHTTPMachine runs the HTTP state machine.
func TestHTTPMachine(t *testing.T) {
	rapid.Check(t, limited(machineChecks(1), httpProp))
}

// FuzzHTTPMachine runs the HTTP state machine on fuzzer input.
func FuzzHTTPMachine(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(httpProp))
}

// ---- HTTP ----

// reply is one HTTP answer.
type reply struct {
	status int
	header http.Header
	body   []byte
}

// rpc decodes a JSON-RPC answer body.
type rpc struct {
	Result *struct {
		IsError           bool            `json:"isError"`
		StructuredContent json.RawMessage `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Code int `json:"code"`
	} `json:"error"`
}

// send makes one request and waits until the endpoint has finished it. A
// GET that opens a stream is closed at once.
func (h *httpMachine) send(t *rapid.T, method string, who caller, sid string, body []byte) reply {
	t.Helper()
	r := h.do(method, who, sid, body)
	if r.err != nil {
		t.Fatalf("%s: %v", method, r.err)
	}
	h.issued++
	h.settle(t)
	return r.reply
}

type result struct {
	reply
	err error
}

// do makes one request; safe for concurrent use.
func (h *httpMachine) do(method string, who caller, sid string, body []byte) result {
	return h.doWith(method, who, sid, body, nil)
}

// doWith is do with the headers extra set last (a 2026-07-28 request's).
func (h *httpMachine) doWith(method string, who caller, sid string, body []byte, extra http.Header) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, h.url, rd)
	if err != nil {
		return result{err: err}
	}
	if !who.missing {
		req.Header.Set("Authorization", "Bearer "+who.token)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	for k, v := range h.header {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	switch method {
	case http.MethodPost:
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Content-Type", "application/json")
	case http.MethodGet:
		req.Header.Set("Accept", "text/event-stream")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	out := reply{status: resp.StatusCode, header: resp.Header.Clone()}
	if method == http.MethodGet && resp.StatusCode == http.StatusOK {
		cancel() // close the stream at once
		return result{reply: out}
	}
	out.body, err = io.ReadAll(resp.Body)
	return result{reply: out, err: err}
}

// settle waits until the endpoint has finished every request sent (for a
// stream: its handler returned and told the session its stream closed).
func (h *httpMachine) settle(t *rapid.T) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for h.obs.done.Load() < h.issued+h.asksEnded.Load()+h.listensDone.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("the endpoint finished %d of %d requests after %v", h.obs.done.Load(), h.issued+h.asksEnded.Load()+h.listensDone.Load(), waitTimeout)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

func (h *httpMachine) nextID() int { h.rpcID++; return h.rpcID }

func initializeBody(id int) []byte {
	return fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%d,"method":"initialize","params":{"protocolVersion":%q,"capabilities":{"elicitation":{}},"clientInfo":{"name":"proptest","version":"1"}}}`, id, protoVersion)
}

func callBody(id int, tool string, args map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{"name": tool, "arguments": args}})
	return b
}

// ---- generators ----

// genCaller draws a token: mostly one ever minted (mostly a live one, or
// the owner of some session), else made up, else none.
func (h *httpMachine) genCaller(t *rapid.T) caller {
	m := h.m
	var live []*modelCred
	for _, c := range m.creds {
		if m.live(c) {
			live = append(live, c)
		}
	}
	switch n := rapid.IntRange(0, 19).Draw(t, "tokenKind"); {
	case n == 0:
		return caller{missing: true}
	case n == 1:
		return caller{token: madeUpToken}
	case n < 6 && len(m.creds) > 0:
		return caller{token: pick(t, "anyToken", m.creds).token}
	case len(live) > 0:
		return caller{token: pick(t, "liveToken", live).token}
	case len(m.creds) > 0:
		return caller{token: pick(t, "anyToken", m.creds).token}
	}
	return caller{token: madeUpToken}
}

// genSession draws a session id: mostly one the caller's namespace owns
// and has not deleted, else any ever created, else made up.
func (h *httpMachine) genSession(t *rapid.T, who caller) string {
	var own []string
	if c := h.m.credOf(who.token); c != nil && !who.missing {
		ns := h.m.principal(c).Namespace
		for _, s := range h.mcp.sessions {
			if s.owner == ns && !s.deleted {
				own = append(own, s.id)
			}
		}
	}
	switch n := rapid.IntRange(0, 9).Draw(t, "sessionKind"); {
	case n == 0:
		return madeUpSession
	case n < 4 && len(h.mcp.sessions) > 0:
		return pick(t, "anySession", h.mcp.sessions).id
	case len(own) > 0:
		return pick(t, "ownSession", own)
	case len(h.mcp.sessions) > 0:
		return pick(t, "anySession", h.mcp.sessions).id
	}
	return madeUpSession
}

// genTarget: "" (the caller's own thread) or a pool thread.
func (h *httpMachine) genTarget(t *rapid.T) string {
	if rapid.IntRange(0, 2).Draw(t, "explicit") == 0 {
		return ""
	}
	return h.genThread(t)
}

// ---- invariant checks around one request ----

// record reads the ownership record of sid, nil if none.
func (h *httpMachine) record(sid string) any {
	for _, r := range h.rt.MCPSessions() {
		if r.ID == sid {
			return r
		}
	}
	return nil
}

// foreignOwner returns the owner namespace of sid if it exists in the
// model, is not deleted, and is not the caller's: a foreign session.
func (h *httpMachine) foreignOwner(c *modelCred, sid string) bool {
	s := h.mcp.byID[sid]
	return c != nil && s != nil && !s.deleted && s.owner != h.m.principal(c).Namespace
}

// exchange sends one request and checks what the model expects of its
// status; for a 404 it also checks invariants 2 and 3.
func (h *httpMachine) exchange(t *rapid.T, call, method string, who caller, sid string, body func() []byte, want int) reply {
	t.Helper()
	_, c := admit(h.m, h.mcp, who, sid)
	foreign := h.foreignOwner(c, sid)
	var before any
	if foreign {
		before = h.record(sid)
	}
	r := h.send(t, method, who, sid, body())
	if r.status != want {
		t.Fatalf("%s = %d %s, want %d", call, r.status, r.body, want)
	}
	if r.status == http.StatusNotFound && sid != madeUpSession {
		// Invariant 3: the same request naming a made-up id gets the same
		// answer, byte for byte, headers other than Date included.
		twin := h.send(t, method, who, madeUpSession, body())
		sameAnswer(t, call, r, twin)
	}
	if foreign {
		// Invariant 2: nothing reached the owner's session.
		if diff := cmp.Diff(before, h.record(sid)); diff != "" {
			t.Fatalf("%s: a foreign request changed the owner's session record (-before +after):\n%s", call, diff)
		}
	}
	return r
}

func sameAnswer(t *rapid.T, call string, a, b reply) {
	t.Helper()
	ha, hb := a.header.Clone(), b.header.Clone()
	ha.Del("Date")
	hb.Del("Date")
	if a.status != b.status || !bytes.Equal(a.body, b.body) || !cmp.Equal(ha, hb) {
		t.Fatalf("%s: the answer differs from an unknown one's:\n%d %v %q\nvs\n%d %v %q", call, a.status, ha, a.body, b.status, hb, b.body)
	}
}

// ---- actions ----

// Initialize sends initialize, mostly without a session id.
func (h *httpMachine) Initialize(t *rapid.T) {
	who := h.genCaller(t)
	sid := ""
	if rapid.IntRange(0, 4).Draw(t, "withSession") == 0 {
		sid = h.genSession(t, who)
	}
	call := fmt.Sprintf("initialize(%v, session %q)", who, sid)
	want, c := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid != "":
		want = http.StatusBadRequest // already initialized
	default:
		want = http.StatusOK
	}
	r := h.exchange(t, call, http.MethodPost, who, sid, func() []byte { return initializeBody(h.nextID()) }, want)
	if r.status != http.StatusOK {
		return
	}
	id := r.header.Get("Mcp-Session-Id")
	if !sessionIDPattern.MatchString(id) || h.mcp.byID[id] != nil {
		t.Fatalf("%s: Mcp-Session-Id %q, want a new mcps_ id", call, id)
	}
	var resp rpc
	if err := json.Unmarshal(r.body, &resp); err != nil || resp.Result == nil {
		t.Fatalf("%s: body %s is not a result", call, r.body)
	}
	h.mcp.add(id, h.m.principal(c).Namespace)
}

// callTool is tools/call: the status, then isError and the code.
func (h *httpMachine) callTool(t *rapid.T, tool string, args map[string]string, predict func(c *modelCred) toolOutcome) {
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 9).Draw(t, "noSession") == 0 {
		sid = ""
	}
	call := fmt.Sprintf("tools/call %s %v (%v, session %q)", tool, args, who, sid)
	want, c := admit(h.m, h.mcp, who, sid)
	if want == 0 && sid == "" {
		want = http.StatusBadRequest
	}
	var out toolOutcome
	var mayMutate bool
	if want == 0 {
		want = http.StatusOK
		mayMutate = h.m.mayMutate(c)
		out = predict(c)
	}
	r := h.exchange(t, call, http.MethodPost, who, sid, func() []byte { return callBody(h.nextID(), tool, args) }, want)
	if r.status != http.StatusOK {
		return
	}
	checkTool(t, call, r.body, out)
	if tool == "thread_post" && !out.isError && !mayMutate {
		// Invariant 6, stated directly.
		t.Fatalf("%s succeeded for a caller that is not live", call)
	}
}

// checkTool compares a tools/call answer with the expected outcome.
func checkTool(t *rapid.T, call string, body []byte, want toolOutcome) {
	t.Helper()
	got, err := parseTool(body)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if got != want {
		t.Fatalf("%s = %+v, want %+v", call, got, want)
	}
}

func parseTool(body []byte) (toolOutcome, error) {
	var resp rpc
	if err := json.Unmarshal(body, &resp); err != nil || resp.Result == nil {
		return toolOutcome{}, fmt.Errorf("body %s is not a tool result", body)
	}
	var sc struct {
		Code     string            `json:"code"`
		Seq      *uint64           `json:"seq"`
		Author   string            `json:"author"`
		Status   string            `json:"status"`
		Messages []json.RawMessage `json:"messages"`
	}
	if len(resp.Result.StructuredContent) == 0 {
		return toolOutcome{isError: resp.Result.IsError}, nil
	}
	if err := json.Unmarshal(resp.Result.StructuredContent, &sc); err != nil {
		return toolOutcome{}, fmt.Errorf("structuredContent of %s: %v", body, err)
	}
	out := toolOutcome{isError: resp.Result.IsError, code: sc.Code, author: sc.Author, status: sc.Status, msgs: len(sc.Messages)}
	if sc.Seq != nil {
		out.seq = *sc.Seq
	}
	return out, nil
}

// CallRead calls thread_read.
func (h *httpMachine) CallRead(t *rapid.T) {
	target := h.genTarget(t)
	args := map[string]string{}
	if target != "" {
		args["threadId"] = target
	}
	h.callTool(t, "thread_read", args, func(c *modelCred) toolOutcome { return predictRead(h.m, c, target) })
}

// CallPost calls thread_post, sometimes with an empty text.
func (h *httpMachine) CallPost(t *rapid.T) {
	target := h.genTarget(t)
	h.texts++
	text := fmt.Sprintf("http message %d", h.texts)
	if rapid.IntRange(0, 9).Draw(t, "empty") == 0 {
		text = ""
	}
	args := map[string]string{"text": text}
	if target != "" {
		args["threadId"] = target
	}
	h.callTool(t, "thread_post", args, func(c *modelCred) toolOutcome { return applyPost(h.m, c, target, text) })
}

// Stream opens the session's GET stream and closes it at once.
func (h *httpMachine) Stream(t *rapid.T) {
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 9).Draw(t, "noSession") == 0 {
		sid = ""
	}
	call := fmt.Sprintf("GET (%v, session %q)", who, sid)
	want, _ := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid == "":
		want = http.StatusBadRequest
	default:
		want = http.StatusOK
	}
	r := h.exchange(t, call, http.MethodGet, who, sid, func() []byte { return nil }, want)
	if r.status == http.StatusOK && !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%s: Content-Type %q, want text/event-stream", call, r.header.Get("Content-Type"))
	}
}

// Delete DELETEs a session.
func (h *httpMachine) Delete(t *rapid.T) {
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	if rapid.IntRange(0, 9).Draw(t, "noSession") == 0 {
		sid = ""
	}
	call := fmt.Sprintf("DELETE (%v, session %q)", who, sid)
	want, _ := admit(h.m, h.mcp, who, sid)
	switch {
	case want != 0:
	case sid == "":
		want = http.StatusBadRequest
	default:
		want = http.StatusNoContent
	}
	r := h.exchange(t, call, http.MethodDelete, who, sid, func() []byte { return nil }, want)
	if r.status == http.StatusNoContent {
		h.mcp.byID[sid].deleted = true
		if h.record(sid) != nil {
			t.Fatalf("%s answered 204 but the ownership record is still there", call)
		}
	}
}

// ---- invariants after every step ----

// Check is the lifecycle machine's check (invariant 1, model agreement)
// plus invariant 7.
func (h *httpMachine) Check(t *rapid.T) {
	if h.lastBatch != "" {
		if why := h.disagreement(world{m: h.m, mcp: h.mcp}); why != "" {
			t.Fatalf("after the batch%s\nthe runtime no longer shows the model's state: %s", h.lastBatch, why)
		}
		h.lastBatch = ""
	}
	h.checkListens(t)
	h.lifecycleMachine.Check(t)
	h.checkSessions(t)
	h.checkAsks(t)
}

// checkSessions is invariant 7: the ownership records are exactly the
// sessions the model has alive (plus, at most, those whose owner only
// expired), and the endpoint's live session actors and the runtime's
// Stats agree with them. A revocation ends its sessions asynchronously, so
// this polls until a bounded deadline.
func (h *httpMachine) checkSessions(t *rapid.T) {
	t.Helper()
	var required, allowed []string
	for _, s := range h.mcp.sessions {
		if s.deleted {
			continue
		}
		switch h.m.namespaceState(s.owner) {
		case nsLive:
			required = append(required, s.id)
		case nsMaybe:
			allowed = append(allowed, s.id)
		}
	}
	deadline := time.Now().Add(waitTimeout)
	for {
		problem := h.sessionProblem(required, allowed)
		if problem == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("invariant 7 after %v: %s", waitTimeout, problem)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (h *httpMachine) sessionProblem(required, allowed []string) string {
	recs := h.rt.MCPSessions()
	ids := map[string]bool{}
	for _, r := range recs {
		ids[r.ID] = true
		if !slices.Contains(required, r.ID) && !slices.Contains(allowed, r.ID) {
			return fmt.Sprintf("ownership record %s (owner %s) has no live session in the model", r.ID, r.Owner)
		}
		if s := h.mcp.byID[r.ID]; s == nil || s.owner != r.Owner {
			return fmt.Sprintf("ownership record %s is owned by %s, the model says %+v", r.ID, r.Owner, s)
		}
	}
	for _, id := range required {
		if !ids[id] {
			return fmt.Sprintf("live session %s has no ownership record", id)
		}
	}
	if n := h.srv.Sessions(); n != len(recs) {
		return fmt.Sprintf("%d live session actors, %d ownership records", n, len(recs))
	}
	// Stats walks every process of the actor system, which is slow (under
	// -race especially): ask it only when the count changed.
	if len(recs) != h.statsSeen {
		if n := h.rt.Stats().MCPSessions; n != len(recs) {
			return fmt.Sprintf("Stats().MCPSessions = %d, %d ownership records", n, len(recs))
		}
		h.statsSeen = len(recs)
	}
	if open, closed := h.obs.opened.Load(), h.obs.closed.Load(); open-closed != int64(len(recs)) {
		return fmt.Sprintf("%d sessions opened, %d closed, %d ownership records", open, closed, len(recs))
	}
	return ""
}

// finish DELETEs every session the model has alive, ends those whose owner
// only expired by revoking it (archive), and checks that the session table
// and the session actors are back to zero (invariant 7's "no leaks").
func (h *httpMachine) finish(t *rapid.T) {
	h.checkSessions(t)
	for _, s := range h.mcp.sessions {
		if s.deleted || h.m.namespaceState(s.owner) != nsLive {
			continue
		}
		var tok string
		for _, c := range h.m.creds {
			if h.m.live(c) && h.m.principal(c).Namespace == s.owner {
				tok = c.token
			}
		}
		r := h.send(t, http.MethodDelete, caller{token: tok}, s.id, nil)
		if r.status != http.StatusNoContent {
			t.Fatalf("final DELETE of %s = %d %s, want 204", s.id, r.status, r.body)
		}
		s.deleted = true
	}
	for _, id := range h.m.threadIDs() {
		if err := h.m.archive(id); err != nil {
			t.Fatalf("model archive(%s): %v", id, err)
		}
		if err := h.rt.Archive(h.ctx, id); err != nil {
			t.Fatalf("final Archive(%s): %v", id, err)
		}
	}
	h.checkSessions(t)
	h.checkListens(t) // the archives ended every provider credential's streams
	if n := h.rt.Stats().MCPSessions; n != 0 {
		t.Fatalf("after every session ended, Stats().MCPSessions = %d, want 0", n)
	}
	if n := h.srv.Sessions(); n != 0 {
		t.Fatalf("after every session ended, %d session actors are live, want 0", n)
	}
	h.endAsks(t)
	h.finishListens(t)
	h.closeAndCheck(t)
}

package mcpruntime_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// mcpEnv is an MCP endpoint of a real runtime behind httptest.NewServer.
type mcpEnv struct {
	t   *testing.T
	rt  *mcpruntime.Runtime
	srv *mcpruntime.MCPEndpoint
	ts  *httptest.Server
	url string // the endpoint: ts.URL + "/mcp"
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
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close()
		ts.Close()
	})
	return &mcpEnv{t: t, rt: rt, srv: srv, ts: ts, url: ts.URL + "/mcp"}
}

// twoCredentials returns a runtime with instance A and threads T and U,
// and the provider tokens of (T, A) and (U, A): two namespaces.
func twoCredentials(t *testing.T) (rt *mcpruntime.Runtime, tok, other string) {
	t.Helper()
	rt = quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok = openMinted(t, rt, "T", "A")
	_, other = openMinted(t, rt, "U", "A")
	return rt, tok, other
}

// The request headers of a well-formed MCP request.
const (
	acceptBoth      = "application/json, text/event-stream"
	acceptSSE       = "text/event-stream"
	latestVersion   = "2025-11-25"
	madeUpSessionID = "mcps_0123456789abcdef0123456789abcdef"
)

// mcpHeaders returns the headers of a well-formed request: bearer token
// (none if tok is ""), session id (none if sid is ""), protocol version,
// Accept both types, JSON content type. Tests change them per case.
func mcpHeaders(tok, sid string) http.Header {
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	if sid != "" {
		h.Set("Mcp-Session-Id", sid)
		h.Set("MCP-Protocol-Version", latestVersion)
	}
	h.Set("Accept", acceptBoth)
	h.Set("Content-Type", "application/json")
	return h
}

// getHeaders is mcpHeaders for a GET: Accept the event stream only, no
// content type.
func getHeaders(tok, sid string) http.Header {
	h := mcpHeaders(tok, sid)
	h.Set("Accept", acceptSSE)
	h.Del("Content-Type")
	return h
}

// httpResult is a complete answer.
type httpResult struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *httpResult) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// rpc decodes the body as one JSON-RPC response.
func (r *httpResult) rpc(t *testing.T) rpcAnswer {
	t.Helper()
	var a rpcAnswer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %s: body is not a JSON-RPC message: %v", r, err)
	}
	return a
}

type rpcAnswer struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
	Result  json.RawMessage `json:"result"`
	Error   *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// toolResult is the result of a tools/call.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
}

// newRequest builds a request to the endpoint with exactly the headers h;
// a "Host" entry sets the Host header.
func (e *mcpEnv) newRequest(ctx context.Context, method string, h http.Header, body string) *http.Request {
	e.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.url, rd)
	if err != nil {
		e.t.Fatalf("NewRequest: %v", err)
	}
	for k, vs := range h {
		if strings.EqualFold(k, "Host") {
			req.Host = vs[0]
			continue
		}
		req.Header[k] = slices.Clone(vs)
	}
	return req
}

// send sends a request and returns the open response; the caller closes
// its body (a cleanup closes it too).
func (e *mcpEnv) send(req *http.Request) *http.Response {
	e.t.Helper()
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// do sends a request with exactly the headers h and reads the whole answer.
// A "Host" entry in h sets the Host header.
func (e *mcpEnv) do(method string, h http.Header, body string) *httpResult {
	e.t.Helper()
	return e.doURL(e.url, method, h, body)
}

// doURL is do against url (the endpoint with a query string, say).
func (e *mcpEnv) doURL(url, method string, h http.Header, body string) *httpResult {
	e.t.Helper()
	req := e.newRequest(context.Background(), method, h, body)
	if url != e.url {
		u, err := req.URL.Parse(url)
		if err != nil {
			e.t.Fatal(err)
		}
		req.URL = u
	}
	resp := e.send(req)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s: read body: %v", method, err)
	}
	return &httpResult{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// post sends a JSON-RPC message on session sid ("" for none) with the
// headers of a well-formed request.
func (e *mcpEnv) post(tok, sid, body string) *httpResult {
	e.t.Helper()
	return e.do(http.MethodPost, mcpHeaders(tok, sid), body)
}

// del sends DELETE for session sid.
func (e *mcpEnv) del(tok, sid string) *httpResult {
	e.t.Helper()
	h := mcpHeaders(tok, sid)
	h.Del("Content-Type")
	return e.do(http.MethodDelete, h, "")
}

// initBody is an initialize request asking for version.
func initBody(version string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version +
		`","capabilities":{},"clientInfo":{"name":"http-test","version":"1"}}}`
}

const (
	pingBody          = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	initializedBody   = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	capabilitiesCall  = `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"runtime_capabilities","arguments":{}}}`
	toolsListBody     = `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`
	serverDiscoverReq = `{"jsonrpc":"2.0","id":5,"method":"server/discover"}`
)

// initialize creates a session for tok, requires 200 and an id of the
// documented shape, sends notifications/initialized (202) and returns the id.
func (e *mcpEnv) initialize(tok string) string {
	e.t.Helper()
	res := e.post(tok, "", initBody(latestVersion))
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || !validSessionID(sid) {
		e.t.Fatalf("initialize = %s, Mcp-Session-Id %q; want 200 and mcps_ + 32 hex", res, sid)
	}
	if got := e.post(tok, sid, initializedBody); got.Status != http.StatusAccepted {
		e.t.Fatalf("notifications/initialized = %s, want 202", got)
	}
	return sid
}

func validSessionID(sid string) bool {
	hex, ok := strings.CutPrefix(sid, "mcps_")
	if !ok || len(hex) != 32 {
		return false
	}
	for _, c := range hex {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// wantPing requires that tok can ping session sid.
func (e *mcpEnv) wantPing(what, tok, sid string) {
	e.t.Helper()
	res := e.post(tok, sid, pingBody)
	if res.Status != http.StatusOK {
		e.t.Fatalf("%s: ping = %s, want 200", what, res)
	}
	if a := res.rpc(e.t); a.Error != nil || string(a.Result) != "{}" {
		e.t.Fatalf("%s: ping = %s, want result {}", what, res)
	}
}

// wantStatus requires an answer's status.
func wantStatus(t *testing.T, what string, res *httpResult, status int) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("%s = %s, want %d", what, res, status)
	}
}

// sameAsUnknown requires that got, an answer about a real session, cannot
// be told from want, the same request about a made-up id: status, body
// bytes and every header but Date.
func sameAsUnknown(t *testing.T, what string, got, want *httpResult) {
	t.Helper()
	if got.Status != want.Status || !bytes.Equal(got.Body, want.Body) {
		t.Fatalf("%s = %d %q, unknown id = %d %q; want identical", what, got.Status, got.Body, want.Status, want.Body)
	}
	g, w := got.Header.Clone(), want.Header.Clone()
	g.Del("Date")
	w.Del("Date")
	if len(g) != len(w) {
		t.Fatalf("%s headers %v, unknown id headers %v; want identical but Date", what, g, w)
	}
	for k, vs := range w {
		if !slices.Equal(g[k], vs) {
			t.Fatalf("%s header %s = %q, unknown id %q; want identical but Date", what, k, g[k], vs)
		}
	}
}

// want401 requires a 401 with the given challenge and no-store.
func want401(t *testing.T, what string, res *httpResult, challenge string) {
	t.Helper()
	if res.Status != http.StatusUnauthorized {
		t.Fatalf("%s = %s, want 401", what, res)
	}
	if got := res.Header.Values("WWW-Authenticate"); len(got) != 1 || got[0] != challenge {
		t.Fatalf("%s: WWW-Authenticate = %q, want [%q]", what, got, challenge)
	}
	if got := res.Header.Get("Cache-Control"); got != "no-store" {
		t.Fatalf("%s: Cache-Control = %q, want no-store", what, got)
	}
}

const invalidToken = `Bearer error="invalid_token"`

// sseStream is an open text/event-stream answer read line by line by a
// goroutine until it ends.
type sseStream struct {
	resp *http.Response

	mu    sync.Mutex // guards the fields below
	lines []string

	done  chan struct{} // closed when the body ended (EOF or error)
	ended time.Time     // when; set before done is closed
}

// openStream sends GET with headers h and, on 200, starts reading the
// stream. It returns the answer's status; on anything but 200 the stream
// is nil and the body is returned in res.
func (e *mcpEnv) openStream(h http.Header) (*sseStream, *httpResult) {
	e.t.Helper()
	return e.openSSE(e.newRequest(context.Background(), http.MethodGet, h, ""))
}

// openSSE sends req; on 200 text/event-stream it returns the stream. It
// waits at most 5 s for the answer's headers.
func (e *mcpEnv) openSSE(req *http.Request) (*sseStream, *httpResult) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(req.Context())
	e.t.Cleanup(cancel)
	req = req.WithContext(ctx)
	type answer struct {
		resp *http.Response
		err  error
	}
	ch := make(chan answer, 1)
	client := e.ts.Client()
	go func() {
		resp, err := client.Do(req)
		ch <- answer{resp, err}
	}()
	var resp *http.Response
	select {
	case a := <-ch:
		if a.err != nil {
			e.t.Fatalf("%s %s: %v", req.Method, req.URL, a.err)
		}
		resp = a.resp
		e.t.Cleanup(func() { resp.Body.Close() })
	case <-time.After(5 * time.Second):
		cancel()
		<-ch
		e.t.Fatalf("%s %s: no answer after 5s", req.Method, req.URL)
	}
	res := &httpResult{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			e.t.Fatalf("%s: read body: %v", req.Method, err)
		}
		res.Body = b
		return nil, res
	}
	s := &sseStream{resp: resp, done: make(chan struct{})}
	go s.read()
	e.t.Cleanup(s.close)
	return s, res
}

// stream opens the standalone stream of sid and requires 200.
func (e *mcpEnv) stream(tok, sid string) *sseStream {
	e.t.Helper()
	s, res := e.openStream(getHeaders(tok, sid))
	if s == nil {
		e.t.Fatalf("GET stream = %s, want 200 text/event-stream", res)
	}
	return s
}

func (s *sseStream) read() {
	sc := bufio.NewScanner(s.resp.Body)
	for sc.Scan() {
		s.mu.Lock()
		s.lines = append(s.lines, sc.Text())
		s.mu.Unlock()
	}
	s.ended = time.Now()
	close(s.done)
}

// close closes the body and waits for the reader.
func (s *sseStream) close() {
	s.resp.Body.Close()
	<-s.done
}

func (s *sseStream) snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

func (s *sseStream) isOpen() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// wantEndWithin requires that the stream ends within d of since (the
// return of the call that should end it).
func (s *sseStream) wantEndWithin(t *testing.T, what string, since time.Time, d time.Duration) {
	t.Helper()
	timer := time.NewTimer(time.Until(since.Add(d)))
	defer timer.Stop()
	select {
	case <-s.done:
		if late := s.ended.Sub(since); late > d {
			t.Fatalf("%s: stream ended %v after the call returned, want within %v", what, late, d)
		}
	case <-timer.C:
		t.Fatalf("%s: stream still open %v after the call returned", what, d)
	}
}

// sseEvents splits a complete event-stream body into the JSON of each
// event's data; comments are dropped.
func sseEvents(t *testing.T, body []byte) []rpcAnswer {
	t.Helper()
	var out []rpcAnswer
	for _, block := range strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n") {
		var data []string
		for _, line := range strings.Split(block, "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(d, " "))
			}
		}
		if len(data) == 0 {
			continue
		}
		var a rpcAnswer
		if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &a); err != nil {
			t.Fatalf("event data %q: %v", data, err)
		}
		out = append(out, a)
	}
	return out
}

// mcpRecords returns the ids of the ownership records in the store.
func mcpRecords(t *testing.T, rt *mcpruntime.Runtime) []string {
	t.Helper()
	recs, err := rt.Store().Read().MCPSessions(nil)
	noErr(t, err)
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	slices.Sort(ids)
	return ids
}

// hasRecord reports whether the ownership record of sid exists.
func hasRecord(rt *mcpruntime.Runtime, sid string) bool {
	_, err := rt.Store().Read().MCPSession(nil, sid)
	return err == nil
}

// waitSessionGone polls until the ownership record of sid is removed.
func waitSessionGone(t *testing.T, rt *mcpruntime.Runtime, what, sid string) {
	t.Helper()
	waitUntil(t, what+": session record removed", func() bool { return !hasRecord(rt, sid) })
}

// blockingTool registers a read tool that reports its start, waits until
// its context is done and reports ctx.Err().
type blockingTool struct {
	started chan struct{}
	ctxErr  chan error
}

func registerBlockingTool(t *testing.T, rt *mcpruntime.Runtime, name string, progress bool) *blockingTool {
	t.Helper()
	b := &blockingTool{started: make(chan struct{}, 16), ctxErr: make(chan error, 16)}
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Name:   name,
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcpruntime.ToolResult, error) {
			if progress {
				call.Progress(1, 0, "started")
			}
			b.started <- struct{}{}
			<-ctx.Done()
			b.ctxErr <- ctx.Err()
			return nil, ctx.Err()
		},
	}))
	return b
}

// waitStarted waits until the tool runs.
func (b *blockingTool) waitStarted(t *testing.T, what string) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: tool never started", what)
	}
}

// wantCancelled requires that the tool saw its context cancelled.
func (b *blockingTool) wantCancelled(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-b.ctxErr:
		if err != context.Canceled {
			t.Fatalf("%s: tool ctx.Err() = %v, want context.Canceled", what, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: tool context not cancelled after 5s", what)
	}
}

// callBody is a tools/call of name with request id id.
func callBody(id, name string, progressToken string) string {
	meta := ""
	if progressToken != "" {
		meta = `,"_meta":{"progressToken":` + progressToken + `}`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + name + `","arguments":{}` + meta + `}}`
}

// pendingPost is a POST sent on its own goroutine.
type pendingPost struct {
	done chan struct{} // closed when res is set
	res  *httpResult   // nil if the request failed at the HTTP level
}

// asyncPost sends a POST on its own goroutine. A cleanup waits (bounded)
// for it to finish.
func (e *mcpEnv) asyncPost(tok, sid, body string) *pendingPost {
	e.t.Helper()
	req := e.newRequest(context.Background(), http.MethodPost, mcpHeaders(tok, sid), body)
	p := &pendingPost{done: make(chan struct{})}
	client := e.ts.Client()
	go func() {
		defer close(p.done)
		resp, err := client.Do(req)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			return
		}
		p.res = &httpResult{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	t := e.t
	t.Cleanup(func() {
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			t.Errorf("POST %s still pending at cleanup", body)
		}
	})
	return p
}

// await waits for the answer of an async POST.
func (p *pendingPost) await(t *testing.T, what string) *httpResult {
	t.Helper()
	select {
	case <-p.done:
		if p.res == nil {
			t.Fatalf("%s: request failed", what)
		}
		return p.res
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no answer after 5s", what)
	}
	return nil
}

// Package transporttest speaks MCP Streamable HTTP to an endpoint under
// test: well-formed requests and the checks of their answers, streams read
// line by line, requests held open byte by byte. The endpoint's own tests
// (transport, against a fake backend) and the module root's
// end-to-end tests (against a real runtime) share it.
package transporttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// HangAfter bounds every wait of these helpers for something that must
// happen. It only detects a hang: a correct endpoint is never near it,
// however busy the machine.
const HangAfter = time.Minute

// Client speaks to an MCP endpoint behind httptest.NewServer.
type Client struct {
	T   *testing.T
	TS  *httptest.Server
	URL string // the endpoint: TS.URL + "/mcp"
}

// New mounts h on an httptest server. Its cleanup closes h first if it has
// a Close method (an MCP endpoint: its sessions end, so open streams
// return), then the server.
func New(t *testing.T, h http.Handler) *Client {
	t.Helper()
	ts := httptest.NewServer(h)
	t.Cleanup(func() {
		if c, ok := h.(interface{ Close() }); ok {
			c.Close()
		}
		ts.Close()
	})
	return &Client{T: t, TS: ts, URL: ts.URL + "/mcp"}
}

// The request headers of a well-formed MCP request.
const (
	AcceptBoth      = "application/json, text/event-stream"
	AcceptSSE       = "text/event-stream"
	LatestVersion   = "2025-11-25"
	MadeUpSessionID = "mcps_0123456789abcdef0123456789abcdef"
)

// Headers returns the headers of a well-formed request: bearer token
// (none if tok is ""), session id (none if sid is ""), protocol version,
// Accept both types, JSON content type. Tests change them per case.
func Headers(tok, sid string) http.Header {
	h := http.Header{}
	if tok != "" {
		h.Set("Authorization", "Bearer "+tok)
	}
	if sid != "" {
		h.Set("Mcp-Session-Id", sid)
		h.Set("MCP-Protocol-Version", LatestVersion)
	}
	h.Set("Accept", AcceptBoth)
	h.Set("Content-Type", "application/json")
	return h
}

// GetHeaders is Headers for a GET: Accept the event stream only, no
// content type.
func GetHeaders(tok, sid string) http.Header {
	h := Headers(tok, sid)
	h.Set("Accept", AcceptSSE)
	h.Del("Content-Type")
	return h
}

// Result is a complete answer.
type Result struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r *Result) String() string {
	return fmt.Sprintf("%d %s", r.Status, bytes.TrimSpace(r.Body))
}

// RPC decodes the body as one JSON-RPC response.
func (r *Result) RPC(t *testing.T) Answer {
	t.Helper()
	var a Answer
	if err := json.Unmarshal(r.Body, &a); err != nil {
		t.Fatalf("answer %s: body is not a JSON-RPC message: %v", r, err)
	}
	return a
}

// Answer is one JSON-RPC message of an answer.
type Answer struct {
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

// ToolResult is the result of a tools/call.
type ToolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	IsError           bool            `json:"isError"`
	StructuredContent json.RawMessage `json:"structuredContent"`
}

// NewRequest builds a request to the endpoint with exactly the headers h;
// a "Host" entry sets the Host header.
func (e *Client) NewRequest(ctx context.Context, method string, h http.Header, body string) *http.Request {
	e.T.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, e.URL, rd)
	if err != nil {
		e.T.Fatalf("NewRequest: %v", err)
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

// Send sends a request and returns the open response; the caller closes
// its body (a cleanup closes it too).
func (e *Client) Send(req *http.Request) *http.Response {
	e.T.Helper()
	resp, err := e.TS.Client().Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	e.T.Cleanup(func() { resp.Body.Close() })
	return resp
}

// Do sends a request with exactly the headers h and reads the whole answer.
// A "Host" entry in h sets the Host header.
func (e *Client) Do(method string, h http.Header, body string) *Result {
	e.T.Helper()
	return e.DoURL(e.URL, method, h, body)
}

// DoURL is do against url (the endpoint with a query string, say).
func (e *Client) DoURL(url, method string, h http.Header, body string) *Result {
	e.T.Helper()
	req := e.NewRequest(context.Background(), method, h, body)
	if url != e.URL {
		u, err := req.URL.Parse(url)
		if err != nil {
			e.T.Fatal(err)
		}
		req.URL = u
	}
	resp := e.Send(req)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatalf("%s: read body: %v", method, err)
	}
	return &Result{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// Post sends a JSON-RPC message on session sid ("" for none) with the
// headers of a well-formed request.
func (e *Client) Post(tok, sid, body string) *Result {
	e.T.Helper()
	return e.Do(http.MethodPost, Headers(tok, sid), body)
}

// Del sends DELETE for session sid.
func (e *Client) Del(tok, sid string) *Result {
	e.T.Helper()
	h := Headers(tok, sid)
	h.Del("Content-Type")
	return e.Do(http.MethodDelete, h, "")
}

// InitBody is an initialize request asking for version.
func InitBody(version string) string {
	return `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"` + version +
		`","capabilities":{},"clientInfo":{"name":"http-test","version":"1"}}}`
}

// Bodies of well-formed messages.
const (
	PingBody          = `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	InitializedBody   = `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	ToolsListBody     = `{"jsonrpc":"2.0","id":4,"method":"tools/list"}`
	ServerDiscoverReq = `{"jsonrpc":"2.0","id":5,"method":"server/discover"}`
)

// Initialize creates a session for tok, requires 200 and an id of the
// documented shape, sends notifications/initialized (202) and returns the id.
func (e *Client) Initialize(tok string) string {
	e.T.Helper()
	res := e.Post(tok, "", InitBody(LatestVersion))
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || !ValidSessionID(sid) {
		e.T.Fatalf("initialize = %s, Mcp-Session-Id %q; want 200 and mcps_ + 32 hex", res, sid)
	}
	if got := e.Post(tok, sid, InitializedBody); got.Status != http.StatusAccepted {
		e.T.Fatalf("notifications/initialized = %s, want 202", got)
	}
	return sid
}

// ValidSessionID reports whether sid has the documented shape, mcps_ and
// 32 hex digits.
func ValidSessionID(sid string) bool {
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

// WantPing requires that tok can ping session sid.
func (e *Client) WantPing(what, tok, sid string) {
	e.T.Helper()
	res := e.Post(tok, sid, PingBody)
	if res.Status != http.StatusOK {
		e.T.Fatalf("%s: ping = %s, want 200", what, res)
	}
	if a := res.RPC(e.T); a.Error != nil || string(a.Result) != "{}" {
		e.T.Fatalf("%s: ping = %s, want result {}", what, res)
	}
}

// WantStatus requires an answer's status.
func WantStatus(t *testing.T, what string, res *Result, status int) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("%s = %s, want %d", what, res, status)
	}
}

// SameAsUnknown requires that got, an answer about a real session, cannot
// be told from want, the same request about a made-up id: status, body
// bytes and every header but Date.
func SameAsUnknown(t *testing.T, what string, got, want *Result) {
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

// Want401 requires a 401 with the given challenge and no-store.
func Want401(t *testing.T, what string, res *Result, challenge string) {
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

// InvalidToken is the challenge of a token that does not authenticate.
const InvalidToken = `Bearer error="invalid_token"`

// Stream is an open text/event-stream answer read line by line by a
// goroutine until it ends.
type Stream struct {
	Resp *http.Response

	mu    sync.Mutex // guards the fields below
	lines []string

	done chan struct{} // closed when the body ended (EOF or error)
}

// OpenStream sends GET with headers h and, on 200, starts reading the
// stream. It returns the answer's status; on anything but 200 the stream
// is nil and the body is returned in res.
func (e *Client) OpenStream(h http.Header) (*Stream, *Result) {
	e.T.Helper()
	return e.OpenSSE(e.NewRequest(context.Background(), http.MethodGet, h, ""))
}

// OpenSSE sends req; on 200 text/event-stream it returns the stream. It
// waits at most HangAfter for the answer's headers.
func (e *Client) OpenSSE(req *http.Request) (*Stream, *Result) {
	e.T.Helper()
	ctx, cancel := context.WithCancel(req.Context())
	e.T.Cleanup(cancel)
	req = req.WithContext(ctx)
	type answer struct {
		resp *http.Response
		err  error
	}
	ch := make(chan answer, 1)
	client := e.TS.Client()
	go func() {
		resp, err := client.Do(req)
		ch <- answer{resp, err}
	}()
	var resp *http.Response
	select {
	case a := <-ch:
		if a.err != nil {
			e.T.Fatalf("%s %s: %v", req.Method, req.URL, a.err)
		}
		resp = a.resp
		e.T.Cleanup(func() { resp.Body.Close() })
	case <-time.After(HangAfter):
		cancel()
		<-ch
		e.T.Fatalf("%s %s: no answer after %v", req.Method, req.URL, HangAfter)
	}
	res := &Result{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			e.T.Fatalf("%s: read body: %v", req.Method, err)
		}
		res.Body = b
		return nil, res
	}
	s := &Stream{Resp: resp, done: make(chan struct{})}
	go s.read()
	e.T.Cleanup(s.Close)
	return s, res
}

// Stream opens the standalone stream of sid and requires 200.
func (e *Client) Stream(tok, sid string) *Stream {
	e.T.Helper()
	s, res := e.OpenStream(GetHeaders(tok, sid))
	if s == nil {
		e.T.Fatalf("GET stream = %s, want 200 text/event-stream", res)
	}
	return s
}

func (s *Stream) read() {
	sc := bufio.NewScanner(s.Resp.Body)
	for sc.Scan() {
		s.mu.Lock()
		s.lines = append(s.lines, sc.Text())
		s.mu.Unlock()
	}
	close(s.done)
}

// Close closes the body and waits for the reader.
func (s *Stream) Close() {
	s.Resp.Body.Close()
	<-s.done
}

// Snapshot returns the lines read so far.
func (s *Stream) Snapshot() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// IsOpen reports whether the stream has not ended.
func (s *Stream) IsOpen() bool {
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

// WantEnd requires that the stream ends, with nothing more from the test:
// the call that should end it has returned. How soon is not measured (the
// server tells the stream inside that call: a revocation's commit hook
// calls the liveness monitor's watchers before the write returns, which
// internal/liveness's tests check); the wait only detects a hang.
func (s *Stream) WantEnd(t *testing.T, what string) {
	t.Helper()
	select {
	case <-s.done:
	case <-time.After(HangAfter):
		t.Fatalf("%s: stream still open %v after the call returned; it carried %q", what, HangAfter, s.Snapshot())
	}
}

// SSEEvents splits a complete event-stream body into the JSON of each
// event's data; comments, and events without data (a priming event, a
// retry field), are dropped.
func SSEEvents(t *testing.T, body []byte) []Answer {
	t.Helper()
	var out []Answer
	for _, block := range strings.Split(strings.ReplaceAll(string(body), "\r\n", "\n"), "\n\n") {
		var data []string
		for _, line := range strings.Split(block, "\n") {
			if d, ok := strings.CutPrefix(line, "data:"); ok {
				data = append(data, strings.TrimPrefix(d, " "))
			}
		}
		if len(data) == 0 || len(data) == 1 && data[0] == "" {
			continue
		}
		var a Answer
		if err := json.Unmarshal([]byte(strings.Join(data, "\n")), &a); err != nil {
			t.Fatalf("event data %q: %v", data, err)
		}
		out = append(out, a)
	}
	return out
}

// Blocking is a tool's body that reports its start, waits until its
// context is done and reports ctx.Err(): a call that stays in flight until
// something cancels it. Each package registers it with its own backend.
type Blocking struct {
	started chan struct{}
	ctxErr  chan error
	// released is closed when a wait gave up: the calls return then, so a
	// test that failed ends instead of hanging in its cleanup.
	released chan struct{}
	release  sync.Once
}

// NewBlocking returns a Blocking for up to 16 calls at once.
func NewBlocking() *Blocking {
	return &Blocking{started: make(chan struct{}, 16), ctxErr: make(chan error, 16), released: make(chan struct{})}
}

// giveUp releases every call: a wait for one failed.
func (b *Blocking) giveUp() { b.release.Do(func() { close(b.released) }) }

// Run is the tool's body: progress, if not nil, is reported first.
func (b *Blocking) Run(ctx context.Context, progress func(done, total float64, message string)) error {
	if progress != nil {
		progress(1, 0, "started")
	}
	b.started <- struct{}{}
	select {
	case <-ctx.Done():
	case <-b.released:
		return errors.New("released: the test gave up waiting")
	}
	b.ctxErr <- ctx.Err()
	return ctx.Err()
}

// WaitStarted waits until the tool runs.
func (b *Blocking) WaitStarted(t *testing.T, what string) {
	t.Helper()
	select {
	case <-b.started:
	case <-time.After(HangAfter):
		b.giveUp()
		t.Fatalf("%s: tool never started", what)
	}
}

// WantCancelled requires that the tool saw its context cancelled.
func (b *Blocking) WantCancelled(t *testing.T, what string) {
	t.Helper()
	select {
	case err := <-b.ctxErr:
		if err != context.Canceled {
			t.Fatalf("%s: tool ctx.Err() = %v, want context.Canceled", what, err)
		}
	case <-time.After(HangAfter):
		b.giveUp()
		t.Fatalf("%s: tool context not cancelled after %v", what, HangAfter)
	}
}

// CallBody is a tools/call of name with request id id.
func CallBody(id, name string, progressToken string) string {
	meta := ""
	if progressToken != "" {
		meta = `,"_meta":{"progressToken":` + progressToken + `}`
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"` + name + `","arguments":{}` + meta + `}}`
}

// Pending is a POST sent on its own goroutine.
type Pending struct {
	done chan struct{} // closed when res is set
	res  *Result       // nil if the request failed at the HTTP level
}

// AsyncPost sends a POST on its own goroutine. A cleanup waits (bounded)
// for it to finish.
func (e *Client) AsyncPost(tok, sid, body string) *Pending {
	e.T.Helper()
	return e.AsyncSend(e.NewRequest(context.Background(), http.MethodPost, Headers(tok, sid), body))
}

// AsyncSend sends req on its own goroutine. A cleanup waits (bounded) for
// it to finish.
func (e *Client) AsyncSend(req *http.Request) *Pending {
	e.T.Helper()
	p := &Pending{done: make(chan struct{})}
	client := e.TS.Client()
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
		p.res = &Result{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	t := e.T
	t.Cleanup(func() {
		select {
		case <-p.done:
		case <-time.After(HangAfter):
			t.Errorf("%s %s still pending at cleanup", req.Method, req.URL)
		}
	})
	return p
}

// Await waits for the answer of an async POST.
func (p *Pending) Await(t *testing.T, what string) *Result {
	t.Helper()
	select {
	case <-p.done:
		if p.res == nil {
			t.Fatalf("%s: request failed", what)
		}
		return p.res
	case <-time.After(HangAfter):
		t.Fatalf("%s: no answer after %v", what, HangAfter)
	}
	return nil
}

// SSEEvent is one event of an event stream as sent: its id, retry field
// and data ("" for none: a priming event).
type SSEEvent struct {
	ID, Retry, Data string
}

// ParseSSE splits an event stream into its events; comments are dropped,
// and so are blocks with neither an id nor data.
func ParseSSE(body string) []SSEEvent {
	var out []SSEEvent
	for _, block := range strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n\n") {
		var ev SSEEvent
		var data []string
		hasID := false
		for _, line := range strings.Split(block, "\n") {
			field, value, _ := strings.Cut(line, ":")
			value = strings.TrimPrefix(value, " ")
			switch field {
			case "id":
				ev.ID, hasID = value, true
			case "retry":
				ev.Retry = value
			case "data":
				data = append(data, value)
			}
		}
		if !hasID && len(data) == 0 {
			continue
		}
		ev.Data = strings.Join(data, "\n")
		out = append(out, ev)
	}
	return out
}

// Events returns the events the stream carried so far.
func (s *Stream) Events() []SSEEvent {
	return ParseSSE(strings.Join(s.Snapshot(), "\n"))
}

// ResumeHeaders is GetHeaders with a Last-Event-ID.
func ResumeHeaders(tok, sid, lastEventID string) http.Header {
	h := GetHeaders(tok, sid)
	h.Set("Last-Event-ID", lastEventID)
	return h
}

// StreamWith sends GET with headers h and requires 200 text/event-stream.
func (e *Client) StreamWith(h http.Header) *Stream {
	e.T.Helper()
	s, res := e.OpenStream(h)
	if s == nil {
		e.T.Fatalf("GET stream = %s, want 200 text/event-stream", res)
	}
	return s
}

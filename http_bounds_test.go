package mcpruntime_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
	"github.com/agenthost/mcpruntime/memdb"
)

// heldPost is a POST written by hand on a connection of its own: its
// headers and the first part of its body are sent, the rest when the test
// says. It is how a slow client holds a request open.
type heldPost struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	rest string // body bytes not sent yet
}

// connBound bounds every read and write of a held POST's connection, so a
// test that goes wrong fails instead of hanging; no assertion depends on it.
const connBound = 10 * time.Second

// holdPost sends the headers h (Content-Length: len(body)) and all of body
// but its last unsent bytes. unsent 0 sends the whole body.
func (e *mcpEnv) holdPost(h http.Header, body string, unsent int) *heldPost {
	e.t.Helper()
	p := e.dialPost(h, fmt.Sprintf("Content-Length: %d\r\n", len(body)))
	p.rest = body[len(body)-unsent:]
	p.write(body[:len(body)-unsent])
	return p
}

// holdChunked sends the headers h with a chunked body, and first as its
// first chunk; finish sends the terminating chunk.
func (e *mcpEnv) holdChunked(h http.Header, first string) *heldPost {
	e.t.Helper()
	p := e.dialPost(h, "Transfer-Encoding: chunked\r\n")
	p.write(fmt.Sprintf("%x\r\n%s\r\n", len(first), first))
	p.rest = "0\r\n\r\n"
	return p
}

func (e *mcpEnv) dialPost(h http.Header, framing string) *heldPost {
	e.t.Helper()
	conn, err := net.Dial("tcp", e.ts.Listener.Addr().String())
	if err != nil {
		e.t.Fatalf("dial: %v", err)
	}
	e.t.Cleanup(func() { conn.Close() })
	var b strings.Builder
	fmt.Fprintf(&b, "POST /mcp HTTP/1.1\r\nHost: %s\r\n", e.ts.Listener.Addr())
	for k, vs := range h {
		for _, v := range vs {
			fmt.Fprintf(&b, "%s: %s\r\n", k, v)
		}
	}
	b.WriteString(framing + "\r\n")
	p := &heldPost{t: e.t, conn: conn, br: bufio.NewReader(conn)}
	p.write(b.String())
	return p
}

func (p *heldPost) write(s string) {
	p.t.Helper()
	p.conn.SetWriteDeadline(time.Now().Add(connBound))
	if _, err := io.WriteString(p.conn, s); err != nil {
		p.t.Fatalf("write held POST: %v", err)
	}
}

// finish sends the rest of the body and reads the answer.
func (p *heldPost) finish() *httpResult {
	p.t.Helper()
	p.write(p.rest)
	return p.answer()
}

// answer reads the answer without sending anything more.
func (p *heldPost) answer() *httpResult {
	p.t.Helper()
	res := p.read()
	if res == nil {
		p.t.Fatal("held POST: no answer")
	}
	return res
}

// read reads the answer; nil if there is none (the connection failed).
// It may run on any goroutine.
func (p *heldPost) read() *httpResult {
	p.conn.SetReadDeadline(time.Now().Add(connBound))
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		return nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil
	}
	return &httpResult{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// wantClosed requires that the server closed the connection: a read ends
// (EOF, or a reset if it had bytes of ours unread), and does not time out.
func (p *heldPost) wantClosed(what string) {
	p.t.Helper()
	p.conn.SetReadDeadline(time.Now().Add(connBound))
	b, err := p.br.ReadByte()
	var netErr net.Error
	switch {
	case err == nil:
		p.t.Fatalf("%s: connection still open: read %q", what, b)
	case errors.As(err, &netErr) && netErr.Timeout():
		p.t.Fatalf("%s: connection still open after %v", what, connBound)
	}
}

// awaitIndex receives from ch, bounded.
func awaitIndex(t *testing.T, what string, ch <-chan int) int {
	t.Helper()
	select {
	case i := <-ch:
		return i
	case <-time.After(connBound):
		t.Fatalf("%s: none after %v", what, connBound)
	}
	return -1
}

// waitInFlight waits until the endpoint holds exactly want.
func (e *mcpEnv) waitInFlight(what string, want mcphttp.InFlight) {
	e.t.Helper()
	var got mcphttp.InFlight
	deadline := time.Now().Add(5 * time.Second)
	for got = mcpruntime.EndpointInFlight(e.srv); got != want; got = mcpruntime.EndpointInFlight(e.srv) {
		if time.Now().After(deadline) {
			e.t.Fatalf("%s: in flight %+v, want %+v", what, got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// padded is a ping whose body is exactly n bytes.
func padded(n int) string {
	return pingBody + strings.Repeat(" ", n-len(pingBody))
}

// wantRetryLater requires status with a Retry-After of secs.
func wantRetryLater(t *testing.T, what string, res *httpResult, status int, secs string) {
	t.Helper()
	wantStatus(t, what, res, status)
	wantHeader("Retry-After", secs)(t, res)
	wantErrorWithoutID(t, what, res)
}

// TestHTTPBoundsRequestsPerNamespace: of concurrent POSTs whose bodies are
// held open, exactly MaxRequestsPerNamespace are admitted and the rest get
// 429 + Retry-After at once; another namespace is not affected; the slots
// come back when the requests complete.
func TestHTTPBoundsRequestsPerNamespace(t *testing.T) {
	const limit, extra = 5, 3
	rt, tok, other := twoCredentials(t)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxRequestsPerNamespace: limit, RetryAfter: 2 * time.Second})
	sid, otherSid := e.initialize(tok), e.initialize(other)

	held := make([]*heldPost, limit+extra)
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() { held[i] = e.holdPost(mcpHeaders(tok, sid), pingBody, 1) })
	}
	wg.Wait()
	// Every held POST's answer is read as it comes. The refused ones are
	// answered without their last byte; the admitted ones cannot be until
	// it is sent.
	answered := make(chan int, len(held))
	results := make([]*httpResult, len(held))
	for i, p := range held {
		go func() {
			results[i] = p.read()
			answered <- i
		}()
	}
	refused := map[int]bool{}
	for range extra {
		i := awaitIndex(t, "a refused request's answer", answered)
		refused[i] = true
		wantRetryLater(t, "request past the namespace's limit", results[i], http.StatusTooManyRequests, "2")
	}
	e.waitInFlight("held bodies", mcphttp.InFlight{Requests: limit, BodyBytes: limit * int64(len(pingBody))})
	wantRetryLater(t, "one more", e.post(tok, sid, pingBody), http.StatusTooManyRequests, "2")
	e.wantPing("another namespace", other, otherSid)

	for i, p := range held {
		if !refused[i] {
			p.write(p.rest)
		}
	}
	for range limit {
		i := awaitIndex(t, "an admitted request's answer", answered)
		if res := results[i]; refused[i] || res == nil || res.Status != http.StatusOK || res.rpc(t).Error != nil {
			t.Fatalf("held ping %d = %v, want 200", i, res)
		}
	}
	e.waitInFlight("after completion", mcphttp.InFlight{})
	for range limit + 1 {
		e.wantPing("after the held requests completed", tok, sid)
	}
}

// TestHTTPBoundsRequestsGlobal: past MaxRequests in flight in all, a POST
// of any namespace gets 503 + Retry-After.
func TestHTTPBoundsRequestsGlobal(t *testing.T) {
	rt, tok, other := twoCredentials(t)
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxRequests: 4})
	sid, otherSid, clientSid := e.initialize(tok), e.initialize(other), e.initialize(ct.Token)

	held := []*heldPost{
		e.holdPost(mcpHeaders(tok, sid), pingBody, 1),
		e.holdPost(mcpHeaders(tok, sid), pingBody, 1),
		e.holdPost(mcpHeaders(other, otherSid), pingBody, 1),
		e.holdPost(mcpHeaders(other, otherSid), pingBody, 1),
	}
	e.waitInFlight("four held", mcphttp.InFlight{Requests: 4, BodyBytes: 4 * int64(len(pingBody))})
	wantRetryLater(t, "a third namespace", e.post(ct.Token, clientSid, pingBody), http.StatusServiceUnavailable, "1")
	wantRetryLater(t, "initialize", e.post(ct.Token, "", initBody(latestVersion)), http.StatusServiceUnavailable, "1")
	held[0].finish()
	e.waitInFlight("one done", mcphttp.InFlight{Requests: 3, BodyBytes: 3 * int64(len(pingBody))})
	e.wantPing("with a slot free", ct.Token, clientSid)
}

// TestHTTPBoundsBodyBudget: the bytes of bodies held at once never exceed
// MaxBodyBytesInFlight: a declared length is reserved before reading, a
// chunked body as it grows; one byte over gets 503 + Retry-After, exactly
// the rest fits, and completed requests give their bytes back.
func TestHTTPBoundsBodyBudget(t *testing.T) {
	const budget = 2500
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxBodyBytes: 1000, MaxBodyBytesInFlight: budget})
	sid := e.initialize(tok)

	// A chunked body of 600 bytes: 512 reserved, then the buffer grows to
	// the limit + 1 (the most it may hold to see it is too large).
	chunked := e.holdChunked(mcpHeaders(tok, sid), padded(600))
	e.waitInFlight("chunked body", mcphttp.InFlight{Requests: 1, BodyBytes: 1001})
	sized := e.holdPost(mcpHeaders(tok, sid), padded(1000), 1)
	e.waitInFlight("and a sized one", mcphttp.InFlight{Requests: 2, BodyBytes: 2001})

	wantRetryLater(t, "one byte over the budget", e.post(tok, sid, padded(budget-2001+1)), http.StatusServiceUnavailable, "1")
	e.wantPing("a small body still fits", tok, sid)
	if res := e.post(tok, sid, padded(budget-2001)); res.Status != http.StatusOK {
		t.Fatalf("a body that fills the budget exactly = %s, want 200", res)
	}
	e.waitInFlight("after them", mcphttp.InFlight{Requests: 2, BodyBytes: 2001})

	if res := chunked.finish(); res.Status != http.StatusOK {
		t.Fatalf("chunked ping = %s, want 200", res)
	}
	e.waitInFlight("chunked done", mcphttp.InFlight{Requests: 1, BodyBytes: 1000})
	if res := e.post(tok, sid, padded(1000)); res.Status != http.StatusOK {
		t.Fatalf("a 1000-byte body once the chunked one is done = %s, want 200", res)
	}
	if res := sized.finish(); res.Status != http.StatusOK {
		t.Fatalf("sized ping = %s, want 200", res)
	}
	e.waitInFlight("all done", mcphttp.InFlight{})

	// Over the per-body limit: a declared length is refused before it is
	// read, a chunked body once it passes the limit.
	wantStatus(t, "declared over the limit", e.post(tok, sid, padded(1001)), http.StatusRequestEntityTooLarge)
	big := e.holdChunked(mcpHeaders(tok, sid), padded(1001))
	wantStatus(t, "chunked over the limit", big.answer(), http.StatusRequestEntityTooLarge)
	e.waitInFlight("refused bodies", mcphttp.InFlight{})
}

// TestHTTPBoundsReleased: a request's slot and body bytes come back however
// it ends: the client goes away mid-body, its tool panics, its body misses
// the deadline (408, connection closed, never served).
func TestHTTPBoundsReleased(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	var calls atomic.Int64
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Name: "count", Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcpruntime.ToolResult, error) {
			calls.Add(1)
			return &mcpruntime.ToolResult{Text: "counted"}, nil
		}}))
	noErr(t, rt.RegisterTool(mcpruntime.Tool{Name: "panics", Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.ToolCall) (*mcpruntime.ToolResult, error) { panic("tool bug") }}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxRequestsPerNamespace: 2, BodyTimeout: 200 * time.Millisecond})
	sid := e.initialize(tok)
	countCall := callBody("7", "count", "")

	t.Run("client gone", func(t *testing.T) {
		p := e.holdPost(mcpHeaders(tok, sid), countCall, 1)
		e.waitInFlight("held", mcphttp.InFlight{Requests: 1, BodyBytes: int64(len(countCall))})
		p.conn.Close()
		e.waitInFlight("client gone", mcphttp.InFlight{})
	})
	t.Run("panic", func(t *testing.T) {
		res := e.post(tok, sid, callBody("8", "panics", ""))
		wantStatus(t, "panicking tool", res, http.StatusInternalServerError)
		e.waitInFlight("after the panic", mcphttp.InFlight{})
	})
	t.Run("deadline", func(t *testing.T) {
		p := e.holdPost(mcpHeaders(tok, sid), countCall, 1)
		res := p.answer()
		wantStatus(t, "body past its deadline", res, http.StatusRequestTimeout)
		wantErrorWithoutID(t, "408", res)
		e.waitInFlight("after the deadline", mcphttp.InFlight{})
		// The last byte, once the connection is closed, serves nothing.
		p.conn.SetWriteDeadline(time.Now().Add(connBound))
		io.WriteString(p.conn, p.rest)
		p.wantClosed("after 408")
	})
	t.Run("trickled", func(t *testing.T) {
		// One byte at a time, each well within the deadline; the whole body
		// would take 50 times the deadline. The deadline is the body's, not
		// an idle timeout: it still ends at 408.
		call := callBody("9", "count", "")
		p := e.holdPost(mcpHeaders(tok, sid), call+strings.Repeat(" ", 500), 500)
		answered := make(chan *httpResult, 1)
		go func() { answered <- p.read() }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var res *httpResult
	trickle:
		for i := 0; ; i++ {
			select {
			case res = <-answered:
				break trickle
			case <-tick.C:
				if i < len(p.rest) {
					p.conn.SetWriteDeadline(time.Now().Add(connBound))
					io.WriteString(p.conn, p.rest[i:i+1]) // fails once the server closed it
				}
			}
		}
		if res == nil || res.Status != http.StatusRequestTimeout {
			t.Fatalf("trickled body = %v, want 408", res)
		}
		e.waitInFlight("after the trickle", mcphttp.InFlight{})
	})
	if n := calls.Load(); n != 0 {
		t.Fatalf("the count tool ran %d times; no body that missed its deadline may be served", n)
	}
}

// TestHTTPBoundsRefusalsDoNotWaitForBody: a POST refused on its headers
// (SPEC §5 steps 1–4) is answered while its body is still unsent, and its
// connection is closed: the body of an unauthenticated or refused caller is
// never read, not even to be discarded.
func TestHTTPBoundsRefusalsDoNotWaitForBody(t *testing.T) {
	rt, tok, other := twoCredentials(t)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxBodyBytes: 1000})
	sid := e.initialize(tok)
	body := padded(900)
	tests := []struct {
		name string
		h    http.Header
		body string
		want int
	}{
		{"no token", mcpHeaders("", sid), body, http.StatusUnauthorized},
		{"unknown token", mcpHeaders("mcprt_nope", sid), body, http.StatusUnauthorized},
		{"foreign session", mcpHeaders(other, sid), body, http.StatusNotFound},
		{"evil origin", func() http.Header { h := mcpHeaders(tok, sid); h.Set("Origin", "https://evil.example"); return h }(), body, http.StatusForbidden},
		{"content type", func() http.Header { h := mcpHeaders(tok, sid); h.Set("Content-Type", "text/plain"); return h }(), body, http.StatusUnsupportedMediaType},
		{"declared over the limit", mcpHeaders(tok, sid), padded(1001), http.StatusRequestEntityTooLarge},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			p := e.holdPost(test.h, test.body, len(test.body)-1) // one byte of the body sent
			wantStatus(t, test.name, p.answer(), test.want)
			p.wantClosed("after the answer")
		})
	}
	e.waitInFlight("nothing held", mcphttp.InFlight{})
}

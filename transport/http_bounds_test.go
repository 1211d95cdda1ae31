package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPBoundsRequestsPerNamespace: of concurrent POSTs whose bodies are
// held open, exactly MaxRequestsPerNamespace are admitted and the rest get
// 429 + Retry-After at once; another namespace is not affected; the slots
// come back when the requests complete.
func TestHTTPBoundsRequestsPerNamespace(t *testing.T) {
	const limit, extra = 5, 3
	f, tok, other := twoCredentials(t)
	e := newMCPEnv(t, f, transport.Options{MaxRequestsPerNamespace: limit, RetryAfter: 2 * time.Second})
	sid, otherSid := e.Initialize(tok), e.Initialize(other)

	held := make([]*ht.Held, limit+extra)
	var wg sync.WaitGroup
	for i := range held {
		wg.Go(func() { held[i] = e.HoldPost(ht.Headers(tok, sid), ht.PingBody, 1) })
	}
	wg.Wait()
	// Every held POST's answer is read as it comes. The refused ones are
	// answered without their last byte; the admitted ones cannot be until
	// it is sent.
	answered := make(chan int, len(held))
	results := make([]*ht.Result, len(held))
	for i, p := range held {
		go func() {
			results[i] = p.Read()
			answered <- i
		}()
	}
	refused := map[int]bool{}
	for range extra {
		i := ht.AwaitIndex(t, "a refused request's answer", answered)
		refused[i] = true
		ht.WantRetryLater(t, "request past the namespace's limit", results[i], http.StatusTooManyRequests, "2")
	}
	e.waitInFlight("held bodies", transport.InFlight{Requests: limit, BodyBytes: limit * int64(len(ht.PingBody))})
	ht.WantRetryLater(t, "one more", e.Post(tok, sid, ht.PingBody), http.StatusTooManyRequests, "2")
	e.WantPing("another namespace", other, otherSid)

	for i, p := range held {
		if !refused[i] {
			p.Write(p.Rest)
		}
	}
	for range limit {
		i := ht.AwaitIndex(t, "an admitted request's answer", answered)
		if res := results[i]; refused[i] || res == nil || res.Status != http.StatusOK || res.RPC(t).Error != nil {
			t.Fatalf("held ping %d = %v, want 200", i, res)
		}
	}
	e.waitInFlight("after completion", transport.InFlight{})
	for range limit + 1 {
		e.WantPing("after the held requests completed", tok, sid)
	}
}

// TestHTTPBoundsRequestsGlobal: past MaxRequests in flight in all, a POST
// of any namespace gets 503 + Retry-After.
func TestHTTPBoundsRequestsGlobal(t *testing.T) {
	f, tok, other := twoCredentials(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, transport.Options{MaxRequests: 4})
	sid, otherSid, clientSid := e.Initialize(tok), e.Initialize(other), e.Initialize(ct.Token)

	held := []*ht.Held{
		e.HoldPost(ht.Headers(tok, sid), ht.PingBody, 1),
		e.HoldPost(ht.Headers(tok, sid), ht.PingBody, 1),
		e.HoldPost(ht.Headers(other, otherSid), ht.PingBody, 1),
		e.HoldPost(ht.Headers(other, otherSid), ht.PingBody, 1),
	}
	e.waitInFlight("four held", transport.InFlight{Requests: 4, BodyBytes: 4 * int64(len(ht.PingBody))})
	ht.WantRetryLater(t, "a third namespace", e.Post(ct.Token, clientSid, ht.PingBody), http.StatusServiceUnavailable, "1")
	ht.WantRetryLater(t, "initialize", e.Post(ct.Token, "", ht.InitBody(ht.LatestVersion)), http.StatusServiceUnavailable, "1")
	held[0].Finish()
	e.waitInFlight("one done", transport.InFlight{Requests: 3, BodyBytes: 3 * int64(len(ht.PingBody))})
	e.WantPing("with a slot free", ct.Token, clientSid)
}

// TestHTTPBoundsBodyBudget: the bytes of bodies held at once never exceed
// MaxBodyBytesInFlight: a declared length is reserved before reading, a
// chunked body as it grows; one byte over gets 503 + Retry-After, exactly
// the rest fits, and completed requests give their bytes back.
func TestHTTPBoundsBodyBudget(t *testing.T) {
	const budget = 2500
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{MaxBodyBytes: 1000, MaxBodyBytesInFlight: budget})
	sid := e.Initialize(tok)

	// A chunked body of 600 bytes: 512 reserved, then the buffer grows to
	// the limit + 1 (the most it may hold to see it is too large).
	chunked := e.HoldChunked(ht.Headers(tok, sid), ht.Padded(600))
	e.waitInFlight("chunked body", transport.InFlight{Requests: 1, BodyBytes: 1001})
	sized := e.HoldPost(ht.Headers(tok, sid), ht.Padded(1000), 1)
	e.waitInFlight("and a sized one", transport.InFlight{Requests: 2, BodyBytes: 2001})

	ht.WantRetryLater(t, "one byte over the budget", e.Post(tok, sid, ht.Padded(budget-2001+1)), http.StatusServiceUnavailable, "1")
	e.WantPing("a small body still fits", tok, sid)
	if res := e.Post(tok, sid, ht.Padded(budget-2001)); res.Status != http.StatusOK {
		t.Fatalf("a body that fills the budget exactly = %s, want 200", res)
	}
	e.waitInFlight("after them", transport.InFlight{Requests: 2, BodyBytes: 2001})

	if res := chunked.Finish(); res.Status != http.StatusOK {
		t.Fatalf("chunked ping = %s, want 200", res)
	}
	e.waitInFlight("chunked done", transport.InFlight{Requests: 1, BodyBytes: 1000})
	if res := e.Post(tok, sid, ht.Padded(1000)); res.Status != http.StatusOK {
		t.Fatalf("a 1000-byte body once the chunked one is done = %s, want 200", res)
	}
	if res := sized.Finish(); res.Status != http.StatusOK {
		t.Fatalf("sized ping = %s, want 200", res)
	}
	e.waitInFlight("all done", transport.InFlight{})

	// Over the per-body limit: a declared length is refused before it is
	// read, a chunked body once it passes the limit.
	ht.WantStatus(t, "declared over the limit", e.Post(tok, sid, ht.Padded(1001)), http.StatusRequestEntityTooLarge)
	big := e.HoldChunked(ht.Headers(tok, sid), ht.Padded(1001))
	ht.WantStatus(t, "chunked over the limit", big.Answer(), http.StatusRequestEntityTooLarge)
	e.waitInFlight("refused bodies", transport.InFlight{})
}

// TestHTTPBoundsReleased: a request's slot and body bytes come back however
// it ends: the client goes away mid-body, its tool panics, its body misses
// the deadline (408, connection closed, never served).
func TestHTTPBoundsReleased(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	var calls atomic.Int64
	f.tool("count", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
		calls.Add(1)
		return textResult("counted"), nil
	})
	f.tool("panics", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
		panic("tool bug")
	})
	e := newMCPEnv(t, f, transport.Options{MaxRequestsPerNamespace: 2, BodyTimeout: 200 * time.Millisecond})
	sid := e.Initialize(tok)
	countCall := ht.CallBody("7", "count", "")

	t.Run("client gone", func(t *testing.T) {
		// An endpoint of its own, with the default body deadline: the test
		// sees the body held before the client goes, however long that
		// takes on a busy machine (at 200 ms the deadline could end it
		// first, and "held" was never seen).
		e := newMCPEnv(t, f, transport.Options{MaxRequestsPerNamespace: 2})
		sid := e.Initialize(tok)
		p := e.HoldPost(ht.Headers(tok, sid), countCall, 1)
		e.waitInFlight("held", transport.InFlight{Requests: 1, BodyBytes: int64(len(countCall))})
		p.Conn.Close()
		e.waitInFlight("client gone", transport.InFlight{})
	})
	t.Run("panic", func(t *testing.T) {
		res := e.Post(tok, sid, ht.CallBody("8", "panics", ""))
		ht.WantStatus(t, "panicking tool", res, http.StatusInternalServerError)
		e.waitInFlight("after the panic", transport.InFlight{})
	})
	t.Run("deadline", func(t *testing.T) {
		p := e.HoldPost(ht.Headers(tok, sid), countCall, 1)
		res := p.Answer()
		ht.WantStatus(t, "body past its deadline", res, http.StatusRequestTimeout)
		ht.WantErrorWithoutID(t, "408", res)
		e.waitInFlight("after the deadline", transport.InFlight{})
		// The last byte, once the connection is closed, serves nothing.
		p.Conn.SetWriteDeadline(time.Now().Add(ht.ConnBound))
		io.WriteString(p.Conn, p.Rest)
		p.WantClosed("after 408")
	})
	t.Run("trickled", func(t *testing.T) {
		// One byte at a time, each well within the deadline; the whole body
		// would take 50 times the deadline. The deadline is the body's, not
		// an idle timeout: it still ends at 408.
		call := ht.CallBody("9", "count", "")
		p := e.HoldPost(ht.Headers(tok, sid), call+strings.Repeat(" ", 500), 500)
		answered := make(chan *ht.Result, 1)
		go func() { answered <- p.Read() }()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		var res *ht.Result
	trickle:
		for i := 0; ; i++ {
			select {
			case res = <-answered:
				break trickle
			case <-tick.C:
				if i < len(p.Rest) {
					p.Conn.SetWriteDeadline(time.Now().Add(ht.ConnBound))
					io.WriteString(p.Conn, p.Rest[i:i+1]) // fails once the server closed it
				}
			}
		}
		if res == nil || res.Status != http.StatusRequestTimeout {
			t.Fatalf("trickled body = %v, want 408", res)
		}
		e.waitInFlight("after the trickle", transport.InFlight{})
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
	f, tok, other := twoCredentials(t)
	e := newMCPEnv(t, f, transport.Options{MaxBodyBytes: 1000})
	sid := e.Initialize(tok)
	body := ht.Padded(900)
	tests := []struct {
		name string
		h    http.Header
		body string
		want int
	}{
		{"no token", ht.Headers("", sid), body, http.StatusUnauthorized},
		{"unknown token", ht.Headers("mcprt_nope", sid), body, http.StatusUnauthorized},
		{"foreign session", ht.Headers(other, sid), body, http.StatusNotFound},
		{"evil origin", func() http.Header { h := ht.Headers(tok, sid); h.Set("Origin", "https://evil.example"); return h }(), body, http.StatusForbidden},
		{"content type", func() http.Header { h := ht.Headers(tok, sid); h.Set("Content-Type", "text/plain"); return h }(), body, http.StatusUnsupportedMediaType},
		{"declared over the limit", ht.Headers(tok, sid), ht.Padded(1001), http.StatusRequestEntityTooLarge},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			p := e.HoldPost(test.h, test.body, len(test.body)-1) // one byte of the body sent
			ht.WantStatus(t, test.name, p.Answer(), test.want)
			p.WantClosed("after the answer")
		})
	}
	e.waitInFlight("nothing held", transport.InFlight{})
}

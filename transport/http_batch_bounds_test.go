package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// gate is a tool that counts its calls running at once and the most ever
// seen, reports each start, and blocks until the test opens it (or its
// context ends).
type gate struct {
	running, peak atomic.Int64
	started       chan struct{}
	open          chan struct{}
	once          sync.Once
}

// newGate registers a gate as the tool name of f; the test's cleanup opens
// it, so no call outlives the test.
func newGate(t *testing.T, f *fake, name string) *gate {
	g := &gate{started: make(chan struct{}, 1024), open: make(chan struct{})}
	t.Cleanup(g.release)
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		n := g.running.Add(1)
		defer g.running.Add(-1)
		for {
			p := g.peak.Load()
			if n <= p || g.peak.CompareAndSwap(p, n) {
				break
			}
		}
		g.started <- struct{}{}
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return textResult("done"), nil
	})
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

// waitStarted waits for n more starts of the gate's calls.
func (g *gate) waitStarted(t *testing.T, what string, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-g.started:
		case <-time.After(ht.HangAfter):
			g.release()
			t.Fatalf("%s: %d of %d calls started after %v", what, i, n, ht.HangAfter)
		}
	}
}

// slowBatch is a JSON-RPC batch of n tools/call of tool, ids prefix-0 to
// prefix-(n-1).
func slowBatch(prefix, tool string, n int) string {
	calls := make([]string, n)
	for i := range calls {
		calls[i] = ht.CallBody(fmt.Sprintf(`"%s-%d"`, prefix, i), tool, "")
	}
	return "[" + strings.Join(calls, ",") + "]"
}

// postAsync sends a POST of body on session sid on its own goroutine; its
// answer (nil if the request failed at the HTTP level) comes on the
// channel.
func postAsync(e *mcpEnv, tok, sid, body string) <-chan *ht.Result {
	ch := make(chan *ht.Result, 1)
	req := e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), body)
	client := e.TS.Client()
	go func() {
		resp, err := client.Do(req)
		if err != nil {
			ch <- nil
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			ch <- nil
			return
		}
		ch <- &ht.Result{Status: resp.StatusCode, Header: resp.Header, Body: b}
	}()
	return ch
}

// wantRefusedWhole requires that the answer on ch comes while none of the
// gate's calls starts (the batch's requests did not run), and that it is
// status + Retry-After secs, without an id.
func wantRefusedWhole(t *testing.T, what string, g *gate, ch <-chan *ht.Result, status int, secs string) {
	t.Helper()
	select {
	case res := <-ch:
		if res == nil {
			t.Fatalf("%s: request failed", what)
		}
		ht.WantRetryLater(t, what, res, status, secs)
	case <-g.started:
		g.release()
		t.Fatalf("%s: a call of it ran, %d running at once (the batch was admitted past the bound)", what, g.running.Load())
	case <-time.After(ht.HangAfter):
		g.release()
		t.Fatalf("%s: no answer after %v", what, ht.HangAfter)
	}
}

// awaitResult waits for the answer on ch.
func awaitResult(t *testing.T, what string, ch <-chan *ht.Result) *ht.Result {
	t.Helper()
	select {
	case res := <-ch:
		if res == nil {
			t.Fatalf("%s: request failed", what)
		}
		return res
	case <-time.After(ht.HangAfter):
		t.Fatalf("%s: no answer after %v", what, ht.HangAfter)
	}
	return nil
}

// wantResults requires a batch's answer of n tool results.
func wantResults(t *testing.T, what string, res *ht.Result, n int) {
	t.Helper()
	got := batchAnswers(t, res)
	if len(got) != n {
		t.Fatalf("%s: %d responses, want %d", what, len(got), n)
	}
	for i, a := range got {
		if a.Error != nil || a.Result == nil {
			t.Fatalf("%s: response %d = %+v, want a result", what, i, a)
		}
	}
}

// TestHTTPBatchRequestsPerNamespace: every request of a batch counts
// against MaxRequestsPerNamespace (issue 24 row 1, at a bound of 8). A
// batch whose requests do not all fit is refused whole, before any of
// them runs, with the 429 + Retry-After a single request gets, and the
// refused-requests metric counts each of its requests; a batch that fits
// exactly runs; past the bound a single ping, and a batch of notifications
// only, are 429 too (the POST's own slot); another namespace is not
// affected; a batch of more requests than the bound could ever hold is 400
// -32600, not a retry; the slots come back when the batches end.
func TestHTTPBatchRequestsPerNamespace(t *testing.T) {
	const limit = 8
	f, tok, other := twoCredentials(t)
	obs := newCountObserver()
	e := newMCPEnv(t, f, transport.Options{MaxRequestsPerNamespace: limit, RetryAfter: 2 * time.Second, Observer: obs})
	g := newGate(t, f, "slow")
	sid := initializeAt(t, e, tok, "2025-03-26")
	otherSid := initializeAt(t, e, other, "2025-03-26")
	// A batch takes its slots before any of its calls starts, so once they
	// run the count is exact; a request's slot comes back after its answer
	// is written, so that is waited for.
	holding := func(what string, n int) {
		t.Helper()
		if got := e.srv.InFlight().Requests; got != n {
			t.Fatalf("%s: %d requests in flight, want %d", what, got, n)
		}
	}
	inFlight := func(what string, n int) {
		t.Helper()
		ht.WaitUntil(t, fmt.Sprintf("%s: %d requests in flight", what, n), func() bool { return e.srv.InFlight().Requests == n })
	}

	five := postAsync(e, tok, sid, slowBatch("a", "slow", 5))
	g.waitStarted(t, "a batch of 5", 5)
	holding("a batch of 5 running", 5)

	wantRefusedWhole(t, "a batch of 4 with 3 slots free", g, postAsync(e, tok, sid, slowBatch("b", "slow", 4)), http.StatusTooManyRequests, "2")
	if n := obs.count(obs.refused, "requests_per_namespace"); n != 4 {
		t.Errorf("the refused batch of 4 counted %d refused requests, want 4", n)
	}
	inFlight("after the refused batch", 5)

	three := postAsync(e, tok, sid, slowBatch("c", "slow", 3))
	g.waitStarted(t, "a batch of 3 that fills the bound", 3)
	holding("the bound full", limit)

	ht.WantRetryLater(t, "a ping with the bound full", e.Post(tok, sid, ht.PingBody), http.StatusTooManyRequests, "2")
	ht.WantRetryLater(t, "a batch of notifications with the bound full", e.Post(tok, sid, `[`+ht.InitializedBody+`]`), http.StatusTooManyRequests, "2")
	e.WantPing("another namespace", other, otherSid)
	if got := batchAnswers(t, e.Post(other, otherSid, `[`+ht.PingBody+`,`+ht.PingBody+`]`)); len(got) != 2 {
		t.Fatalf("another namespace's batch answered %d responses, want 2", len(got))
	}

	res := e.Post(other, otherSid, slowBatch("d", "missing", limit+1)) // nothing that blocks, were it run
	if a := res.RPC(t); res.Status != http.StatusBadRequest || a.Error == nil || a.Error.Code != transport.CodeInvalidRequest || res.Header.Get("Retry-After") != "" {
		t.Fatalf("a batch of %d requests with a bound of %d = %s, want 400 -32600 without Retry-After", limit+1, limit, res)
	}
	if p := g.peak.Load(); p != limit {
		t.Fatalf("%d calls ran at once, want the bound %d", p, limit)
	}

	g.release()
	wantResults(t, "the batch of 5", awaitResult(t, "the batch of 5", five), 5)
	wantResults(t, "the batch of 3", awaitResult(t, "the batch of 3", three), 3)
	inFlight("all done", 0)
	if p := g.peak.Load(); p != limit {
		t.Fatalf("%d calls ran at once, want the bound %d", p, limit)
	}
	// The bound is back whole: a batch of exactly the bound runs.
	wantResults(t, "a batch of the bound, alone", e.Post(tok, sid, slowBatch("e", "slow", limit)), limit)
}

// TestHTTPBatchRequestsGlobal: the requests of a batch count against
// MaxRequests too: a batch that does not fit in what the endpoint has left
// is refused whole with 503 + Retry-After, whatever its namespace.
func TestHTTPBatchRequestsGlobal(t *testing.T) {
	const limit = 6
	f, tok, other := twoCredentials(t)
	obs := newCountObserver()
	e := newMCPEnv(t, f, transport.Options{MaxRequests: limit, Observer: obs})
	g := newGate(t, f, "slow")
	sid := initializeAt(t, e, tok, "2025-03-26")
	otherSid := initializeAt(t, e, other, "2025-03-26")

	four := postAsync(e, tok, sid, slowBatch("a", "slow", 4))
	g.waitStarted(t, "a batch of 4", 4)
	wantRefusedWhole(t, "another namespace's batch of 3 with 2 slots left", g, postAsync(e, other, otherSid, slowBatch("b", "slow", 3)), http.StatusServiceUnavailable, "1")
	if n := obs.count(obs.refused, "requests"); n != 3 {
		t.Errorf("the refused batch of 3 counted %d refused requests, want 3", n)
	}
	two := postAsync(e, other, otherSid, slowBatch("c", "slow", 2))
	g.waitStarted(t, "a batch of 2 that fills the bound", 2)
	ht.WantRetryLater(t, "a ping with the endpoint full", e.Post(other, otherSid, ht.PingBody), http.StatusServiceUnavailable, "1")

	g.release()
	wantResults(t, "the batch of 4", awaitResult(t, "the batch of 4", four), 4)
	wantResults(t, "the batch of 2", awaitResult(t, "the batch of 2", two), 2)
	if p := g.peak.Load(); p != limit {
		t.Fatalf("%d calls ran at once, want the bound %d", p, limit)
	}
}

// TestHTTPBatchFlood is issue 24 row 1 at a small scale: one principal,
// concurrent POSTs each a batch of slow tools/call on a 2025-03-26 session.
// However the POSTs race, the calls running at once never exceed
// MaxRequestsPerNamespace; every POST whose batch did not fit is answered
// 429 + Retry-After at once; the admitted ones all answer once the calls
// end, and the bound is whole again after.
func TestHTTPBatchFlood(t *testing.T) {
	const limit, posts, size = 8, 12, 4
	f := newFake(t)
	tok, _ := f.provider("T", "A", 0)
	e := newMCPEnv(t, f, transport.Options{MaxRequestsPerNamespace: limit, RetryAfter: time.Second})
	g := newGate(t, f, "slow")
	sid := initializeAt(t, e, tok, "2025-03-26")

	answers := make([]<-chan *ht.Result, posts)
	for i := range answers {
		answers[i] = postAsync(e, tok, sid, slowBatch(fmt.Sprint(i), "slow", size))
	}
	// Every POST is either refused (answered) or admitted (its calls all
	// run, blocked on the gate): wait until each has done one or the other.
	results := make([]*ht.Result, posts)
	refused := 0
	ht.WaitUntil(t, "every batch refused or running", func() bool {
		for i, ch := range answers {
			if results[i] != nil {
				continue
			}
			select {
			case res := <-ch:
				if res == nil {
					t.Fatalf("batch %d: request failed", i)
				}
				results[i] = res
				refused++
			default:
			}
		}
		return refused*size+int(g.running.Load()) == posts*size || g.peak.Load() > limit
	})
	if p := g.peak.Load(); p > limit {
		t.Fatalf("%d tool calls ran at once, past the per-namespace bound %d", p, limit)
	}
	t.Logf("%d of %d batches admitted, %d calls running", posts-refused, posts, g.running.Load())
	for i, res := range results {
		if res != nil {
			ht.WantRetryLater(t, fmt.Sprintf("refused batch %d", i), res, http.StatusTooManyRequests, "1")
		}
	}
	g.release()
	for i, ch := range answers {
		if results[i] == nil {
			wantResults(t, fmt.Sprintf("admitted batch %d", i), awaitResult(t, fmt.Sprintf("batch %d", i), ch), size)
		}
	}
	ht.WaitUntil(t, "nothing in flight", func() bool { return e.srv.InFlight().Requests == 0 })
	if p := g.peak.Load(); p > limit {
		t.Fatalf("%d tool calls ran at once, past the per-namespace bound %d", p, limit)
	}
	wantResults(t, "a batch of the bound after the flood", e.Post(tok, sid, slowBatch("z", "slow", limit)), limit)
}

package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// The tests of this file run in a synctest bubble, the endpoint's requests
// served by calling its ServeHTTP, without sockets (a bubble cannot tell a
// goroutine waiting on the network from one still running). That turns
// "this stream ends" from a wait with a hang bound into a fact checked at
// one moment: once synctest.Wait returned, every goroutine of the bubble
// is blocked, so a request that has not returned then will not return
// without something more happening. The endpoint's keep-alive ticker and
// the fake clock's timers run on the bubble's clock, which moves only when
// the test lets it.

// bubbleEnv is an endpoint over f, built inside the test's bubble.
type bubbleEnv struct {
	t   *testing.T
	f   *fake
	srv *transport.Server
}

// newBubbleEnv builds the endpoint; call it inside synctest.Test.
func newBubbleEnv(t *testing.T, f *fake, opts transport.Options) *bubbleEnv {
	t.Helper()
	// Registered first, run last: protoactor's dead-letter throttle waits
	// out its interval on a goroutine of its own, and the bubble ends only
	// once every goroutine in it has.
	t.Cleanup(func() { time.Sleep(time.Second) })
	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	t.Cleanup(system.Shutdown)
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	srv := transport.New(f, f.store, system, opts, transport.Host{Now: f.clock.Now})
	t.Cleanup(srv.Close)
	return &bubbleEnv{t: t, f: f, srv: srv}
}

// served is one request being served on a goroutine of its own.
type served struct {
	rec  *syncRecorder
	done chan struct{} // closed when ServeHTTP returned
}

// serve starts serving a request; the test's end cancels it, so that a
// stream a test left open ends with the bubble.
func (b *bubbleEnv) serve(method string, h http.Header, body string) *served {
	ctx, cancel := context.WithCancel(context.Background())
	b.t.Cleanup(cancel)
	req := httptest.NewRequestWithContext(ctx, method, "http://127.0.0.1/mcp", strings.NewReader(body))
	for k, vs := range h {
		req.Header[k] = vs
	}
	s := &served{rec: &syncRecorder{header: http.Header{}}, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		b.srv.ServeHTTP(s.rec, req)
	}()
	return s
}

// do serves a request to its end and returns the answer.
func (b *bubbleEnv) do(method string, h http.Header, body string) *ht.Result {
	s := b.serve(method, h, body)
	<-s.done
	return s.rec.result()
}

// initialize opens a session for tok, as a client does, and returns its id.
func (b *bubbleEnv) initialize(tok string) string {
	b.t.Helper()
	res := b.do(http.MethodPost, ht.Headers(tok, ""), ht.InitBody(ht.LatestVersion))
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || sid == "" {
		b.t.Fatalf("initialize = %s, want 200 and a session id", res)
	}
	if got := b.do(http.MethodPost, ht.Headers(tok, sid), ht.InitializedBody); got.Status != http.StatusAccepted {
		b.t.Fatalf("notifications/initialized = %s, want 202", got)
	}
	return sid
}

// ended reports whether ServeHTTP returned.
func (s *served) ended() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// syncRecorder is a ResponseWriter that a test may read while the handler
// writes, and that flushes (an event stream needs it).
type syncRecorder struct {
	mu     sync.Mutex // guards the fields below
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *syncRecorder) Header() http.Header { return r.header }

func (r *syncRecorder) WriteHeader(status int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status == 0 {
		r.status = status
	}
}

func (r *syncRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}

func (r *syncRecorder) Flush() {}

func (r *syncRecorder) result() *ht.Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &ht.Result{Status: r.status, Header: r.header.Clone(), Body: bytes.Clone(r.body.Bytes())}
}

// blockingCtxTool registers a tool name that reports progress first when progress
// is set (a session-era answer becomes an event stream), then hands its
// context to the test and runs until that context is done.
func blockingCtxTool(f *fake, name string, progress bool) <-chan context.Context {
	calls := make(chan context.Context, 16)
	f.tool(name, func(ctx context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		if progress {
			out.Progress(1, 0, "started")
		}
		calls <- ctx
		<-ctx.Done()
		return nil, ctx.Err()
	})
	return calls
}

// TestStreamsEndWithTheirCredential: SPEC §5, §5a.5, §5a.7 — every stream
// a request holds open ends once the credential it was opened with dies,
// whatever else stays live: the credential here is one token of a client
// grant whose other token keeps the namespace, and its sessions, alive, so
// only the stream's own watch of its credential can end it. Revoked or
// removed, the death is a write whose commit tells the watchers; once the
// write returned and the bubble is quiet the request has returned. An
// expiry is the endpoint's timer, on the bubble's clock: once the clock
// passed the expiry and the bubble is quiet, likewise.
func TestStreamsEndWithTheirCredential(t *testing.T) {
	const ttl = time.Hour
	streams := []struct {
		name string
		// open starts the stream with tok and returns it once it runs.
		open func(b *bubbleEnv, tok string) *served
	}{
		{"GET", func(b *bubbleEnv, tok string) *served {
			return b.serve(http.MethodGet, ht.GetHeaders(tok, b.initialize(tok)), "")
		}},
		{"session-era call stream", func(b *bubbleEnv, tok string) *served {
			calls := blockingCtxTool(b.f, "block", true)
			s := b.serve(http.MethodPost, ht.Headers(tok, b.initialize(tok)), ht.CallBody("7", "block", `"p"`))
			<-calls
			return s
		}},
		{"2026-07-28 call", func(b *bubbleEnv, tok string) *served {
			calls := blockingCtxTool(b.f, "block", false)
			s := b.serve(http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("7", "tools/call", `"name":"block","arguments":{}`))
			<-calls
			return s
		}},
		{"listen", func(b *bubbleEnv, tok string) *served {
			return b.serve(http.MethodPost, modernHeaders(tok, "subscriptions/listen", ""), listenBody("9", `{"toolsListChanged":true}`))
		}},
	}
	deaths := []struct {
		name string
		kill func(f *fake, id string)
	}{
		{"revoked", func(f *fake, id string) { f.revoke(id) }},
		{"removed", func(f *fake, id string) { f.remove(id) }},
		{"expired", func(f *fake, _ string) {
			f.clock.Advance(ttl)
			time.Sleep(ttl) // the bubble's clock: the endpoint's timers fire
		}},
	}
	for _, st := range streams {
		for _, death := range deaths {
			t.Run(st.name+"/"+death.name, func(t *testing.T) {
				synctest.Test(t, func(t *testing.T) {
					f := newFake(t)
					tok, id := f.client("g", memdb.AccessReadOnly, ttl)
					other, _ := f.client("g", memdb.AccessReadOnly, 0) // keeps the namespace live
					b := newBubbleEnv(t, f, transport.Options{})
					s := st.open(b, tok)
					synctest.Wait()
					if s.ended() {
						t.Fatalf("the stream ended before its credential died: %s", s.rec.result())
					}

					death.kill(f, id)
					synctest.Wait()
					if !s.ended() {
						t.Fatalf("the stream runs on, quiet, after its credential was %s; it carried %q", death.name, s.rec.result().Body)
					}
					if res := b.do(http.MethodPost, modernHeaders(other, "tools/call", "whoami"), modernBody("8", "tools/call", `"name":"whoami","arguments":{}`)); res.Status != http.StatusOK {
						t.Errorf("the grant's other token afterwards = %s, want 200", res)
					}
				})
			})
		}
	}
}

// TestCloseEndsCallsInFlight: SPEC §5a.5 — the endpoint's Close cancels
// the 2026-07-28 calls in flight: no session holds them, so nothing else
// would. Once Close returned the call's context is done, and once the
// bubble is quiet the request has returned.
func TestCloseEndsCallsInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newFake(t)
		tok, _ := f.provider("T", "A", 0)
		b := newBubbleEnv(t, f, transport.Options{})
		calls := blockingCtxTool(f, "block", false)
		s := b.serve(http.MethodPost, modernHeaders(tok, "tools/call", "block"), modernBody("7", "tools/call", `"name":"block","arguments":{}`))
		call := <-calls
		synctest.Wait()
		if s.ended() {
			t.Fatalf("the call ended before Close: %s", s.rec.result())
		}

		b.srv.Close()
		if call.Err() == nil {
			t.Error("Close returned, and the call's context is live")
		}
		synctest.Wait()
		if !s.ended() {
			t.Error("the call runs on after Close")
		}
	})
}

package transport_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// nodePair is two endpoints, each over a fake backend of its own whose
// credential tables hold the same rows: A, the home node, with its public
// endpoint (A) and its node-to-node listener serving ServeForwarded
// (internal); B, which routes every request to A unless routeErr is set.
type nodePair struct {
	a, b         *mcpEnv
	fa, fb       *fake
	internal     *httptest.Server
	obsB         *countObserver
	routeErr     atomic.Pointer[error] // set: B's Route answers it
	routedA      atomic.Int32          // calls of A's Route
	forwardedToA atomic.Int32          // requests A's internal listener received

	logB lockedBuffer // B's log

	mu       sync.Mutex // guards seen
	seenHost []string   // Host and X-Forwarded-For of each forwarded request
	seenXFF  []string
}

// lockedBuffer is a log's output, written and read from any goroutine.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// closesConn sends one POST on a connection of its own and reports whether
// its answer closes the connection (Connection: close).
func closesConn(t *testing.T, c *ht.Client, h http.Header, body string) bool {
	t.Helper()
	p := c.HoldPost(h, body, 0)
	p.Conn.SetReadDeadline(time.Now().Add(ht.ConnBound))
	resp, err := http.ReadResponse(bufio.NewReader(p.Conn), nil)
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		t.Fatalf("read answer body: %v", err)
	}
	return resp.Close
}

func newNodePair(t *testing.T) *nodePair {
	t.Helper()
	n := &nodePair{fa: newFake(t), fb: newFake(t), obsB: newCountObserver()}
	var home atomic.Pointer[url.URL]
	n.b = newMCPEnvHost(t, n.fb, transport.Options{Observer: n.obsB, Logger: slog.New(slog.NewTextHandler(&n.logB, nil))}, transport.Host{Route: func(principal.Principal, transport.RouteRequest) (*url.URL, error) {
		if err := n.routeErr.Load(); err != nil {
			return nil, *err
		}
		return home.Load(), nil
	}})
	n.a = newMCPEnvHost(t, n.fa, transport.Options{}, transport.Host{Route: func(principal.Principal, transport.RouteRequest) (*url.URL, error) {
		n.routedA.Add(1)
		return nil, errors.New("A routes nothing: every request here is its own")
	}})
	n.internal = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.forwardedToA.Add(1)
		n.mu.Lock()
		n.seenHost, n.seenXFF = append(n.seenHost, r.Host), append(n.seenXFF, r.Header.Get("X-Forwarded-For"))
		n.mu.Unlock()
		n.a.srv.ServeForwarded(w, r)
	}))
	t.Cleanup(n.internal.Close)
	// A's sessions end first, so the streams forwarded through B end and
	// both servers' handlers return.
	t.Cleanup(n.a.srv.Close)
	u, err := url.Parse(n.internal.URL + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	home.Store(u)
	return n
}

// provider mints a provider credential in A's table and copies its row
// into B's: one credential, known to both nodes.
func (n *nodePair) provider(t *testing.T, thread string) string {
	t.Helper()
	tok, id := n.fa.provider(thread, "A", 0)
	c, err := n.fa.store.Read().Credential(id)
	if err != nil {
		t.Fatal(err)
	}
	n.fb.write(func(w *memdb.Writer) error { return w.PutCredential(c.Clone()) })
	return tok
}

// TestHTTPForwardToHome: every request B routes to A is served by A: the
// session an initialize through B opens is A's (in A's table and store,
// not B's); a tools/call and a GET stream through B are A's, and an event
// A sends on the stream arrives through B at once; a 2026-07-28 call is
// forwarded too; A sees the client's Host and an X-Forwarded-For; A never
// routes a forwarded request again; B counts each one "proxied".
func TestHTTPForwardToHome(t *testing.T) {
	n := newNodePair(t)
	tok := n.provider(t, "T")

	sid := n.b.Initialize(tok) // initialize and notifications/initialized, through B
	if a, b := n.a.srv.Sessions(), n.b.srv.Sessions(); a != 1 || b != 0 {
		t.Fatalf("sessions: A %d, B %d; want the session on A only", a, b)
	}
	if !hasRecord(n.fa, sid) || hasRecord(n.fb, sid) {
		t.Fatalf("session record on A %v, on B %v; want A only", hasRecord(n.fa, sid), hasRecord(n.fb, sid))
	}
	res := n.b.Post(tok, sid, whoamiCall)
	ht.WantStatus(t, "tools/call through B", res, http.StatusOK)
	if body := string(res.Body); !strings.Contains(body, "provider cred:") {
		t.Fatalf("tools/call through B = %s, want whoami's result", body)
	}
	// A read the body: B keeps the client's connection (an answer before
	// the body is read closes it, SPEC §5).
	if closesConn(t, n.b.Client, ht.Headers(tok, sid), whoamiCall) {
		t.Fatal("tools/call through B closed the client's connection, want it kept")
	}

	st := n.b.Stream(tok, sid)
	if a := n.a.srv.SessionInfos(); len(a) != 1 || !a[0].Busy {
		t.Fatalf("A's sessions %+v, want the one session, busy with its stream", a)
	}
	n.a.srv.ListChanged("tools")
	ev := waitEvents(t, "the event through B", st, 2) // the priming event, then the notification
	if got := ev[len(ev)-1].Data; got != `{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}` {
		t.Fatalf("last event through B = %q, want tools/list_changed", got)
	}

	res = n.b.Do(http.MethodPost, modernHeaders(tok, "tools/call", "whoami"), modernBody("9", "tools/call", `"name":"whoami","arguments":{}`))
	ht.WantStatus(t, "2026-07-28 tools/call through B", res, http.StatusOK)
	if body := string(res.Body); !strings.Contains(body, `"id":9`) || !strings.Contains(body, "provider cred:") {
		t.Fatalf("2026-07-28 tools/call through B = %s, want whoami's result", body)
	}

	const forwarded = 6 // initialize, initialized, tools/call twice, GET, 2026-07-28 tools/call
	if got := n.forwardedToA.Load(); got != forwarded {
		t.Fatalf("A's internal listener got %d requests, want %d", got, forwarded)
	}
	if got := n.obsB.count(n.obsB.forward, "proxied"); got != forwarded {
		t.Fatalf("B counted %d proxied, want %d", got, forwarded)
	}
	if got := n.routedA.Load(); got != 0 {
		t.Fatalf("A's Route was called %d times, want 0: a forwarded request is never routed again", got)
	}
	bHost := strings.TrimPrefix(n.b.TS.URL, "http://")
	n.mu.Lock()
	defer n.mu.Unlock()
	for i := range n.seenHost {
		if n.seenHost[i] != bHost || n.seenXFF[i] != "127.0.0.1" {
			t.Fatalf("forwarded request %d: Host %q, X-Forwarded-For %q; want the client's Host %q and 127.0.0.1", i, n.seenHost[i], n.seenXFF[i], bHost)
		}
	}
}

// TestHTTPForwardChecks: B authenticates before it forwards (a bad token
// is B's 401; A hears nothing); A repeats the owner check, so another
// principal's request naming A's session through B gets the same 404 as a
// made-up id through B; a client-sent header cannot skip B's Route.
func TestHTTPForwardChecks(t *testing.T) {
	n := newNodePair(t)
	tok, other := n.provider(t, "T"), n.provider(t, "U")
	sid := n.b.Initialize(tok)
	before := n.forwardedToA.Load()

	ht.Want401(t, "a bad token through B", n.b.Post("mcprt_bogus", sid, ht.PingBody), ht.InvalidToken)
	if !closesConn(t, n.b.Client, ht.Headers("mcprt_bogus", sid), ht.PingBody) {
		t.Fatal("B's 401 before the body kept the connection, want it closed")
	}
	ht.Want401(t, "no token through B", n.b.Post("", sid, ht.PingBody), `Bearer`)
	if got := n.forwardedToA.Load(); got != before {
		t.Fatalf("A's internal listener got %d requests for B's 401s, want none", got-before)
	}

	for _, req := range []struct {
		name string
		do   func(tok, sid string) *ht.Result
	}{
		{"POST", func(tok, sid string) *ht.Result { return n.b.Post(tok, sid, ht.PingBody) }},
		{"GET", func(tok, sid string) *ht.Result {
			// Headers only: a stream let through would never end.
			s, res := n.b.OpenStream(ht.GetHeaders(tok, sid))
			if s != nil {
				s.Close()
			}
			return res
		}},
		{"DELETE", func(tok, sid string) *ht.Result { return n.b.Del(tok, sid) }},
	} {
		foreign := req.do(other, sid)
		ht.WantStatus(t, "foreign "+req.name+" through B", foreign, http.StatusNotFound)
		ht.SameAsUnknown(t, "foreign "+req.name+" through B", foreign, req.do(other, ht.MadeUpSessionID))
	}
	n.b.WantPing("the owner's session after the foreign requests", tok, sid)
	if got := n.routedA.Load(); got != 0 {
		t.Fatalf("A's Route was called %d times, want 0", got)
	}
}

// TestHTTPForwardHomeGone: a Route error — the home node is gone or
// unknown — is answered by B at once: the unknown session's 404 (the same
// bytes) for a request naming a session, 503 + Retry-After for one that
// names none; so is a home node that cannot be reached (its listener
// closed), counted "proxy_error". Nothing reaches A.
func TestHTTPForwardHomeGone(t *testing.T) {
	n := newNodePair(t)
	tok := n.provider(t, "T")
	sid := n.b.Initialize(tok)
	unknown := n.b.Post(tok, ht.MadeUpSessionID, ht.PingBody) // A's 404, through B

	check := func(what string) {
		t.Helper()
		for _, req := range []struct {
			name string
			res  *ht.Result
		}{
			{"POST", n.b.Post(tok, sid, ht.PingBody)},
			{"GET", n.b.Do(http.MethodGet, ht.GetHeaders(tok, sid), "")},
			{"DELETE", n.b.Del(tok, sid)},
		} {
			ht.WantStatus(t, what+": "+req.name+" naming a session", req.res, http.StatusNotFound)
			if string(req.res.Body) != string(unknown.Body) {
				t.Fatalf("%s: %s naming a session = %q, want the unknown session's %q", what, req.name, req.res.Body, unknown.Body)
			}
		}
		for _, req := range []struct {
			name string
			res  *ht.Result
		}{
			{"initialize", n.b.Post(tok, "", ht.InitBody(ht.LatestVersion))},
			{"2026-07-28 tools/call", n.b.Do(http.MethodPost, modernHeaders(tok, "tools/call", "whoami"), modernBody("9", "tools/call", `"name":"whoami","arguments":{}`))},
		} {
			ht.WantStatus(t, what+": "+req.name, req.res, http.StatusServiceUnavailable)
			if got := req.res.Header.Get("Retry-After"); got != "1" {
				t.Fatalf("%s: %s: Retry-After = %q, want 1", what, req.name, got)
			}
			ht.WantErrorWithoutID(t, what+": "+req.name, req.res)
		}
	}

	gone := errors.New("home node left the cluster")
	n.routeErr.Store(&gone)
	before := n.forwardedToA.Load()
	check("Route error")
	if got := n.forwardedToA.Load(); got != before {
		t.Fatalf("A got %d requests while Route said it is gone, want none", got-before)
	}
	if got := n.obsB.count(n.obsB.forward, "home_gone"); got != 5 {
		t.Fatalf("B counted %d home_gone, want 5", got)
	}

	n.routeErr.Store(nil)
	n.internal.Close()
	check("home listener closed")
	// Nothing the client sent is logged, its query string neither.
	const secret = "mcprt_in-the-query"
	res := n.b.DoURL(n.b.URL+"?access_token="+secret, http.MethodPost, ht.Headers(tok, ""), ht.InitBody(ht.LatestVersion))
	ht.WantStatus(t, "initialize with a query, home listener closed", res, http.StatusServiceUnavailable)
	if got := n.obsB.count(n.obsB.forward, "proxy_error"); got != 6 {
		t.Fatalf("B counted %d proxy_error, want 6", got)
	}
	if log := n.logB.String(); !strings.Contains(log, "forward to the home node failed") || strings.Contains(log, secret) || strings.Contains(log, tok) {
		t.Fatalf("B's log = %q, want the failure logged without the query string or the token", log)
	}
	if got := n.a.srv.Sessions(); got != 1 {
		t.Fatalf("A's sessions = %d, want its one session untouched", got)
	}
}

// TestHTTPForwardSkipsRouteOnlyByContext: ServeForwarded is the only way
// past Route: a request to A's public endpoint is routed (A's Route is
// asked, and its error answered), whatever headers the client adds.
func TestHTTPForwardSkipsRouteOnlyByContext(t *testing.T) {
	n := newNodePair(t)
	tok := n.provider(t, "T")
	h := ht.Headers(tok, "")
	h.Set("X-Forwarded-For", "10.0.0.1")
	h.Set("Forwarded", "for=10.0.0.1")
	res := n.a.Do(http.MethodPost, h, ht.InitBody(ht.LatestVersion))
	ht.WantStatus(t, "initialize on A's public endpoint", res, http.StatusServiceUnavailable)
	if got := n.routedA.Load(); got != 1 {
		t.Fatalf("A's Route was called %d times, want 1", got)
	}
	if got := n.a.srv.Sessions(); got != 0 {
		t.Fatalf("A's sessions = %d, want 0", got)
	}
}

// TestHTTPForwardStreamCutShort: a stream forwarded through B whose home
// connection breaks mid-stream ends for the client too (net/http aborts
// B's answer: ReverseProxy's http.ErrAbortHandler is not taken for a
// handler's panic), and B's handler returns.
func TestHTTPForwardStreamCutShort(t *testing.T) {
	n := newNodePair(t)
	tok := n.provider(t, "T")
	sid := n.b.Initialize(tok)
	st := n.b.Stream(tok, sid)
	waitEvents(t, "the priming event through B", st, 1)

	n.internal.CloseClientConnections()
	st.WantEnd(t, "the stream cut short")
	ht.WaitUntil(t, "B's GET handler returned", func() bool { return n.obsB.count(n.obsB.methods, http.MethodGet) == 1 })
	if log := n.logB.String(); strings.Contains(log, "panic") {
		t.Fatalf("B logged a panic for the aborted answer:\n%s", log)
	}
	if got := n.obsB.count(n.obsB.forward, "proxied"); got != 3 {
		t.Fatalf("B counted %d proxied, want 3 (initialize, initialized, GET): the stream had started", got)
	}
}

// TestHTTPForwardClose: B's graceful CloseStreams ends the GET streams it
// forwards while a forwarded call goes on; B's Close ends that call too
// (503: this node closes) and forwards nothing more. A's session is
// untouched: it is A's.
func TestHTTPForwardClose(t *testing.T) {
	n := newNodePair(t)
	tok := n.provider(t, "T")
	b := n.fa.blocking("block", false)
	sid := n.b.Initialize(tok)
	st := n.b.Stream(tok, sid)
	call := n.b.AsyncPost(tok, sid, ht.CallBody(`"c-1"`, "block", ""))
	b.WaitStarted(t, "the call forwarded to A")

	n.b.srv.CloseStreams()
	st.WantEnd(t, "the GET stream forwarded through B")
	ht.WaitUntil(t, "B forwards only the call", func() bool { return n.b.srv.Forwarding() == 1 })
	if got := n.a.srv.Sessions(); got != 1 {
		t.Fatalf("A's sessions = %d after B's CloseStreams, want 1", got)
	}

	n.b.srv.Close()
	wantUnavailable(t, "the call B forwarded when B closed", call.Await(t, "the forwarded call"))
	wantUnavailable(t, "a request to B after its Close", n.b.Post(tok, sid, ht.PingBody))
	if got := n.b.srv.Forwarding(); got != 0 {
		t.Fatalf("B forwards %d requests after Close, want 0", got)
	}
	if got := n.a.srv.Sessions(); got != 1 || !hasRecord(n.fa, sid) {
		t.Fatalf("A's sessions = %d, record %v after B's Close; want its session kept", got, hasRecord(n.fa, sid))
	}
}

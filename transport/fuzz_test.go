package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// Who a fuzzed request authenticates as.
const (
	asNobody  = iota // no or unusable Authorization
	asOwner          // A: the credential that owns the session
	asForeign        // B or a client grant: live, but not the owner
)

// fuzzAuth is one choice of Authorization header; the token is filled in
// from the environment.
type fuzzAuth struct {
	header func(e *fuzzEnv) string
	who    int
}

var fuzzAuths = []fuzzAuth{
	{func(*fuzzEnv) string { return "" }, asNobody},
	{func(e *fuzzEnv) string { return "Bearer " + e.tokA }, asOwner},
	{func(e *fuzzEnv) string { return "Bearer " + e.tokB }, asForeign},
	{func(*fuzzEnv) string { return "Bearer garbage" }, asNobody},
	{func(e *fuzzEnv) string { return "bearer " + e.tokA }, asOwner},
	{func(e *fuzzEnv) string { return "Bearer " + e.tokClient }, asForeign},
	{func(e *fuzzEnv) string { return "Basic " + e.tokA }, asNobody},
	{func(*fuzzEnv) string { return "Bearer " }, asNobody},
	{func(e *fuzzEnv) string { return "Bearer " + e.tokRevoked }, asNobody},
	{func(e *fuzzEnv) string { return "Bearer  " + e.tokB + " " }, asForeign},
}

var fuzzMethods = []string{
	http.MethodPost, http.MethodGet, http.MethodDelete,
	http.MethodPut, http.MethodPatch, http.MethodOptions, http.MethodHead,
}

// Session id choices.
const (
	sessNone = iota
	sessOwned
	sessUnknown
	sessRaw      // the fuzzed string
	sessOwnedOld // A's session negotiated at 2025-03-26: it takes batches
	sessCount
)

const unknownSession = "mcps_0123456789abcdef0123456789abcdef"

var fuzzAccepts = []string{
	"", "application/json, text/event-stream", "application/json", "text/event-stream",
	"*/*", "application/*, text/*", "text/html", "application/json;q=0.9, text/event-stream;q=0.1",
}

var fuzzContentTypes = []string{
	"", "application/json", "application/json; charset=utf-8", "text/plain", "APPLICATION/JSON", "application/jsonx",
}

var fuzzVersions = []string{"", "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", "garbage"}

// Origins and hosts with whether the endpoint's default guard admits them.
var fuzzOrigins = []struct {
	value string
	ok    bool
}{
	{"", true},
	{"http://localhost:3000", true},
	{"http://127.0.0.1", true},
	{"https://[::1]:8443", true},
	{"https://evil.example", false},
	{"null", false},
	{"http://localhost.evil.example", false},
}

var fuzzHosts = []struct {
	value string
	ok    bool
}{
	{"127.0.0.1:8080", true},
	{"localhost", true},
	{"[::1]:443", true},
	{"evil.example", false},
	{"127.0.0.1.evil.example:80", false},
}

// fuzzEnv is one endpoint over a fake backend, with a session owned by A.
type fuzzEnv struct {
	f          *fake
	h          http.Handler
	tokA       string
	tokB       string
	tokClient  string
	tokRevoked string
	owned      string
	ownedOld   string // negotiated at 2025-03-26
	// The answer to a live principal naming an unknown session.
	notFound   []byte
	notFoundCT string
}

func newFuzzEnv(tb testing.TB) *fuzzEnv {
	tb.Helper()
	f := newFake(tb)
	f.tool("thread_read", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "{}"}}, StructuredContent: map[string]any{}}, nil
	})
	f.tool("thread_post", func(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
		out.Progress(1, 1, "posting")
		return textResult("posted"), nil
	})
	e := &fuzzEnv{f: f}
	e.tokA, _ = f.provider("T", "A", 0)
	e.tokB, _ = f.provider("U", "A", 0)
	e.tokClient, _ = f.client("fuzz", memdb.AccessReadWrite, 0)
	var gone string
	e.tokRevoked, gone = f.client("gone", memdb.AccessReadWrite, 0)
	f.revoke(gone)

	system := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return slog.New(slog.DiscardHandler) }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	srv := transport.New(f, f.store, system, transport.Options{MaxBodyBytes: 64 << 10, Logger: slog.New(slog.DiscardHandler)}, transport.Host{Now: f.clock.Now})
	tb.Cleanup(func() {
		srv.Close()
		system.Shutdown()
	})
	e.h = srv
	e.ensureOwned(tb)
	rec := e.serve(e.request(http.MethodPost, "Bearer "+e.tokB, unknownSession, []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)))
	if rec.Code != http.StatusNotFound {
		tb.Fatalf("unknown session: %d %s, want 404", rec.Code, rec.Body)
	}
	e.notFound, e.notFoundCT = rec.Body.Bytes(), rec.Header().Get("Content-Type")
	return e
}

// request builds a well-formed request on the endpoint; the fuzz target
// then spoils it.
func (e *fuzzEnv) request(method, authz, sid string, body []byte) *http.Request {
	req := httptest.NewRequest(method, "/mcp", bytes.NewReader(body))
	req.Host = "127.0.0.1:8080"
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	return req
}

// flushCanceler records a response and cancels its request once the
// handler flushes: an event stream has started, and nothing more is needed
// of it. Without this a GET on a live session would stream forever.
type flushCanceler struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (f *flushCanceler) Flush() {
	f.ResponseRecorder.Flush()
	f.cancel()
}

// serve runs one request to completion.
func (e *fuzzEnv) serve(req *http.Request) *httptest.ResponseRecorder {
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	w := &flushCanceler{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	e.h.ServeHTTP(w, req.WithContext(ctx))
	return w.ResponseRecorder
}

// ensureOwned makes sure A owns two live sessions, at 2025-11-25 and at
// 2025-03-26: A's own requests may have deleted them, or evicted them with
// the 65th initialize.
func (e *fuzzEnv) ensureOwned(tb testing.TB) {
	tb.Helper()
	e.owned = e.ensureSession(tb, e.owned, "2025-11-25")
	e.ownedOld = e.ensureSession(tb, e.ownedOld, "2025-03-26")
}

func (e *fuzzEnv) ensureSession(tb testing.TB, sid, version string) string {
	tb.Helper()
	if sid != "" && hasRecord(e.f, sid) {
		return sid
	}
	rec := e.serve(e.request(http.MethodPost, "Bearer "+e.tokA, "",
		[]byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"`+version+`","capabilities":{},"clientInfo":{"name":"fuzz","version":"1"}}}`)))
	sid = rec.Header().Get("Mcp-Session-Id")
	if rec.Code != http.StatusOK || sid == "" {
		tb.Fatalf("initialize as A at %s: %d %s", version, rec.Code, rec.Body)
	}
	return sid
}

// ownedRecord returns the store record of A's session sid.
func (e *fuzzEnv) ownedRecord(t *testing.T, sid string) *memdb.MCPSession {
	t.Helper()
	rec := mcpRecord(e.f, sid)
	if rec == nil {
		t.Fatalf("A's session %s has no record", sid)
	}
	return rec
}

// FuzzHandler sends arbitrary requests — method, credential, session id,
// Accept, Content-Type, protocol version, Origin, Host and body — to one
// endpoint and checks that it never fails (no panic, no 5xx) and that no
// foreign credential ever reaches the session A owns: naming it gets the
// unknown-session 404, byte for byte, and leaves it as it was.
func FuzzHandler(f *testing.F) {
	const (
		initialize = `{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"f","version":"1"}}}`
		callRead   = `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`
		callPost   = `{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"thread_post","arguments":{"text":"hi"},"_meta":{"progressToken":1}}}`
		batch      = `[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"tools/list"}]`
		cancelled  = `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}`
	)
	// method, auth, session, accept, content type, version, origin, host, raw session id, body
	f.Add(byte(0), byte(1), byte(sessNone), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte(initialize))
	f.Add(byte(0), byte(1), byte(sessOwned), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte(callRead))
	f.Add(byte(0), byte(1), byte(sessOwned), byte(1), byte(1), byte(0), byte(1), byte(1), "", []byte(callPost))
	f.Add(byte(0), byte(2), byte(sessOwned), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte(callPost))
	f.Add(byte(1), byte(2), byte(sessOwned), byte(3), byte(0), byte(1), byte(0), byte(0), "", []byte(nil))
	f.Add(byte(2), byte(2), byte(sessOwned), byte(0), byte(0), byte(1), byte(0), byte(0), "", []byte(nil))
	f.Add(byte(2), byte(5), byte(sessOwned), byte(0), byte(0), byte(0), byte(0), byte(0), "", []byte(nil))
	f.Add(byte(0), byte(1), byte(sessOwned), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte(batch))
	f.Add(byte(0), byte(1), byte(sessOwnedOld), byte(1), byte(1), byte(3), byte(0), byte(0), "", []byte(batch))
	f.Add(byte(0), byte(2), byte(sessOwnedOld), byte(1), byte(1), byte(3), byte(0), byte(0), "", []byte(batch))
	f.Add(byte(0), byte(1), byte(sessOwned), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte(cancelled))
	f.Add(byte(0), byte(1), byte(sessRaw), byte(1), byte(1), byte(1), byte(0), byte(0), "mcps_zz", []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	f.Add(byte(0), byte(1), byte(sessOwned), byte(1), byte(1), byte(1), byte(0), byte(0), "", []byte("\x00{]garbage"))
	f.Add(byte(1), byte(1), byte(sessOwned), byte(3), byte(0), byte(1), byte(0), byte(0), "", []byte(nil))
	f.Add(byte(3), byte(0), byte(sessNone), byte(0), byte(0), byte(0), byte(4), byte(3), "", []byte("x"))

	e := newFuzzEnv(f)
	f.Fuzz(func(t *testing.T, method, auth, sess, accept, ctype, version, origin, host byte, rawSID string, body []byte) {
		e.ensureOwned(t)
		m := fuzzMethods[int(method)%len(fuzzMethods)]
		a := fuzzAuths[int(auth)%len(fuzzAuths)]
		o := fuzzOrigins[int(origin)%len(fuzzOrigins)]
		hst := fuzzHosts[int(host)%len(fuzzHosts)]
		var sid string
		switch int(sess) % sessCount {
		case sessOwned:
			sid = e.owned
		case sessUnknown:
			sid = unknownSession
		case sessRaw:
			sid = rawSID
		case sessOwnedOld:
			sid = e.ownedOld
		}

		req := httptest.NewRequest(m, "/mcp", bytes.NewReader(body))
		req.Host = hst.value
		for name, value := range map[string]string{
			"Authorization":        a.header(e),
			"Mcp-Session-Id":       sid,
			"Accept":               fuzzAccepts[int(accept)%len(fuzzAccepts)],
			"Content-Type":         fuzzContentTypes[int(ctype)%len(fuzzContentTypes)],
			"MCP-Protocol-Version": fuzzVersions[int(version)%len(fuzzVersions)],
			"Origin":               o.value,
		} {
			if value != "" {
				req.Header.Set(name, value)
			}
		}

		foreignOnOwned := a.who == asForeign && (sid == e.owned || sid == e.ownedOld)
		var before *memdb.MCPSession
		if foreignOnOwned {
			before = e.ownedRecord(t, sid)
		}

		rec := e.serve(req)
		got, _ := io.ReadAll(rec.Body)

		if rec.Code >= 500 {
			t.Fatalf("%s as %d, session %q: %d %s", m, a.who, sid, rec.Code, got)
		}
		if rec.Code == http.StatusNotFound && !bytes.Equal(got, e.notFound) {
			t.Errorf("404 body %q, want the unknown-session body %q", got, e.notFound)
		}
		if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("401 without WWW-Authenticate")
		}
		routed := m == http.MethodPost || m == http.MethodGet || m == http.MethodDelete
		guarded := routed && o.ok && hst.ok
		switch {
		case !routed:
			if rec.Code != http.StatusMethodNotAllowed {
				t.Errorf("%s: %d, want 405", m, rec.Code)
			}
		case !o.ok || !hst.ok:
			if rec.Code != http.StatusForbidden {
				t.Errorf("%s with Origin %q, Host %q: %d, want 403", m, o.value, hst.value, rec.Code)
			}
		case a.who == asNobody:
			if rec.Code != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: %d %s, want 401", m, a.header(e), rec.Code, got)
			}
		}
		if !foreignOnOwned {
			return
		}
		if guarded && (rec.Code != http.StatusNotFound || rec.Header().Get("Content-Type") != e.notFoundCT) {
			t.Fatalf("%s by a foreign credential on A's session: %d %q %s, want the unknown-session 404", m, rec.Code, rec.Header().Get("Content-Type"), got)
		}
		after := e.ownedRecord(t, sid)
		if diff := cmp.Diff(before, after); diff != "" {
			t.Fatalf("A's session record changed by a foreign %s (-before +after):\n%s", m, diff)
		}
		ping := e.serve(e.request(http.MethodPost, "Bearer "+e.tokA, sid, []byte(`{"jsonrpc":"2.0","id":99,"method":"ping"}`)))
		if ping.Code != http.StatusOK {
			t.Fatalf("A's ping after a foreign %s: %d %s, want 200", m, ping.Code, ping.Body)
		}
	})
}

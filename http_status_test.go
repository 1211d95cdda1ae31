package mcpruntime_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// statusRow is one request of the status-code matrix: a well-formed
// request (mcpHeaders, or getHeaders for GET) changed by edit.
type statusRow struct {
	name   string
	method string // "" = POST
	// session: "" = the test's session, "none", "unknown" (made up), or
	// "fresh" (a session initialized for this row alone).
	session string
	// noToken leaves the Authorization header out; edit may add one.
	noToken bool
	edit    func(h http.Header)
	body    string
	want    int
	// code is the JSON-RPC error code the body must carry; 0: no error
	// code checked.
	code int
	// createsNothing: the request leaves the ownership records as they
	// were and carries no Mcp-Session-Id.
	createsNothing bool
	check          func(t *testing.T, res *httpResult)
}

func set(kv ...string) func(h http.Header) {
	return func(h http.Header) {
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
				continue
			}
			h.Set(kv[i], kv[i+1])
		}
	}
}

func wantHeader(name, value string) func(t *testing.T, res *httpResult) {
	return func(t *testing.T, res *httpResult) {
		t.Helper()
		if got := res.Header.Values(name); len(got) != 1 || got[0] != value {
			t.Fatalf("%s = %q, want [%q]", name, got, value)
		}
	}
}

// runStatusRows runs rows against e with tok, sid as the default principal
// and session. A GET that opens a stream is closed at once.
func runStatusRows(t *testing.T, e *mcpEnv, tok, sid string, rows []statusRow) {
	t.Helper()
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			method := row.method
			if method == "" {
				method = http.MethodPost
			}
			s := sid
			switch row.session {
			case "none":
				s = ""
			case "unknown":
				s = madeUpSessionID
			case "fresh":
				s = e.initialize(tok)
			}
			tk := tok
			if row.noToken {
				tk = ""
			}
			h := mcpHeaders(tk, s)
			switch method {
			case http.MethodGet:
				h = getHeaders(tk, s)
			case http.MethodDelete:
				h.Del("Content-Type")
			}
			if row.edit != nil {
				row.edit(h)
			}
			before := mcpRecords(t, e.rt)
			var res *httpResult
			if method == http.MethodGet {
				var st *sseStream
				st, res = e.openStream(h)
				if st != nil {
					st.close()
					// The server notices the client went away asynchronously;
					// the next row's GET must not find this stream still open.
					waitUntil(t, "stream released", func() bool {
						for _, info := range e.srv.SessionInfos() {
							if info.ID == s && info.Busy {
								return false
							}
						}
						return true
					})
				}
			} else {
				res = e.do(method, h, row.body)
			}
			if res.Status != row.want {
				t.Fatalf("%s = %s, want %d", method, res, row.want)
			}
			if row.code != 0 {
				a := res.rpc(t)
				if a.Error == nil || a.Error.Code != row.code {
					t.Fatalf("%s = %s, want JSON-RPC error %d", method, res, row.code)
				}
			}
			if row.createsNothing {
				if after := mcpRecords(t, e.rt); strings.Join(after, ",") != strings.Join(before, ",") || res.Header.Get("Mcp-Session-Id") != "" {
					t.Fatalf("records %v before, %v after, Mcp-Session-Id %q; want nothing created", before, after, res.Header.Get("Mcp-Session-Id"))
				}
			}
			if row.check != nil {
				row.check(t, res)
			}
		})
	}
}

// TestHTTPStatusMatrix walks SPEC §5 steps 1–4 and the answers of
// dispatched messages: one row per rule, and rows where two rules are
// broken at once to pin their order.
func TestHTTPStatusMatrix(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok := openMinted(t, rt, "T", "A")
	_, other := openMinted(t, rt, "U", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)

	const limit = 4 << 20
	atLimit := pingBody + strings.Repeat(" ", limit-len(pingBody))
	overLimit := atLimit + " "
	malformed := `{"jsonrpc":"2.0","id":1,"method":`
	notFound := func(t *testing.T, res *httpResult) {
		t.Helper()
		if want := e.post(tok, madeUpSessionID, pingBody); string(res.Body) != string(want.Body) {
			t.Fatalf("body %q, want the unknown-session body %q", res.Body, want.Body)
		}
	}
	rows := []statusRow{
		// Step 1: Origin.
		{name: "origin evil", edit: set("Origin", "http://evil.example"), body: pingBody, want: 403},
		{name: "origin evil GET", method: "GET", edit: set("Origin", "http://evil.example"), want: 403},
		{name: "origin evil DELETE", method: "DELETE", edit: set("Origin", "http://evil.example"), want: 403},
		{name: "origin evil initialize", session: "none", edit: set("Origin", "http://evil.example"), body: initBody(latestVersion), want: 403, createsNothing: true},
		{name: "origin null", edit: set("Origin", "null"), body: pingBody, want: 403},
		{name: "origin loopback name as subdomain", edit: set("Origin", "http://localhost.evil.example"), body: pingBody, want: 403},
		{name: "origin localhost", edit: set("Origin", "http://localhost:5173"), body: pingBody, want: 200},
		{name: "origin 127.0.0.1", edit: set("Origin", "http://127.0.0.1"), body: pingBody, want: 200},
		{name: "origin 127.8.9.10", edit: set("Origin", "https://127.8.9.10:8443"), body: pingBody, want: 200},
		{name: "origin [::1]", edit: set("Origin", "http://[::1]:8080"), body: pingBody, want: 200},
		{name: "origin localhost GET", method: "GET", edit: set("Origin", "http://localhost"), want: 200},
		// Step 1: Host.
		{name: "host evil", edit: set("Host", "evil.example"), body: pingBody, want: 403},
		{name: "host evil with port", edit: set("Host", "evil.example:80"), body: pingBody, want: 403},
		{name: "host evil GET", method: "GET", edit: set("Host", "evil.example"), want: 403},
		{name: "host evil DELETE", method: "DELETE", edit: set("Host", "evil.example"), want: 403},
		{name: "host localhost", edit: set("Host", "localhost:8080"), body: pingBody, want: 200},
		{name: "host [::1]", edit: set("Host", "[::1]:9"), body: pingBody, want: 200},
		{name: "host 127.0.0.1 no port", edit: set("Host", "127.0.0.1"), body: pingBody, want: 200},
		// Step 2.
		{name: "no token", noToken: true, body: pingBody, want: 401, check: wantHeader("WWW-Authenticate", "Bearer")},
		{name: "no token initialize", session: "none", noToken: true, body: initBody(latestVersion), want: 401, createsNothing: true},
		{name: "no token GET", method: "GET", noToken: true, want: 401, check: wantHeader("WWW-Authenticate", "Bearer")},
		{name: "no token DELETE", method: "DELETE", noToken: true, want: 401, check: wantHeader("WWW-Authenticate", "Bearer")},
		{name: "basic scheme", edit: set("Authorization", "Basic "+tok), body: pingBody, want: 401, check: wantHeader("WWW-Authenticate", invalidToken)},
		{name: "empty bearer", edit: set("Authorization", "Bearer"), body: pingBody, want: 401, check: wantHeader("WWW-Authenticate", invalidToken)},
		{name: "unknown token", edit: set("Authorization", "Bearer "+strings.Repeat("x", 43)), body: pingBody, want: 401, check: wantHeader("WWW-Authenticate", invalidToken)},
		{name: "no-store on 401", edit: set("Authorization", "Bearer nope"), body: pingBody, want: 401, check: wantHeader("Cache-Control", "no-store")},
		{name: "bearer scheme any case", edit: set("Authorization", "bearer "+tok), body: pingBody, want: 200},
		// Step 3.
		{name: "unknown session", session: "unknown", body: pingBody, want: 404, check: notFound},
		{name: "foreign session", edit: set("Authorization", "Bearer "+other), body: pingBody, want: 404, check: notFound},
		// Step 4: version.
		{name: "unsupported version", edit: set("MCP-Protocol-Version", "2024-11-05"), body: pingBody, want: 400, code: -32022},
		{name: "unsupported version GET", method: "GET", edit: set("MCP-Protocol-Version", "2024-11-05"), want: 400, code: -32022},
		{name: "unsupported version DELETE", method: "DELETE", session: "fresh", edit: set("MCP-Protocol-Version", "2024-11-05"), want: 400, code: -32022},
		{name: "unsupported version initialize", session: "none", edit: set("MCP-Protocol-Version", "1999-01-01"), body: initBody(latestVersion), want: 400, code: -32022, createsNothing: true},
		{name: "absent version", edit: set("MCP-Protocol-Version", ""), body: pingBody, want: 200},
		{name: "absent version GET", method: "GET", edit: set("MCP-Protocol-Version", ""), want: 200},
		{name: "version 2025-11-25", edit: set("MCP-Protocol-Version", "2025-11-25"), body: pingBody, want: 200},
		{name: "version 2025-06-18", edit: set("MCP-Protocol-Version", "2025-06-18"), body: pingBody, want: 200},
		{name: "version 2025-03-26", edit: set("MCP-Protocol-Version", "2025-03-26"), body: pingBody, want: 200},
		// Step 4: Accept.
		{name: "accept json only", edit: set("Accept", "application/json"), body: pingBody, want: 406},
		{name: "accept sse only", edit: set("Accept", "text/event-stream"), body: pingBody, want: 406},
		{name: "accept absent", edit: set("Accept", ""), body: pingBody, want: 406},
		{name: "accept any", edit: set("Accept", "*/*"), body: pingBody, want: 200},
		{name: "accept with parameters", edit: set("Accept", "application/json;q=0.9, text/event-stream;q=0.5"), body: pingBody, want: 200},
		{name: "GET accept json", method: "GET", edit: set("Accept", "application/json"), want: 406},
		{name: "GET accept absent", method: "GET", edit: set("Accept", ""), want: 406},
		// Step 4: Content-Type, size, JSON.
		{name: "content type text", edit: set("Content-Type", "text/plain"), body: pingBody, want: 415},
		{name: "content type absent", edit: set("Content-Type", ""), body: pingBody, want: 415},
		{name: "content type with charset", edit: set("Content-Type", "application/json; charset=utf-8"), body: pingBody, want: 200},
		{name: "body at the limit", body: atLimit, want: 200},
		{name: "body over the limit", body: overLimit, want: 413},
		{name: "malformed JSON", body: malformed, want: 400, code: -32700},
		{name: "trailing data", body: pingBody + ` {}`, want: 400, code: -32700},
		{name: "empty body", body: "", want: 400, code: -32700},
		{name: "batch", body: "[" + pingBody + "]", want: 400, code: -32600},
		{name: "not JSON-RPC 2.0", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, want: 400, code: -32600},
		// Step 4: session required.
		{name: "ping without session", session: "none", body: pingBody, want: 400, code: -32000},
		{name: "tools/list without session", session: "none", body: toolsListBody, want: 400, code: -32000},
		{name: "notification without session", session: "none", body: initializedBody, want: 400, code: -32000},
		{name: "server/discover without session", session: "none", body: serverDiscoverReq, want: 400, code: -32601},
		{name: "GET without session", method: "GET", session: "none", want: 400},
		{name: "DELETE without session", method: "DELETE", session: "none", want: 400},
		// Other methods.
		{name: "PUT", method: "PUT", body: pingBody, want: 405, check: wantHeader("Allow", "POST, GET, DELETE")},
		{name: "PATCH", method: "PATCH", body: pingBody, want: 405, check: wantHeader("Allow", "POST, GET, DELETE")},
		// Order of the steps.
		{name: "origin before auth", noToken: true, edit: set("Origin", "http://evil.example"), body: pingBody, want: 403},
		{name: "host before auth", noToken: true, edit: set("Host", "evil.example"), body: pingBody, want: 403},
		{name: "auth before session", noToken: true, session: "unknown", body: pingBody, want: 401},
		{name: "session before version", session: "unknown", edit: set("MCP-Protocol-Version", "2024-11-05"), body: pingBody, want: 404},
		{name: "foreign session before protocol checks", edit: set("Authorization", "Bearer "+other, "MCP-Protocol-Version", "bad", "Accept", "", "Content-Type", ""), body: malformed, want: 404, check: notFound},
		{name: "version before accept", edit: set("MCP-Protocol-Version", "2024-11-05", "Accept", ""), body: pingBody, want: 400, code: -32022},
		{name: "accept before content type", edit: set("Accept", "", "Content-Type", "text/plain"), body: pingBody, want: 406},
		{name: "content type before size", edit: set("Content-Type", "text/plain"), body: overLimit, want: 415},
		{name: "size before JSON", body: malformed + strings.Repeat(" ", limit), want: 413},
		// Dispatched.
		{name: "notification", body: initializedBody, want: 202},
		{name: "response", body: `{"jsonrpc":"2.0","id":99,"result":{}}`, want: 202},
		{name: "ping", body: pingBody, want: 200, check: func(t *testing.T, res *httpResult) {
			if a := res.rpc(t); string(a.Result) != "{}" || string(a.ID) != "2" {
				t.Fatalf("ping = %s, want id 2 and result {}", res)
			}
		}},
		{name: "tools/list", body: toolsListBody, want: 200, check: func(t *testing.T, res *httpResult) {
			var r struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			decodeResult(t, res, &r)
			var names []string
			for _, tool := range r.Tools {
				names = append(names, tool.Name)
			}
			if got := strings.Join(names, ","); got != "runtime_capabilities,thread_list,thread_post,thread_read" {
				t.Fatalf("tools/list names = %s, want the built-in tools", got)
			}
		}},
		{name: "unknown method", body: `{"jsonrpc":"2.0","id":6,"method":"resources/list"}`, want: 200, code: -32601},
		{name: "server/discover with session", body: serverDiscoverReq, want: 200, code: -32601},
		{name: "unknown tool", body: callBody("7", "no_such_tool", ""), want: 200, code: -32602},
		{name: "tools/call without name", body: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}`, want: 200, code: -32602},
		{name: "initialize without protocolVersion", session: "none", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, want: 200, code: -32602, createsNothing: true},
		{name: "initialize on a session", body: initBody(latestVersion), want: 400, code: -32600},
	}
	runStatusRows(t, e, tok, sid, rows)
	e.wantPing("the matrix's session afterwards", tok, sid)
}

// TestHTTPStatusProtocolNegotiation: initialize answers the requested
// version when it is served, else the newest.
func TestHTTPStatusProtocolNegotiation(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{ServerName: "negotiation", ServerVersion: "9.9"})
	tests := []struct{ requested, want string }{
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
		{"2025-03-26", "2025-03-26"},
		{"2024-11-05", "2025-11-25"},
		{"2099-01-01", "2025-11-25"},
	}
	for _, test := range tests {
		t.Run(test.requested, func(t *testing.T) {
			res := e.post(ct.Token, "", initBody(test.requested))
			wantStatus(t, "initialize", res, http.StatusOK)
			var r struct {
				ProtocolVersion string `json:"protocolVersion"`
				Capabilities    struct {
					Tools json.RawMessage `json:"tools"`
				} `json:"capabilities"`
				ServerInfo struct{ Name, Version string } `json:"serverInfo"`
			}
			decodeResult(t, res, &r)
			if r.ProtocolVersion != test.want || r.Capabilities.Tools == nil || r.ServerInfo.Name != "negotiation" || r.ServerInfo.Version != "9.9" {
				t.Fatalf("initialize(%s) = %s, want protocolVersion %s, tools capability, serverInfo negotiation 9.9", test.requested, res, test.want)
			}
			sid := res.Header.Get("Mcp-Session-Id")
			if !validSessionID(sid) {
				t.Fatalf("Mcp-Session-Id = %q, want mcps_ + 32 hex", sid)
			}
			h := mcpHeaders(ct.Token, sid)
			h.Set("MCP-Protocol-Version", test.want)
			wantStatus(t, "ping with the negotiated version", e.do(http.MethodPost, h, pingBody), http.StatusOK)
		})
	}
}

// TestHTTPStatusGuardOptions: AllowedOrigins, AllowedHosts, AllowAnyOrigin,
// DisableHostCheck and MaxBodyBytes are honoured.
func TestHTTPStatusGuardOptions(t *testing.T) {
	tests := []struct {
		name string
		opts mcpruntime.MCPOptions
		rows []statusRow
	}{
		{"allowed origins", mcpruntime.MCPOptions{AllowedOrigins: []string{"https://app.example"}}, []statusRow{
			{name: "listed", edit: set("Origin", "https://app.example"), body: pingBody, want: 200},
			{name: "listed GET", method: "GET", edit: set("Origin", "https://app.example"), want: 200},
			{name: "other port", edit: set("Origin", "https://app.example:8443"), body: pingBody, want: 403},
			{name: "other scheme", edit: set("Origin", "http://app.example"), body: pingBody, want: 403},
			{name: "unlisted", edit: set("Origin", "http://evil.example"), body: pingBody, want: 403},
			{name: "loopback still allowed", edit: set("Origin", "http://localhost:3000"), body: pingBody, want: 200},
		}},
		{"allowed hosts", mcpruntime.MCPOptions{AllowedHosts: []string{"mcp.example"}}, []statusRow{
			{name: "listed", edit: set("Host", "mcp.example"), body: pingBody, want: 200},
			{name: "listed with port", edit: set("Host", "mcp.example:8443"), body: pingBody, want: 200},
			{name: "listed DELETE fresh", method: "DELETE", session: "fresh", edit: set("Host", "mcp.example"), want: 204},
			{name: "subdomain", edit: set("Host", "a.mcp.example"), body: pingBody, want: 403},
			{name: "unlisted", edit: set("Host", "evil.example"), body: pingBody, want: 403},
			{name: "loopback still allowed", edit: set("Host", "localhost"), body: pingBody, want: 200},
		}},
		{"any origin", mcpruntime.MCPOptions{AllowAnyOrigin: true}, []statusRow{
			{name: "evil origin", edit: set("Origin", "http://evil.example"), body: pingBody, want: 200},
			{name: "evil host still refused", edit: set("Host", "evil.example"), body: pingBody, want: 403},
		}},
		{"host check off", mcpruntime.MCPOptions{DisableHostCheck: true}, []statusRow{
			{name: "evil host", edit: set("Host", "evil.example"), body: pingBody, want: 200},
			{name: "evil origin still refused", edit: set("Origin", "http://evil.example"), body: pingBody, want: 403},
		}},
		{"max body", mcpruntime.MCPOptions{MaxBodyBytes: 1024}, []statusRow{
			{name: "at the limit", body: pingBody + strings.Repeat(" ", 1024-len(pingBody)), want: 200},
			{name: "over the limit", body: pingBody + strings.Repeat(" ", 1025-len(pingBody)), want: 413},
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
			e := newMCPEnv(t, rt, test.opts)
			sid := e.initialize(ct.Token)
			runStatusRows(t, e, ct.Token, sid, test.rows)
		})
	}
}

// TestHTTPStatusNamespaceCapEvicts: with the namespace full, initialize
// evicts its least recently active idle session; its id then answers 404.
func TestHTTPStatusNamespaceCapEvicts(t *testing.T) {
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: mcpruntime.NoExpiry})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok := openMinted(t, rt, "T", "A")
	_, other := openMinted(t, rt, "U", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxSessionsPerNamespace: 2})

	first := e.initialize(tok)
	clk.Advance(time.Second)
	second := e.initialize(tok)
	clk.Advance(time.Second)
	e.wantPing("first, made the more recent", tok, first)
	clk.Advance(time.Second)
	// Another namespace's session does not count against this one.
	otherSID := e.initialize(other)
	clk.Advance(time.Second)

	third := e.initialize(tok)
	wantStatus(t, "ping the evicted second session", e.post(tok, second, pingBody), http.StatusNotFound)
	if hasRecord(rt, second) {
		t.Fatalf("record of evicted session %s still there", second)
	}
	e.wantPing("first", tok, first)
	e.wantPing("third", tok, third)
	e.wantPing("other namespace", other, otherSID)
	if n := e.srv.Sessions(); n != 3 {
		t.Fatalf("Sessions() = %d, want 3", n)
	}
	if recs := mcpRecords(t, rt); len(recs) != 3 {
		t.Fatalf("records = %v, want 3", recs)
	}
}

// TestHTTPStatusNamespaceCapBusy429: with every session of the full
// namespace busy (an open stream each), initialize gets 429 with
// Retry-After and creates nothing; once one is idle it is evicted instead.
func TestHTTPStatusNamespaceCapBusy429(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok := openMinted(t, rt, "T", "A")
	_, other := openMinted(t, rt, "U", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxSessionsPerNamespace: 2, RetryAfter: 3 * time.Second})

	s1, s2 := e.initialize(tok), e.initialize(tok)
	st1, st2 := e.stream(tok, s1), e.stream(tok, s2)

	res := e.post(tok, "", initBody(latestVersion))
	wantStatus(t, "initialize with every session busy", res, http.StatusTooManyRequests)
	wantHeader("Retry-After", "3")(t, res)
	if res.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("429 carries Mcp-Session-Id %q", res.Header.Get("Mcp-Session-Id"))
	}
	if n, recs := e.srv.Sessions(), mcpRecords(t, rt); n != 2 || len(recs) != 2 {
		t.Fatalf("after 429: %d sessions, records %v; want the 2 busy ones", n, recs)
	}
	e.initialize(other) // the cap is per namespace

	st1.close()
	var third string
	waitUntil(t, "initialize once s1 is idle", func() bool {
		res := e.post(tok, "", initBody(latestVersion))
		switch res.Status {
		case http.StatusOK:
			third = res.Header.Get("Mcp-Session-Id")
			return true
		case http.StatusTooManyRequests:
			return false
		}
		t.Fatalf("initialize = %s, want 200 or 429", res)
		return false
	})
	wantStatus(t, "ping the evicted s1", e.post(tok, s1, pingBody), http.StatusNotFound)
	e.wantPing("s2, busy", tok, s2)
	e.wantPing("third", tok, third)
	if !st2.isOpen() {
		t.Fatal("the stream of s2 ended")
	}
}

// TestHTTPStatusGlobalCap503: past MaxSessions, initialize gets 503 with
// Retry-After whatever the namespace; a DELETE frees a slot.
func TestHTTPStatusGlobalCap503(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok1 := openMinted(t, rt, "T", "A")
	_, tok2 := openMinted(t, rt, "U", "A")
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxSessions: 2})

	s1 := e.initialize(tok1)
	e.initialize(tok2)
	for _, tok := range []string{ct.Token, tok1} {
		res := e.post(tok, "", initBody(latestVersion))
		wantStatus(t, "initialize past MaxSessions", res, http.StatusServiceUnavailable)
		wantHeader("Retry-After", "1")(t, res)
	}
	if n, recs := e.srv.Sessions(), mcpRecords(t, rt); n != 2 || len(recs) != 2 {
		t.Fatalf("after 503: %d sessions, records %v; want 2", n, recs)
	}
	wantStatus(t, "DELETE s1", e.del(tok1, s1), http.StatusNoContent)
	waitUntil(t, "initialize after a DELETE", func() bool {
		res := e.post(ct.Token, "", initBody(latestVersion))
		if res.Status != http.StatusOK && res.Status != http.StatusServiceUnavailable {
			t.Fatalf("initialize = %s, want 200 or 503", res)
		}
		return res.Status == http.StatusOK
	})
}

// TestHTTPStatusConcurrentInitializeCap: concurrent initializes never take
// the endpoint past MaxSessions: exactly the cap succeed, the rest get 503.
func TestHTTPStatusConcurrentInitializeCap(t *testing.T) {
	const maxSessions, clients = 5, 20
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok1 := openMinted(t, rt, "T", "A")
	_, tok2 := openMinted(t, rt, "U", "A")
	c1, _ := issueClient(t, rt, "one", memdb.AccessReadOnly)
	c2, _ := issueClient(t, rt, "two", memdb.AccessReadWrite)
	toks := []string{tok1, tok2, c1.Token, c2.Token}
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxSessions: maxSessions})

	var (
		over   atomic.Int64 // highest count seen by the monitor
		stop   = make(chan struct{})
		wg     sync.WaitGroup
		mu     sync.Mutex
		status = map[int]int{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			recs := rt.MCPSessions()
			n := int64(max(e.srv.Sessions(), len(recs)))
			if n > over.Load() {
				over.Store(n)
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	start := make(chan struct{})
	var clientsWG sync.WaitGroup
	for i := range clients {
		clientsWG.Add(1)
		req := e.newRequest(t.Context(), http.MethodPost, mcpHeaders(toks[i%len(toks)], ""), initBody(latestVersion))
		go func() {
			defer clientsWG.Done()
			<-start
			resp, err := e.ts.Client().Do(req)
			code := -1
			if err == nil {
				code = resp.StatusCode
				resp.Body.Close()
			}
			mu.Lock()
			status[code]++
			mu.Unlock()
		}()
	}
	close(start)
	clientsWG.Wait()
	close(stop)
	wg.Wait()

	want := map[int]int{http.StatusOK: maxSessions, http.StatusServiceUnavailable: clients - maxSessions}
	if fmt.Sprint(status) != fmt.Sprint(want) {
		t.Fatalf("statuses of %d concurrent initializes = %v, want %v", clients, status, want)
	}
	if got := over.Load(); got > maxSessions {
		t.Fatalf("saw %d sessions at once, cap %d", got, maxSessions)
	}
	if n, recs := e.srv.Sessions(), mcpRecords(t, rt); n != maxSessions || len(recs) != maxSessions {
		t.Fatalf("after the initializes: %d sessions, records %v; want %d", n, recs, maxSessions)
	}
}

// TestHTTPStatusIdleTimeout: a session with nothing open for IdleTimeout
// is evicted (its id then 404s); an open stream or a call in flight keeps
// one alive, and it is evicted once they end. The clock is fake, so no
// session goes idle while the test sets up, however slow the machine (on
// the real clock, 200 ms between an initialize and its stream or call could
// evict it); the sweep wakes on real time and reads the clock.
func TestHTTPStatusIdleTimeout(t *testing.T) {
	const idleAfter = 200 * time.Millisecond
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	tool := registerBlockingTool(t, rt, "block", false)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{IdleTimeout: idleAfter})

	streamed := e.initialize(tok)
	st := e.stream(tok, streamed)
	calling := e.initialize(tok)
	call := e.asyncPost(tok, calling, callBody(`"slow"`, "block", ""))
	tool.waitStarted(t, "blocking call")
	idle := e.initialize(tok)

	clk.Advance(idleAfter)
	waitSessionGone(t, rt, "idle session", idle)
	wantStatus(t, "ping the evicted idle session", e.post(tok, idle, pingBody), http.StatusNotFound)
	// A session started after that eviction going idle too means the busy
	// ones have been past their timeout at least once.
	sentinel := e.initialize(tok)
	clk.Advance(idleAfter)
	waitSessionGone(t, rt, "sentinel session", sentinel)
	if !hasRecord(rt, streamed) || !hasRecord(rt, calling) || !st.isOpen() {
		t.Fatalf("busy sessions evicted: streamed %v (stream open %v), calling %v", hasRecord(rt, streamed), st.isOpen(), hasRecord(rt, calling))
	}

	// A stream's or a call's end is its session's last activity, at a
	// moment the test does not see: the clock moves on until the sweep
	// finds the session idle.
	idleUntilGone := func(what, sid string) {
		t.Helper()
		waitUntil(t, what+": session record removed", func() bool {
			clk.Advance(idleAfter)
			return !hasRecord(rt, sid)
		})
	}
	st.close()
	idleUntilGone("session whose stream closed", streamed)
	wantStatus(t, "cancel the call", e.post(tok, calling, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow"}}`), http.StatusAccepted)
	tool.wantCancelled(t, "blocking call")
	call.await(t, "blocking call")
	idleUntilGone("session whose call ended", calling)
	waitUntil(t, "session count back to 0", func() bool { return e.srv.Sessions() == 0 })
}

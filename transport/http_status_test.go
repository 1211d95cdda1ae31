package transport_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
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
	check          func(t *testing.T, res *ht.Result)
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
				s = ht.MadeUpSessionID
			case "fresh":
				s = e.Initialize(tok)
			}
			tk := tok
			if row.noToken {
				tk = ""
			}
			h := ht.Headers(tk, s)
			switch method {
			case http.MethodGet:
				h = ht.GetHeaders(tk, s)
			case http.MethodDelete:
				h.Del("Content-Type")
			}
			if row.edit != nil {
				row.edit(h)
			}
			before := mcpRecords(t, e.f)
			var res *ht.Result
			if method == http.MethodGet {
				var st *ht.Stream
				st, res = e.OpenStream(h)
				if st != nil {
					st.Close()
					// The server notices the client went away asynchronously;
					// the next row's GET must not find this stream still open.
					ht.WaitUntil(t, "stream released", func() bool {
						for _, info := range e.srv.SessionInfos() {
							if info.ID == s && info.Busy {
								return false
							}
						}
						return true
					})
				}
			} else {
				res = e.Do(method, h, row.body)
			}
			if res.Status != row.want {
				t.Fatalf("%s = %s, want %d", method, res, row.want)
			}
			if row.code != 0 {
				a := res.RPC(t)
				if a.Error == nil || a.Error.Code != row.code {
					t.Fatalf("%s = %s, want JSON-RPC error %d", method, res, row.code)
				}
			}
			if row.createsNothing {
				if after := mcpRecords(t, e.f); strings.Join(after, ",") != strings.Join(before, ",") || res.Header.Get("Mcp-Session-Id") != "" {
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
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	_, other := openMinted(t, f, "U", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)

	const limit = 4 << 20
	atLimit := ht.PingBody + strings.Repeat(" ", limit-len(ht.PingBody))
	overLimit := atLimit + " "
	malformed := `{"jsonrpc":"2.0","id":1,"method":`
	notFound := func(t *testing.T, res *ht.Result) {
		t.Helper()
		if want := e.Post(tok, ht.MadeUpSessionID, ht.PingBody); string(res.Body) != string(want.Body) {
			t.Fatalf("body %q, want the unknown-session body %q", res.Body, want.Body)
		}
	}
	rows := []statusRow{
		// Step 1: Origin.
		{name: "origin evil", edit: ht.Set("Origin", "http://evil.example"), body: ht.PingBody, want: 403},
		{name: "origin evil GET", method: "GET", edit: ht.Set("Origin", "http://evil.example"), want: 403},
		{name: "origin evil DELETE", method: "DELETE", edit: ht.Set("Origin", "http://evil.example"), want: 403},
		{name: "origin evil initialize", session: "none", edit: ht.Set("Origin", "http://evil.example"), body: ht.InitBody(ht.LatestVersion), want: 403, createsNothing: true},
		{name: "origin null", edit: ht.Set("Origin", "null"), body: ht.PingBody, want: 403},
		{name: "origin loopback name as subdomain", edit: ht.Set("Origin", "http://localhost.evil.example"), body: ht.PingBody, want: 403},
		{name: "origin localhost", edit: ht.Set("Origin", "http://localhost:5173"), body: ht.PingBody, want: 200},
		{name: "origin 127.0.0.1", edit: ht.Set("Origin", "http://127.0.0.1"), body: ht.PingBody, want: 200},
		{name: "origin 127.8.9.10", edit: ht.Set("Origin", "https://127.8.9.10:8443"), body: ht.PingBody, want: 200},
		{name: "origin [::1]", edit: ht.Set("Origin", "http://[::1]:8080"), body: ht.PingBody, want: 200},
		{name: "origin localhost GET", method: "GET", edit: ht.Set("Origin", "http://localhost"), want: 200},
		// Step 1: Host.
		{name: "host evil", edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 403},
		{name: "host evil with port", edit: ht.Set("Host", "evil.example:80"), body: ht.PingBody, want: 403},
		{name: "host evil GET", method: "GET", edit: ht.Set("Host", "evil.example"), want: 403},
		{name: "host evil DELETE", method: "DELETE", edit: ht.Set("Host", "evil.example"), want: 403},
		{name: "host localhost", edit: ht.Set("Host", "localhost:8080"), body: ht.PingBody, want: 200},
		{name: "host [::1]", edit: ht.Set("Host", "[::1]:9"), body: ht.PingBody, want: 200},
		{name: "host 127.0.0.1 no port", edit: ht.Set("Host", "127.0.0.1"), body: ht.PingBody, want: 200},
		// Step 2.
		{name: "no token", noToken: true, body: ht.PingBody, want: 401, check: ht.WantHeader("WWW-Authenticate", "Bearer")},
		{name: "no token initialize", session: "none", noToken: true, body: ht.InitBody(ht.LatestVersion), want: 401, createsNothing: true},
		{name: "no token GET", method: "GET", noToken: true, want: 401, check: ht.WantHeader("WWW-Authenticate", "Bearer")},
		{name: "no token DELETE", method: "DELETE", noToken: true, want: 401, check: ht.WantHeader("WWW-Authenticate", "Bearer")},
		{name: "basic scheme", edit: ht.Set("Authorization", "Basic "+tok), body: ht.PingBody, want: 401, check: ht.WantHeader("WWW-Authenticate", ht.InvalidToken)},
		{name: "empty bearer", edit: ht.Set("Authorization", "Bearer"), body: ht.PingBody, want: 401, check: ht.WantHeader("WWW-Authenticate", ht.InvalidToken)},
		{name: "unknown token", edit: ht.Set("Authorization", "Bearer "+strings.Repeat("x", 43)), body: ht.PingBody, want: 401, check: ht.WantHeader("WWW-Authenticate", ht.InvalidToken)},
		{name: "no-store on 401", edit: ht.Set("Authorization", "Bearer nope"), body: ht.PingBody, want: 401, check: ht.WantHeader("Cache-Control", "no-store")},
		{name: "bearer scheme any case", edit: ht.Set("Authorization", "bearer "+tok), body: ht.PingBody, want: 200},
		// Step 3.
		{name: "unknown session", session: "unknown", body: ht.PingBody, want: 404, check: notFound},
		{name: "foreign session", edit: ht.Set("Authorization", "Bearer "+other), body: ht.PingBody, want: 404, check: notFound},
		// Step 4: version.
		{name: "unsupported version", edit: ht.Set("MCP-Protocol-Version", "2024-11-05"), body: ht.PingBody, want: 400, code: -32022},
		{name: "unsupported version GET", method: "GET", edit: ht.Set("MCP-Protocol-Version", "2024-11-05"), want: 400, code: -32022},
		{name: "unsupported version DELETE", method: "DELETE", session: "fresh", edit: ht.Set("MCP-Protocol-Version", "2024-11-05"), want: 400, code: -32022},
		{name: "unsupported version initialize", session: "none", edit: ht.Set("MCP-Protocol-Version", "1999-01-01"), body: ht.InitBody(ht.LatestVersion), want: 400, code: -32022, createsNothing: true},
		{name: "absent version", edit: ht.Set("MCP-Protocol-Version", ""), body: ht.PingBody, want: 200},
		{name: "absent version GET", method: "GET", edit: ht.Set("MCP-Protocol-Version", ""), want: 200},
		{name: "version 2025-11-25", edit: ht.Set("MCP-Protocol-Version", "2025-11-25"), body: ht.PingBody, want: 200},
		{name: "version 2025-06-18", edit: ht.Set("MCP-Protocol-Version", "2025-06-18"), body: ht.PingBody, want: 200},
		{name: "version 2025-03-26", edit: ht.Set("MCP-Protocol-Version", "2025-03-26"), body: ht.PingBody, want: 200},
		// Step 4: Accept.
		{name: "accept json only", edit: ht.Set("Accept", "application/json"), body: ht.PingBody, want: 406},
		{name: "accept sse only", edit: ht.Set("Accept", "text/event-stream"), body: ht.PingBody, want: 406},
		{name: "accept absent", edit: ht.Set("Accept", ""), body: ht.PingBody, want: 406},
		{name: "accept any", edit: ht.Set("Accept", "*/*"), body: ht.PingBody, want: 200},
		{name: "accept with parameters", edit: ht.Set("Accept", "application/json;q=0.9, text/event-stream;q=0.5"), body: ht.PingBody, want: 200},
		{name: "GET accept json", method: "GET", edit: ht.Set("Accept", "application/json"), want: 406},
		{name: "GET accept absent", method: "GET", edit: ht.Set("Accept", ""), want: 406},
		// Step 4: Content-Type, size, JSON.
		{name: "content type text", edit: ht.Set("Content-Type", "text/plain"), body: ht.PingBody, want: 415},
		{name: "content type absent", edit: ht.Set("Content-Type", ""), body: ht.PingBody, want: 415},
		{name: "content type with charset", edit: ht.Set("Content-Type", "application/json; charset=utf-8"), body: ht.PingBody, want: 200},
		{name: "body at the limit", body: atLimit, want: 200},
		{name: "body over the limit", body: overLimit, want: 413},
		{name: "malformed JSON", body: malformed, want: 400, code: -32700},
		{name: "trailing data", body: ht.PingBody + ` {}`, want: 400, code: -32700},
		{name: "empty body", body: "", want: 400, code: -32700},
		{name: "batch", body: "[" + ht.PingBody + "]", want: 400, code: -32600},
		{name: "not JSON-RPC 2.0", body: `{"jsonrpc":"1.0","id":1,"method":"ping"}`, want: 400, code: -32600},
		// Step 4: session required.
		{name: "ping without session", session: "none", body: ht.PingBody, want: 400, code: -32000},
		{name: "tools/list without session", session: "none", body: ht.ToolsListBody, want: 400, code: -32000},
		{name: "notification without session", session: "none", body: ht.InitializedBody, want: 400, code: -32000},
		{name: "server/discover without session", session: "none", body: ht.ServerDiscoverReq, want: 400, code: -32601},
		{name: "GET without session", method: "GET", session: "none", want: 400},
		{name: "DELETE without session", method: "DELETE", session: "none", want: 400},
		// Other methods.
		{name: "PUT", method: "PUT", body: ht.PingBody, want: 405, check: ht.WantHeader("Allow", "POST, GET, DELETE")},
		{name: "PATCH", method: "PATCH", body: ht.PingBody, want: 405, check: ht.WantHeader("Allow", "POST, GET, DELETE")},
		// Order of the steps.
		{name: "origin before auth", noToken: true, edit: ht.Set("Origin", "http://evil.example"), body: ht.PingBody, want: 403},
		{name: "host before auth", noToken: true, edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 403},
		{name: "auth before session", noToken: true, session: "unknown", body: ht.PingBody, want: 401},
		{name: "session before version", session: "unknown", edit: ht.Set("MCP-Protocol-Version", "2024-11-05"), body: ht.PingBody, want: 404},
		{name: "foreign session before protocol checks", edit: ht.Set("Authorization", "Bearer "+other, "MCP-Protocol-Version", "bad", "Accept", "", "Content-Type", ""), body: malformed, want: 404, check: notFound},
		{name: "version before accept", edit: ht.Set("MCP-Protocol-Version", "2024-11-05", "Accept", ""), body: ht.PingBody, want: 400, code: -32022},
		{name: "accept before content type", edit: ht.Set("Accept", "", "Content-Type", "text/plain"), body: ht.PingBody, want: 406},
		{name: "content type before size", edit: ht.Set("Content-Type", "text/plain"), body: overLimit, want: 415},
		{name: "size before JSON", body: malformed + strings.Repeat(" ", limit), want: 413},
		// Dispatched.
		{name: "notification", body: ht.InitializedBody, want: 202},
		{name: "response", body: `{"jsonrpc":"2.0","id":99,"result":{}}`, want: 202},
		{name: "ping", body: ht.PingBody, want: 200, check: func(t *testing.T, res *ht.Result) {
			if a := res.RPC(t); string(a.Result) != "{}" || string(a.ID) != "2" {
				t.Fatalf("ping = %s, want id 2 and result {}", res)
			}
		}},
		{name: "tools/list", body: ht.ToolsListBody, want: 200, check: func(t *testing.T, res *ht.Result) {
			var r struct {
				Tools []struct {
					Name string `json:"name"`
				} `json:"tools"`
			}
			ht.DecodeResult(t, res, &r)
			var names []string
			for _, tool := range r.Tools {
				names = append(names, tool.Name)
			}
			if got := strings.Join(names, ","); got != "whoami" {
				t.Fatalf("tools/list names = %s, want the backend's tools", got)
			}
		}},
		{name: "unknown method", body: `{"jsonrpc":"2.0","id":6,"method":"resources/list"}`, want: 200, code: -32601},
		{name: "server/discover with session", body: ht.ServerDiscoverReq, want: 200, code: -32601},
		{name: "unknown tool", body: ht.CallBody("7", "no_such_tool", ""), want: 200, code: -32602},
		{name: "tools/call without name", body: `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{}}`, want: 200, code: -32602},
		{name: "initialize without protocolVersion", session: "none", body: `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, want: 200, code: -32602, createsNothing: true},
		{name: "initialize on a session", body: ht.InitBody(ht.LatestVersion), want: 400, code: -32600},
	}
	runStatusRows(t, e, tok, sid, rows)
	e.WantPing("the matrix's session afterwards", tok, sid)
}

// TestHTTPStatusProtocolNegotiation: initialize answers the requested
// version when it is served, else the newest.
func TestHTTPStatusProtocolNegotiation(t *testing.T) {
	f := newFake(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, transport.Options{ServerName: "negotiation", ServerVersion: "9.9"})
	tests := []struct{ requested, want string }{
		{"2025-11-25", "2025-11-25"},
		{"2025-06-18", "2025-06-18"},
		{"2025-03-26", "2025-03-26"},
		{"2024-11-05", "2025-11-25"},
		{"2099-01-01", "2025-11-25"},
	}
	for _, test := range tests {
		t.Run(test.requested, func(t *testing.T) {
			res := e.Post(ct.Token, "", ht.InitBody(test.requested))
			ht.WantStatus(t, "initialize", res, http.StatusOK)
			var r struct {
				ProtocolVersion string `json:"protocolVersion"`
				Capabilities    struct {
					Tools json.RawMessage `json:"tools"`
				} `json:"capabilities"`
				ServerInfo struct{ Name, Version string } `json:"serverInfo"`
			}
			ht.DecodeResult(t, res, &r)
			if r.ProtocolVersion != test.want || r.Capabilities.Tools == nil || r.ServerInfo.Name != "negotiation" || r.ServerInfo.Version != "9.9" {
				t.Fatalf("initialize(%s) = %s, want protocolVersion %s, tools capability, serverInfo negotiation 9.9", test.requested, res, test.want)
			}
			sid := res.Header.Get("Mcp-Session-Id")
			if !ht.ValidSessionID(sid) {
				t.Fatalf("Mcp-Session-Id = %q, want mcps_ + 32 hex", sid)
			}
			h := ht.Headers(ct.Token, sid)
			h.Set("MCP-Protocol-Version", test.want)
			ht.WantStatus(t, "ping with the negotiated version", e.Do(http.MethodPost, h, ht.PingBody), http.StatusOK)
		})
	}
}

// TestHTTPStatusGuardOptions: AllowedOrigins, AllowedHosts, AllowAnyOrigin,
// DisableHostCheck and MaxBodyBytes are honoured.
func TestHTTPStatusGuardOptions(t *testing.T) {
	tests := []struct {
		name string
		opts transport.Options
		rows []statusRow
	}{
		{"allowed origins", transport.Options{AllowedOrigins: []string{"https://app.example"}}, []statusRow{
			{name: "listed", edit: ht.Set("Origin", "https://app.example"), body: ht.PingBody, want: 200},
			{name: "listed GET", method: "GET", edit: ht.Set("Origin", "https://app.example"), want: 200},
			{name: "other port", edit: ht.Set("Origin", "https://app.example:8443"), body: ht.PingBody, want: 403},
			{name: "other scheme", edit: ht.Set("Origin", "http://app.example"), body: ht.PingBody, want: 403},
			{name: "unlisted", edit: ht.Set("Origin", "http://evil.example"), body: ht.PingBody, want: 403},
			{name: "loopback still allowed", edit: ht.Set("Origin", "http://localhost:3000"), body: ht.PingBody, want: 200},
		}},
		{"allowed hosts", transport.Options{AllowedHosts: []string{"mcp.example"}}, []statusRow{
			{name: "listed", edit: ht.Set("Host", "mcp.example"), body: ht.PingBody, want: 200},
			{name: "listed with port", edit: ht.Set("Host", "mcp.example:8443"), body: ht.PingBody, want: 200},
			{name: "listed DELETE fresh", method: "DELETE", session: "fresh", edit: ht.Set("Host", "mcp.example"), want: 204},
			{name: "subdomain", edit: ht.Set("Host", "a.mcp.example"), body: ht.PingBody, want: 403},
			{name: "unlisted", edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 403},
			{name: "loopback still allowed", edit: ht.Set("Host", "localhost"), body: ht.PingBody, want: 200},
		}},
		{"any origin", transport.Options{AllowAnyOrigin: true}, []statusRow{
			{name: "evil origin", edit: ht.Set("Origin", "http://evil.example"), body: ht.PingBody, want: 200},
			{name: "evil host still refused", edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 403},
		}},
		{"host check off", transport.Options{DisableHostCheck: true}, []statusRow{
			{name: "evil host", edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 200},
			{name: "evil origin still refused", edit: ht.Set("Origin", "http://evil.example"), body: ht.PingBody, want: 403},
		}},
		{"max body", transport.Options{MaxBodyBytes: 1024}, []statusRow{
			{name: "at the limit", body: ht.PingBody + strings.Repeat(" ", 1024-len(ht.PingBody)), want: 200},
			{name: "over the limit", body: ht.PingBody + strings.Repeat(" ", 1025-len(ht.PingBody)), want: 413},
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			f := newFake(t)
			ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
			e := newMCPEnv(t, f, test.opts)
			sid := e.Initialize(ct.Token)
			runStatusRows(t, e, ct.Token, sid, test.rows)
		})
	}
}

// TestHTTPStatusNamespaceCapEvicts: with the namespace full, initialize
// evicts its least recently active idle session; its id then answers 404.
func TestHTTPStatusNamespaceCapEvicts(t *testing.T) {
	f := newFake(t)
	clk := f.clock
	_, tok := openMinted(t, f, "T", "A")
	_, other := openMinted(t, f, "U", "A")
	e := newMCPEnv(t, f, transport.Options{MaxSessionsPerNamespace: 2})

	first := e.Initialize(tok)
	clk.Advance(time.Second)
	second := e.Initialize(tok)
	clk.Advance(time.Second)
	e.WantPing("first, made the more recent", tok, first)
	clk.Advance(time.Second)
	// Another namespace's session does not count against this one.
	otherSID := e.Initialize(other)
	clk.Advance(time.Second)

	third := e.Initialize(tok)
	ht.WantStatus(t, "ping the evicted second session", e.Post(tok, second, ht.PingBody), http.StatusNotFound)
	if hasRecord(f, second) {
		t.Fatalf("record of evicted session %s still there", second)
	}
	e.WantPing("first", tok, first)
	e.WantPing("third", tok, third)
	e.WantPing("other namespace", other, otherSID)
	if n := e.srv.Sessions(); n != 3 {
		t.Fatalf("Sessions() = %d, want 3", n)
	}
	if recs := mcpRecords(t, f); len(recs) != 3 {
		t.Fatalf("records = %v, want 3", recs)
	}
}

// TestHTTPStatusNamespaceCapBusy429: with every session of the full
// namespace busy (an open stream each), initialize gets 429 with
// Retry-After and creates nothing; once one is idle it is evicted instead.
func TestHTTPStatusNamespaceCapBusy429(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	_, other := openMinted(t, f, "U", "A")
	e := newMCPEnv(t, f, transport.Options{MaxSessionsPerNamespace: 2, RetryAfter: 3 * time.Second})

	s1, s2 := e.Initialize(tok), e.Initialize(tok)
	st1, st2 := e.Stream(tok, s1), e.Stream(tok, s2)

	res := e.Post(tok, "", ht.InitBody(ht.LatestVersion))
	ht.WantStatus(t, "initialize with every session busy", res, http.StatusTooManyRequests)
	ht.WantHeader("Retry-After", "3")(t, res)
	if res.Header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("429 carries Mcp-Session-Id %q", res.Header.Get("Mcp-Session-Id"))
	}
	if n, recs := e.srv.Sessions(), mcpRecords(t, f); n != 2 || len(recs) != 2 {
		t.Fatalf("after 429: %d sessions, records %v; want the 2 busy ones", n, recs)
	}
	e.Initialize(other) // the cap is per namespace

	st1.Close()
	var third string
	ht.WaitUntil(t, "initialize once s1 is idle", func() bool {
		res := e.Post(tok, "", ht.InitBody(ht.LatestVersion))
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
	ht.WantStatus(t, "ping the evicted s1", e.Post(tok, s1, ht.PingBody), http.StatusNotFound)
	e.WantPing("s2, busy", tok, s2)
	e.WantPing("third", tok, third)
	if !st2.IsOpen() {
		t.Fatal("the stream of s2 ended")
	}
}

// TestHTTPStatusGlobalCap503: past MaxSessions, initialize gets 503 with
// Retry-After whatever the namespace; a DELETE frees a slot.
func TestHTTPStatusGlobalCap503(t *testing.T) {
	f := newFake(t)
	_, tok1 := openMinted(t, f, "T", "A")
	_, tok2 := openMinted(t, f, "U", "A")
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, transport.Options{MaxSessions: 2})

	s1 := e.Initialize(tok1)
	e.Initialize(tok2)
	for _, tok := range []string{ct.Token, tok1} {
		res := e.Post(tok, "", ht.InitBody(ht.LatestVersion))
		ht.WantStatus(t, "initialize past MaxSessions", res, http.StatusServiceUnavailable)
		ht.WantHeader("Retry-After", "1")(t, res)
	}
	if n, recs := e.srv.Sessions(), mcpRecords(t, f); n != 2 || len(recs) != 2 {
		t.Fatalf("after 503: %d sessions, records %v; want 2", n, recs)
	}
	ht.WantStatus(t, "DELETE s1", e.Del(tok1, s1), http.StatusNoContent)
	ht.WaitUntil(t, "initialize after a DELETE", func() bool {
		res := e.Post(ct.Token, "", ht.InitBody(ht.LatestVersion))
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
	f := newFake(t)
	_, tok1 := openMinted(t, f, "T", "A")
	_, tok2 := openMinted(t, f, "U", "A")
	c1, _ := issueClient(t, f, "one", memdb.AccessReadOnly)
	c2, _ := issueClient(t, f, "two", memdb.AccessReadWrite)
	toks := []string{tok1, tok2, c1.Token, c2.Token}
	e := newMCPEnv(t, f, transport.Options{MaxSessions: maxSessions})

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
			recs, _ := f.store.Read().MCPSessions()
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
		req := e.NewRequest(t.Context(), http.MethodPost, ht.Headers(toks[i%len(toks)], ""), ht.InitBody(ht.LatestVersion))
		go func() {
			defer clientsWG.Done()
			<-start
			resp, err := e.TS.Client().Do(req)
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
	if n, recs := e.srv.Sessions(), mcpRecords(t, f); n != maxSessions || len(recs) != maxSessions {
		t.Fatalf("after the initializes: %d sessions, records %v; want %d", n, recs, maxSessions)
	}
}

// TestHTTPStatusIdleTimeout: a session with nothing open for IdleTimeout
// is evicted (its id then 404s); an open stream or a call in flight keeps
// one alive, and it is evicted once they end.
func TestHTTPStatusIdleTimeout(t *testing.T) {
	const idleAfter = 200 * time.Millisecond
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	tool := f.blocking("block", false)
	// The fake clock: on the real one a session could go idle between its
	// initialize and its stream on a busy machine. The sweep's timer runs on
	// real time and judges idleness by this clock.
	e := newMCPEnv(t, f, transport.Options{IdleTimeout: idleAfter})

	streamed := e.Initialize(tok)
	st := e.Stream(tok, streamed)
	calling := e.Initialize(tok)
	call := e.AsyncPost(tok, calling, ht.CallBody(`"slow"`, "block", ""))
	tool.WaitStarted(t, "blocking call")
	idle := e.Initialize(tok)

	f.clock.Advance(idleAfter)
	waitSessionGone(t, f, "idle session", idle)
	ht.WantStatus(t, "ping the evicted idle session", e.Post(tok, idle, ht.PingBody), http.StatusNotFound)
	// A session started after that eviction going idle too means the busy
	// ones have been past their timeout at least once.
	sentinel := e.Initialize(tok)
	f.clock.Advance(idleAfter)
	waitSessionGone(t, f, "sentinel session", sentinel)
	if !hasRecord(f, streamed) || !hasRecord(f, calling) || !st.IsOpen() {
		t.Fatalf("busy sessions evicted: streamed %v (stream open %v), calling %v", hasRecord(f, streamed), st.IsOpen(), hasRecord(f, calling))
	}

	// A stream's or a call's end is its session's last activity, at a
	// moment the test does not see: the clock moves on until the sweep
	// finds the session idle.
	idleUntilGone := func(what, sid string) {
		t.Helper()
		ht.WaitUntil(t, what+": session record removed", func() bool {
			f.clock.Advance(idleAfter)
			return !hasRecord(f, sid)
		})
	}
	st.Close()
	idleUntilGone("session whose stream closed", streamed)
	ht.WantStatus(t, "cancel the call", e.Post(tok, calling, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"slow"}}`), http.StatusAccepted)
	tool.WantCancelled(t, "blocking call")
	call.Await(t, "blocking call")
	idleUntilGone("session whose call ended", calling)
	ht.WaitUntil(t, "session count back to 0", func() bool { return e.srv.Sessions() == 0 })
}

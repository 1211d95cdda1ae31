package mcpruntime_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// wantErrorWithoutID requires a JSON body that is a JSON-RPC error with no
// id member: an error about a request whose id is not known omits the id
// (the schema has no null id).
func wantErrorWithoutID(t *testing.T, what string, res *httpResult) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s = %s, Content-Type %q; want application/json", what, res, ct)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(res.Body, &m); err != nil {
		t.Fatalf("%s = %s: body is not a JSON object: %v", what, res, err)
	}
	if string(m["jsonrpc"]) != `"2.0"` || len(m["error"]) == 0 {
		t.Fatalf("%s = %s, want a JSON-RPC error", what, res)
	}
	if id, ok := m["id"]; ok {
		t.Fatalf("%s = %s carries id %s, want no id member", what, res, id)
	}
}

// TestHTTPProtocolUnknownPathsJSON: paths other than the endpoint answer a
// JSON 404 whatever the method, and methods other than POST, GET and
// DELETE a JSON 405 (OAuth-probing clients parse the body of both).
func TestHTTPProtocolUnknownPathsJSON(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	paths := []string{"/", "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
		"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration", "/register", "/authorize",
		"/mcp/", "/mcpx", "/mcp/extra", "/MCP"}
	for _, path := range paths {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut} {
			res := e.doURL(e.ts.URL+path, method, mcpHeaders("", ""), `{"client_name":"x"}`)
			wantStatus(t, method+" "+path, res, http.StatusNotFound)
			wantErrorWithoutID(t, method+" "+path, res)
		}
	}
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodOptions, "PROPFIND"} {
		res := e.do(method, mcpHeaders("", ""), pingBody)
		wantStatus(t, method+" /mcp", res, http.StatusMethodNotAllowed)
		wantErrorWithoutID(t, method+" /mcp", res)
		wantHeader("Allow", "POST, GET, DELETE")(t, res)
	}
}

// TestHTTPProtocolNoNullID: every error answered before a request's id is
// known — each refusal of SPEC §5 steps 1–4 and the caps — carries no id
// member, never "id": null.
func TestHTTPProtocolNoNullID(t *testing.T) {
	rt, tok, other := twoCredentials(t)
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{MaxBodyBytes: 1024, MaxSessionsPerNamespace: 1, MaxSessions: 2})
	sid := e.initialize(tok)
	e.stream(tok, sid) // busy: the namespace's next initialize gets 429, not an eviction
	e.initialize(other)

	rows := []statusRow{
		{name: "401 no token", noToken: true, body: pingBody, want: 401},
		{name: "401 unknown token", edit: set("Authorization", "Bearer mcprt_nope"), body: pingBody, want: 401},
		{name: "401 GET", method: "GET", noToken: true, want: 401},
		{name: "403 origin", edit: set("Origin", "https://evil.example"), body: pingBody, want: 403},
		{name: "403 host", edit: set("Host", "evil.example"), body: pingBody, want: 403},
		{name: "404 unknown session", session: "unknown", body: pingBody, want: 404},
		{name: "404 foreign session", edit: set("Authorization", "Bearer "+other), body: pingBody, want: 404},
		{name: "405", method: "PUT", body: pingBody, want: 405},
		{name: "406 POST", edit: set("Accept", "application/json"), body: pingBody, want: 406},
		{name: "406 GET", method: "GET", edit: set("Accept", "application/json"), want: 406},
		{name: "409 second stream", method: "GET", want: 409},
		{name: "413", body: pingBody + strings.Repeat(" ", 1024), want: 413},
		{name: "415", edit: set("Content-Type", "text/plain"), body: pingBody, want: 415},
		{name: "400 malformed", body: `{"jsonrpc":`, want: 400},
		{name: "400 batch", body: "[" + pingBody + "]", want: 400},
		{name: "400 not an object", body: `"ping"`, want: 400},
		{name: "400 GET without session", method: "GET", session: "none", want: 400},
		{name: "400 DELETE without session", method: "DELETE", session: "none", want: 400},
		{name: "429 namespace cap", session: "none", body: initBody(latestVersion), want: 429},
		{name: "503 global cap", session: "none", edit: set("Authorization", "Bearer "+ct.Token), body: initBody(latestVersion), want: 503},
	}
	for i := range rows {
		rows[i].check = func(t *testing.T, res *httpResult) { wantErrorWithoutID(t, rows[i].name, res) }
	}
	runStatusRows(t, e, tok, sid, rows)
}

// wantValidJSON requires a body that is valid UTF-8 JSON.
func wantValidJSON(t *testing.T, what string, res *httpResult) {
	t.Helper()
	if !utf8.Valid(res.Body) || !json.Valid(res.Body) {
		t.Fatalf("%s = %d %q: not valid UTF-8 JSON", what, res.Status, res.Body)
	}
}

// TestHTTPProtocolInvalidUTF8: a body that is not valid UTF-8, or whose
// strings escape a lone surrogate (both would decode as U+FFFD, changing
// the text), is refused whole with 400 and -32700 before any member is
// used: no id is echoed (the answer is valid JSON), nothing is stored. A
// surrogate pair, and U+FFFD itself, are fine.
func TestHTTPProtocolInvalidUTF8(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	_, err := rt.StartRun(ctx, "T", "A")
	noErr(t, err)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)
	post := func(id, text string) string {
		return `{"jsonrpc":"2.0","id":` + id + `,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"` + text + `"}}}`
	}
	refused := []struct{ name, body string }{
		{"raw 0xff in an id", `{"jsonrpc":"2.0","id":"` + "\xff" + `","method":"ping"}`},
		{"raw 0xff in a text", post("1", "a\xffb")},
		{"truncated sequence", post("1", "caf\xc3")},
		{"overlong encoding", post("1", "\xc0\xaf")},
		{"encoded surrogate", post("1", "\xed\xa0\x80")},
		{"raw 0xff in a method", `{"jsonrpc":"2.0","id":1,"method":"pi` + "\xff" + `ng"}`},
		{"raw 0xff in a member name", `{"jsonrpc":"2.0","id":1,"method":"ping","x` + "\xff" + `":1}`},
		{"raw 0xff in a notification", `{"jsonrpc":"2.0","method":"notifications/` + "\xff" + `"}`},
		{"lone high surrogate", post("1", `a\ud800b`)},
		{"lone high surrogate at the end", post("1", `a\uD83D`)},
		{"high surrogate and a letter", post("1", `\ud83dx`)},
		{"two high surrogates", post("1", `\ud83d\ud83d`)},
		{"lone low surrogate", post("1", `\udc00`)},
		{"lone surrogate in an id", `{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`},
		{"raw 0xff in an initialize", `{"jsonrpc":"2.0","id":"` + "\xff" + `","method":"initialize","params":{"protocolVersion":"2025-11-25"}}`},
	}
	for _, test := range refused {
		sess := sid
		if strings.Contains(test.body, "initialize") {
			sess = ""
		}
		res := e.post(tok, sess, test.body)
		wantStatus(t, test.name, res, http.StatusBadRequest)
		wantValidJSON(t, test.name, res)
		wantErrorWithoutID(t, test.name, res)
		if a := res.rpc(t); a.Error.Code != -32700 {
			t.Fatalf("%s = %s, want -32700", test.name, res)
		}
	}
	if th, err := rt.Thread(ctx, "T"); err != nil || len(th.Messages) != 0 {
		t.Fatalf("thread T = %+v, %v; want no message stored", th, err)
	}

	accepted := []struct{ name, id, text, stored string }{
		{"surrogate pair", `"\ud83d\ude00"`, `smile \ud83d\ude00`, "smile 😀"},
		{"escaped backslash before u", "2", `\\ud800`, `\ud800`},
		{"U+FFFD itself", "3", "\uFFFD and \\ufffd", "\uFFFD and \uFFFD"},
		{"raw multibyte", "4", "héllo ✓ 😀", "héllo ✓ 😀"},
	}
	for i, test := range accepted {
		res := e.post(tok, sid, post(test.id, test.text))
		wantStatus(t, test.name, res, http.StatusOK)
		wantValidJSON(t, test.name, res)
		var r toolResult
		decodeResult(t, res, &r)
		if r.IsError {
			t.Fatalf("%s = %s, want the message stored", test.name, res)
		}
		th, err := rt.Thread(ctx, "T")
		noErr(t, err)
		if len(th.Messages) != i+1 || th.Messages[i].Text != test.stored {
			t.Fatalf("%s: messages %+v, want message %d %q", test.name, th.Messages, i, test.stored)
		}
	}
}

// unsupportedVersion is the error of a -32022 answer.
type unsupportedVersion struct {
	Code int `json:"code"`
	Data struct {
		Supported []string `json:"supported"`
		Requested string   `json:"requested"`
	} `json:"data"`
}

// TestHTTPProtocolModernProbe: until the 2026-07-28 era is served, a
// request that claims it — by MCP-Protocol-Version or by its body's _meta —
// or any version not served gets 400 with -32022 UnsupportedProtocolVersion,
// data.supported the 2025 versions and data.requested the claim, its id
// echoed when it has one: what clients such as Codex fall back to
// initialize on. Nothing is created or dispatched, and the SPEC §5 order
// holds (401 and 404 first).
func TestHTTPProtocolModernProbe(t *testing.T) {
	rt, tok, other := twoCredentials(t)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.initialize(tok)
	const modern = "2026-07-28"
	meta := func(version string) string {
		return `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `","io.modelcontextprotocol/clientCapabilities":{}}`
	}
	discover := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta(modern) + `}}`
	withHeader := func(version string) func(h http.Header) { return set("MCP-Protocol-Version", version) }
	tests := []struct {
		name      string
		method    string // "" = POST
		sid       string
		edit      func(h http.Header)
		body      string
		id        string // the id echoed; "" = none
		requested string
	}{
		{"server/discover", "", "", withHeader(modern), discover, "1", modern},
		{"server/discover, Mcp-Method too", "", "", set("MCP-Protocol-Version", modern, "Mcp-Method", "server/discover"), discover, "1", modern},
		{"tools/list with a string id", "", "", withHeader(modern), `{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{` + meta(modern) + `}}`, `"x"`, modern},
		{"tools/call on a session", "", sid, withHeader(modern), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"thread_list","arguments":{},` + meta(modern) + `}}`, "7", modern},
		{"unknown older version", "", "", withHeader("1900-01-01"), discover, "1", "1900-01-01"},
		{"not a version", "", sid, withHeader("garbage"), pingBody, "2", "garbage"},
		{"2024-11-05", "", sid, withHeader("2024-11-05"), pingBody, "2", "2024-11-05"},
		{"body claim only", "", "", withHeader(""), discover, "1", modern},
		{"body claim under a 2025 header", "", "", withHeader(latestVersion), discover, "1", modern},
		{"body claim of an unknown version", "", sid, nil, `{"jsonrpc":"2.0","id":3,"method":"ping","params":{` + meta("2099-01-01") + `}}`, "3", "2099-01-01"},
		{"initialize claiming the modern era", "", "", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` + meta(modern) + `}}`, "1", modern},
		{"notification", "", sid, withHeader(modern), initializedBody, "", modern},
		{"body not JSON", "", "", withHeader(modern), `{"jsonrpc":`, "", modern},
		{"Accept and Content-Type wrong too", "", "", set("MCP-Protocol-Version", modern, "Accept", "", "Content-Type", ""), discover, "1", modern},
		{"GET", http.MethodGet, sid, withHeader(modern), "", "", modern},
		{"DELETE", http.MethodDelete, sid, withHeader(modern), "", "", modern},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := mcpHeaders(tok, test.sid)
			switch test.method {
			case http.MethodGet:
				h = getHeaders(tok, test.sid)
			case http.MethodDelete:
				h.Del("Content-Type")
			}
			if test.edit != nil {
				test.edit(h)
			}
			method := test.method
			if method == "" {
				method = http.MethodPost
			}
			before := mcpRecords(t, rt)
			res := e.do(method, h, test.body)
			wantStatus(t, test.name, res, http.StatusBadRequest)
			wantValidJSON(t, test.name, res)
			var a struct {
				ID    json.RawMessage    `json:"id"`
				Error unsupportedVersion `json:"error"`
			}
			if err := json.Unmarshal(res.Body, &a); err != nil {
				t.Fatalf("%s = %s: %v", test.name, res, err)
			}
			if a.Error.Code != -32022 || strings.Join(a.Error.Data.Supported, ",") != "2025-11-25,2025-06-18,2025-03-26" || a.Error.Data.Requested != test.requested {
				t.Fatalf("%s = %s, want -32022 with supported [2025-11-25 2025-06-18 2025-03-26] and requested %q", test.name, res, test.requested)
			}
			if test.id == "" {
				wantErrorWithoutID(t, test.name, res)
			} else if string(a.ID) != test.id {
				t.Fatalf("%s = %s, want id %s echoed", test.name, res, test.id)
			}
			if res.Header.Get("Mcp-Session-Id") != "" || strings.Join(mcpRecords(t, rt), ",") != strings.Join(before, ",") {
				t.Fatalf("%s created or ended a session", test.name)
			}
		})
	}
	e.wantPing("the session after the probes", tok, sid)

	// The order of SPEC §5: a bad token, an unknown or foreign session come
	// first.
	h := mcpHeaders("", "")
	h.Set("MCP-Protocol-Version", modern)
	want401(t, "no token", e.do(http.MethodPost, h, discover), "Bearer")
	h = mcpHeaders(other, sid)
	h.Set("MCP-Protocol-Version", modern)
	wantStatus(t, "foreign session", e.do(http.MethodPost, h, discover), http.StatusNotFound)
	// A body claim of a served version is no refusal.
	e.wantPing("claim of a served version", tok, sid)
	res := e.post(tok, sid, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{`+meta(latestVersion)+`}}`)
	if res.Status != http.StatusOK || res.rpc(t).Error != nil {
		t.Fatalf("ping claiming %s = %s, want 200", latestVersion, res)
	}
}

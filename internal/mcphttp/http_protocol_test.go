package mcphttp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/mcphttp"
	ht "github.com/agenthost/mcpruntime/internal/mcphttp/mcphttptest"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestHTTPProtocolUnknownPathsJSON: paths other than the endpoint answer a
// JSON 404 whatever the method, and methods other than POST, GET and
// DELETE a JSON 405 (OAuth-probing clients parse the body of both).
func TestHTTPProtocolUnknownPathsJSON(t *testing.T) {
	f := newFake(t)
	e := newMCPEnv(t, f, mcphttp.Options{})
	paths := []string{"/", "/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource/mcp",
		"/.well-known/oauth-authorization-server", "/.well-known/openid-configuration", "/register", "/authorize",
		"/mcp/", "/mcpx", "/mcp/extra", "/MCP"}
	for _, path := range paths {
		for _, method := range []string{http.MethodGet, http.MethodPost, http.MethodDelete, http.MethodPut} {
			res := e.DoURL(e.TS.URL+path, method, ht.Headers("", ""), `{"client_name":"x"}`)
			ht.WantStatus(t, method+" "+path, res, http.StatusNotFound)
			ht.WantErrorWithoutID(t, method+" "+path, res)
		}
	}
	for _, method := range []string{http.MethodPut, http.MethodPatch, http.MethodOptions, "PROPFIND"} {
		res := e.Do(method, ht.Headers("", ""), ht.PingBody)
		ht.WantStatus(t, method+" /mcp", res, http.StatusMethodNotAllowed)
		ht.WantErrorWithoutID(t, method+" /mcp", res)
		ht.WantHeader("Allow", "POST, GET, DELETE")(t, res)
	}
}

// TestHTTPProtocolNoNullID: every error answered before a request's id is
// known — each refusal of SPEC §5 steps 1–4 and the caps — carries no id
// member, never "id": null.
func TestHTTPProtocolNoNullID(t *testing.T) {
	f, tok, other := twoCredentials(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	e := newMCPEnv(t, f, mcphttp.Options{MaxBodyBytes: 1024, MaxSessionsPerNamespace: 1, MaxSessions: 2})
	sid := e.Initialize(tok)
	e.Stream(tok, sid) // busy: the namespace's next initialize gets 429, not an eviction
	e.Initialize(other)

	rows := []statusRow{
		{name: "401 no token", noToken: true, body: ht.PingBody, want: 401},
		{name: "401 unknown token", edit: ht.Set("Authorization", "Bearer mcprt_nope"), body: ht.PingBody, want: 401},
		{name: "401 GET", method: "GET", noToken: true, want: 401},
		{name: "403 origin", edit: ht.Set("Origin", "https://evil.example"), body: ht.PingBody, want: 403},
		{name: "403 host", edit: ht.Set("Host", "evil.example"), body: ht.PingBody, want: 403},
		{name: "404 unknown session", session: "unknown", body: ht.PingBody, want: 404},
		{name: "404 foreign session", edit: ht.Set("Authorization", "Bearer "+other), body: ht.PingBody, want: 404},
		{name: "405", method: "PUT", body: ht.PingBody, want: 405},
		{name: "406 POST", edit: ht.Set("Accept", "application/json"), body: ht.PingBody, want: 406},
		{name: "406 GET", method: "GET", edit: ht.Set("Accept", "application/json"), want: 406},
		{name: "409 second stream", method: "GET", want: 409},
		{name: "413", body: ht.PingBody + strings.Repeat(" ", 1024), want: 413},
		{name: "415", edit: ht.Set("Content-Type", "text/plain"), body: ht.PingBody, want: 415},
		{name: "400 malformed", body: `{"jsonrpc":`, want: 400},
		{name: "400 batch", body: "[" + ht.PingBody + "]", want: 400},
		{name: "400 not an object", body: `"ping"`, want: 400},
		{name: "400 GET without session", method: "GET", session: "none", want: 400},
		{name: "400 DELETE without session", method: "DELETE", session: "none", want: 400},
		{name: "429 namespace cap", session: "none", body: ht.InitBody(ht.LatestVersion), want: 429},
		{name: "503 global cap", session: "none", edit: ht.Set("Authorization", "Bearer "+ct.Token), body: ht.InitBody(ht.LatestVersion), want: 503},
	}
	for i := range rows {
		rows[i].check = func(t *testing.T, res *ht.Result) { ht.WantErrorWithoutID(t, rows[i].name, res) }
	}
	runStatusRows(t, e, tok, sid, rows)
}

// TestHTTPProtocolInvalidUTF8: a body that is not valid UTF-8, or whose
// strings escape a lone surrogate (both would decode as U+FFFD, changing
// the text), is refused whole with 400 and -32700 before any member is
// used: no id is echoed (the answer is valid JSON), no tool runs. A
// surrogate pair, and U+FFFD itself, are fine: the tool gets the text
// exactly.
func TestHTTPProtocolInvalidUTF8(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	var mu sync.Mutex
	var stored []string // the texts thread_post was given
	f.tool("thread_post", func(_ context.Context, _ principal.Principal, args json.RawMessage, _ mcphttp.Output) (*mcp.CallToolResult, error) {
		var a struct{ Text string }
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, err
		}
		mu.Lock()
		defer mu.Unlock()
		stored = append(stored, a.Text)
		return textResult("posted"), nil
	})
	posted := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(stored)
	}
	e := newMCPEnv(t, f, mcphttp.Options{})
	sid := e.Initialize(tok)
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
		res := e.Post(tok, sess, test.body)
		ht.WantStatus(t, test.name, res, http.StatusBadRequest)
		ht.WantValidJSON(t, test.name, res)
		ht.WantErrorWithoutID(t, test.name, res)
		if a := res.RPC(t); a.Error.Code != -32700 {
			t.Fatalf("%s = %s, want -32700", test.name, res)
		}
	}
	if got := posted(); len(got) != 0 {
		t.Fatalf("thread_post ran with %q; want no message stored", got)
	}

	accepted := []struct{ name, id, text, stored string }{
		{"surrogate pair", `"\ud83d\ude00"`, `smile \ud83d\ude00`, "smile 😀"},
		{"escaped backslash before u", "2", `\\ud800`, `\ud800`},
		{"U+FFFD itself", "3", "\uFFFD and \\ufffd", "\uFFFD and \uFFFD"},
		{"raw multibyte", "4", "héllo ✓ 😀", "héllo ✓ 😀"},
	}
	for i, test := range accepted {
		res := e.Post(tok, sid, post(test.id, test.text))
		ht.WantStatus(t, test.name, res, http.StatusOK)
		ht.WantValidJSON(t, test.name, res)
		var r ht.ToolResult
		ht.DecodeResult(t, res, &r)
		if r.IsError {
			t.Fatalf("%s = %s, want the message stored", test.name, res)
		}
		if got := posted(); len(got) != i+1 || got[i] != test.stored {
			t.Fatalf("%s: messages %q, want message %d %q", test.name, got, i, test.stored)
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
	f, tok, other := twoCredentials(t)
	e := newMCPEnv(t, f, mcphttp.Options{})
	sid := e.Initialize(tok)
	const modern = "2026-07-28"
	meta := func(version string) string {
		return `"_meta":{"io.modelcontextprotocol/protocolVersion":"` + version + `","io.modelcontextprotocol/clientCapabilities":{}}`
	}
	discover := `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{` + meta(modern) + `}}`
	withHeader := func(version string) func(h http.Header) { return ht.Set("MCP-Protocol-Version", version) }
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
		{"server/discover, Mcp-Method too", "", "", ht.Set("MCP-Protocol-Version", modern, "Mcp-Method", "server/discover"), discover, "1", modern},
		{"tools/list with a string id", "", "", withHeader(modern), `{"jsonrpc":"2.0","id":"x","method":"tools/list","params":{` + meta(modern) + `}}`, `"x"`, modern},
		{"tools/call on a session", "", sid, withHeader(modern), `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"thread_list","arguments":{},` + meta(modern) + `}}`, "7", modern},
		{"unknown older version", "", "", withHeader("1900-01-01"), discover, "1", "1900-01-01"},
		{"not a version", "", sid, withHeader("garbage"), ht.PingBody, "2", "garbage"},
		{"2024-11-05", "", sid, withHeader("2024-11-05"), ht.PingBody, "2", "2024-11-05"},
		{"body claim only", "", "", withHeader(""), discover, "1", modern},
		{"body claim under a 2025 header", "", "", withHeader(ht.LatestVersion), discover, "1", modern},
		{"body claim of an unknown version", "", sid, nil, `{"jsonrpc":"2.0","id":3,"method":"ping","params":{` + meta("2099-01-01") + `}}`, "3", "2099-01-01"},
		{"initialize claiming the modern era", "", "", nil, `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` + meta(modern) + `}}`, "1", modern},
		{"notification", "", sid, withHeader(modern), ht.InitializedBody, "", modern},
		{"body not JSON", "", "", withHeader(modern), `{"jsonrpc":`, "", modern},
		{"Accept and Content-Type wrong too", "", "", ht.Set("MCP-Protocol-Version", modern, "Accept", "", "Content-Type", ""), discover, "1", modern},
		{"GET", http.MethodGet, sid, withHeader(modern), "", "", modern},
		{"DELETE", http.MethodDelete, sid, withHeader(modern), "", "", modern},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			h := ht.Headers(tok, test.sid)
			switch test.method {
			case http.MethodGet:
				h = ht.GetHeaders(tok, test.sid)
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
			before := mcpRecords(t, f)
			res := e.Do(method, h, test.body)
			ht.WantStatus(t, test.name, res, http.StatusBadRequest)
			ht.WantValidJSON(t, test.name, res)
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
				ht.WantErrorWithoutID(t, test.name, res)
			} else if string(a.ID) != test.id {
				t.Fatalf("%s = %s, want id %s echoed", test.name, res, test.id)
			}
			if res.Header.Get("Mcp-Session-Id") != "" || strings.Join(mcpRecords(t, f), ",") != strings.Join(before, ",") {
				t.Fatalf("%s created or ended a session", test.name)
			}
		})
	}
	e.WantPing("the session after the probes", tok, sid)

	// The order of SPEC §5: a bad token, an unknown or foreign session come
	// first.
	h := ht.Headers("", "")
	h.Set("MCP-Protocol-Version", modern)
	ht.Want401(t, "no token", e.Do(http.MethodPost, h, discover), "Bearer")
	h = ht.Headers(other, sid)
	h.Set("MCP-Protocol-Version", modern)
	ht.WantStatus(t, "foreign session", e.Do(http.MethodPost, h, discover), http.StatusNotFound)
	// A body claim of a served version is no refusal.
	e.WantPing("claim of a served version", tok, sid)
	res := e.Post(tok, sid, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{`+meta(ht.LatestVersion)+`}}`)
	if res.Status != http.StatusOK || res.RPC(t).Error != nil {
		t.Fatalf("ping claiming %s = %s, want 200", ht.LatestVersion, res)
	}
}

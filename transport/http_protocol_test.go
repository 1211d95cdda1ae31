package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestHTTPProtocolUnknownPathsJSON: paths other than the endpoint answer a
// JSON 404 whatever the method, and methods other than POST, GET and
// DELETE a JSON 405 (OAuth-probing clients parse the body of both).
func TestHTTPProtocolUnknownPathsJSON(t *testing.T) {
	f := newFake(t)
	e := newMCPEnv(t, f, transport.Options{})
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
	e := newMCPEnv(t, f, transport.Options{MaxBodyBytes: 1024, MaxSessionsPerNamespace: 1, MaxSessions: 2})
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
	f.tool("thread_post", func(_ context.Context, _ principal.Principal, args json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
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
	e := newMCPEnv(t, f, transport.Options{})
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

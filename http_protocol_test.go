package mcpruntime_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

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
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok := openMinted(t, rt, "T", "A")
	_, other := openMinted(t, rt, "U", "A")
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

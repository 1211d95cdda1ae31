package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

const modern = "2026-07-28"

// modernMeta is a modern request's _meta with capabilities caps.
func modernMeta(caps string) string {
	return `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":` + caps + `}`
}

// modernBody is a request of method with id and the params members rest
// (may be ""), the full _meta with no capabilities.
func modernBody(id, method, rest string) string {
	if rest != "" {
		rest += ","
	}
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{` + rest + modernMeta(`{}`) + `}}`
}

// modernHeaders are the headers of a modern request of method (and name:
// Mcp-Name, if not "").
func modernHeaders(tok, method, name string) http.Header {
	h := ht.Headers(tok, "")
	h.Set("MCP-Protocol-Version", modern)
	h.Set("Mcp-Method", method)
	if name != "" {
		h.Set("Mcp-Name", name)
	}
	return h
}

type modernError struct {
	ID    json.RawMessage `json:"id"`
	Error *struct {
		Code    int             `json:"code"`
		Message string          `json:"message"`
		Data    json.RawMessage `json:"data"`
	} `json:"error"`
}

// TestHTTPModernLadder: SPEC §5a.2 — a modern request is checked in one
// order, each failure with its status and code and the request's id
// echoed; nothing creates, ends or echoes a session, a stale session id
// included: a 2026-07-28 request is served in its own era.
func TestHTTPModernLadder(t *testing.T) {
	f, tok, other := twoCredentials(t)
	f.tool("whoami", func(_ context.Context, p principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		return textResult(p.Namespace), nil
	})
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	foreign := e.Initialize(other)
	discover := modernBody("1", "server/discover", "")
	call := modernBody("7", "tools/call", `"name":"whoami","arguments":{}`)
	with := func(h http.Header, kv ...string) http.Header {
		h = h.Clone()
		ht.Set(kv...)(h)
		return h
	}
	dh := modernHeaders(tok, "server/discover", "")
	ch := modernHeaders(tok, "tools/call", "whoami")
	tests := []struct {
		name   string
		method string
		h      http.Header
		body   string
		status int
		code   int    // 0: a result
		id     string // echoed; "" none
	}{
		{"discover", "", dh, discover, 200, 0, "1"},
		{"discover with clientInfo", "", dh, strings.Replace(discover, `"_meta":{`, `"_meta":{"io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},`, 1), 200, 0, "1"},
		{"a claim of a 2025 version in _meta beside the header", "", ch, strings.Replace(call, `"2026-07-28"`, `"2025-11-25"`, 1), 400, -32020, "7"},
		{"a stale session id is ignored", "", with(ch, "Mcp-Session-Id", sid), call, 200, 0, "7"},
		{"a foreign session id is ignored", "", with(ch, "Mcp-Session-Id", foreign), call, 200, 0, "7"},
		{"an unknown session id is ignored", "", with(ch, "Mcp-Session-Id", "mcps_nope"), call, 200, 0, "7"},
		{"Last-Event-ID is ignored", "", with(ch, "Last-Event-ID", "1-1"), call, 200, 0, "7"},
		{"no params", "", dh, `{"jsonrpc":"2.0","id":101,"method":"server/discover","params":{}}`, 400, -32602, "101"},
		{"no protocolVersion", "", dh, `{"jsonrpc":"2.0","id":102,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/clientCapabilities":{}}}}`, 400, -32602, "102"},
		{"no clientCapabilities", "", dh, `{"jsonrpc":"2.0","id":104,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`, 400, -32602, "104"},
		{"a bad logLevel", "", dh, `{"jsonrpc":"2.0","id":105,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"loud"}}}`, 400, -32602, "105"},
		{"header and _meta disagree", "", dh, strings.Replace(discover, `"2026-07-28"`, `"v999.0.0"`, 1), 400, -32020, "1"},
		{"no Mcp-Method", "", with(dh, "Mcp-Method", ""), discover, 400, -32020, "1"},
		{"Mcp-Method of another method", "", with(dh, "Mcp-Method", "tools/list"), discover, 400, -32020, "1"},
		{"Mcp-Method in another case", "", with(dh, "Mcp-Method", "SERVER/DISCOVER"), discover, 400, -32020, "1"},
		{"no Mcp-Name", "", with(ch, "Mcp-Name", ""), call, 400, -32020, "7"},
		{"Mcp-Name of another tool", "", with(ch, "Mcp-Name", "thread_list"), call, 400, -32020, "7"},
		{"Mcp-Name with white space", "", with(ch, "Mcp-Name", " whoami "), call, 200, 0, "7"},
		{"Mcp-Name in base64", "", with(ch, "Mcp-Name", "=?base64?d2hvYW1p?="), call, 200, 0, "7"},
		{"Mcp-Name in bad base64", "", with(ch, "Mcp-Name", "=?base64?d2hvYW1p!?="), call, 400, -32020, "7"},
		{"initialize", "", modernHeaders(tok, "initialize", ""), modernBody("500", "initialize", `"protocolVersion":"2025-11-25","capabilities":{}`), 404, -32601, "500"},
		{"ping", "", modernHeaders(tok, "ping", ""), modernBody("500", "ping", ""), 404, -32601, "500"},
		{"logging/setLevel", "", modernHeaders(tok, "logging/setLevel", ""), modernBody("500", "logging/setLevel", `"level":"info"`), 404, -32601, "500"},
		{"resources/subscribe", "", modernHeaders(tok, "resources/subscribe", ""), modernBody("500", "resources/subscribe", `"uri":"x"`), 404, -32601, "500"},
		{"resources/unsubscribe", "", modernHeaders(tok, "resources/unsubscribe", ""), modernBody("500", "resources/unsubscribe", `"uri":"x"`), 404, -32601, "500"},
		{"an unknown method", "", modernHeaders(tok, "unknown/method", ""), modernBody(`"u"`, "unknown/method", ""), 404, -32601, `"u"`},
		{"a notification", "", modernHeaders(tok, "notifications/cancelled", ""), `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7}}`, 202, 0, ""},
		{"a response", "", dh, `{"jsonrpc":"2.0","id":1,"result":{}}`, 400, -32600, ""},
		{"a batch", "", dh, `[` + discover + `]`, 400, -32600, ""},
		{"not JSON", "", dh, `{"jsonrpc":`, 400, -32700, ""},
		// The legacy path, for claims the modern header does not make.
		{"a body claim without the header", "", with(dh, "MCP-Protocol-Version", ""), discover, 400, -32020, "1"},
		{"a body claim under a 2025 header", "", with(dh, "MCP-Protocol-Version", ht.LatestVersion), discover, 400, -32020, "1"},
		{"initialize claiming the era", "", ht.Headers(tok, ""), `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25",` + modernMeta(`{}`) + `}}`, 400, -32020, "1"},
		{"a version served by neither era", "", with(dh, "MCP-Protocol-Version", "v999.0.0"), strings.Replace(discover, `"2026-07-28"`, `"v999.0.0"`, 1), 400, -32022, "1"},
		{"GET", http.MethodGet, with(ht.GetHeaders(tok, sid), "MCP-Protocol-Version", modern), "", 405, -32600, ""},
		{"DELETE", http.MethodDelete, with(ht.Headers(tok, sid), "MCP-Protocol-Version", modern), "", 405, -32600, ""},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			method := test.method
			if method == "" {
				method = http.MethodPost
			}
			before := mcpRecords(t, f)
			res := e.Do(method, test.h, test.body)
			ht.WantStatus(t, test.name, res, test.status)
			if res.Header.Get("Mcp-Session-Id") != "" || strings.Join(mcpRecords(t, f), ",") != strings.Join(before, ",") {
				t.Fatalf("%s created, ended or echoed a session", test.name)
			}
			if test.status == http.StatusAccepted {
				if len(res.Body) != 0 {
					t.Fatalf("%s = %s, want no body", test.name, res)
				}
				return
			}
			ht.WantValidJSON(t, test.name, res)
			var a modernError
			if err := json.Unmarshal(res.Body, &a); err != nil {
				t.Fatalf("%s = %s: %v", test.name, res, err)
			}
			switch {
			case test.code == 0 && a.Error != nil, test.code != 0 && (a.Error == nil || a.Error.Code != test.code):
				t.Fatalf("%s = %s, want code %d", test.name, res, test.code)
			case test.id == "":
				ht.WantErrorWithoutID(t, test.name, res)
			case string(a.ID) != test.id:
				t.Fatalf("%s = %s, want id %s echoed", test.name, res, test.id)
			}
			if test.code == -32022 {
				var d struct {
					Supported []string `json:"supported"`
					Requested string   `json:"requested"`
				}
				_ = json.Unmarshal(a.Error.Data, &d)
				if strings.Join(d.Supported, ",") != "2026-07-28,2025-11-25,2025-06-18,2025-03-26" || d.Requested != "v999.0.0" {
					t.Fatalf("%s = %s, want supported all four, requested v999.0.0", test.name, res)
				}
			}
		})
	}
	e.WantPing("the session after the modern requests", tok, sid)
	e.WantPing("the other session after them", other, foreign)

	// A session's request claiming a 2025 version in _meta is no refusal.
	res := e.Post(tok, sid, `{"jsonrpc":"2.0","id":2,"method":"ping","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"`+ht.LatestVersion+`"}}}`)
	if res.Status != http.StatusOK || res.RPC(t).Error != nil {
		t.Fatalf("ping claiming %s = %s, want 200", ht.LatestVersion, res)
	}

	// Authentication comes first, as in every era.
	ht.Want401(t, "no token", e.Do(http.MethodPost, modernHeaders("", "server/discover", ""), discover), "Bearer")
	ht.Want401(t, "no token, GET", e.Do(http.MethodGet, with(ht.GetHeaders("", ""), "MCP-Protocol-Version", modern), ""), "Bearer")
}

// TestHTTPModernResults: SPEC §5a.3 — every modern result has resultType,
// _meta.serverInfo; discover lists every version served and the
// capabilities (public, cached a minute), lists and reads are private.
func TestHTTPModernResults(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	f.tool("whoami", func(_ context.Context, p principal.Principal, _ json.RawMessage, _ transport.Output) (*mcp.CallToolResult, error) {
		return textResult(p.Namespace), nil
	})
	f.resource("test://r", "text")
	e := newMCPEnv(t, f, transport.Options{ServerName: "srv", ServerVersion: "9"})
	type result struct {
		ResultType        string          `json:"resultType"`
		TTLMs             *int            `json:"ttlMs"`
		CacheScope        string          `json:"cacheScope"`
		SupportedVersions []string        `json:"supportedVersions"`
		Capabilities      json.RawMessage `json:"capabilities"`
		Meta              struct {
			ServerInfo struct{ Name, Version string } `json:"io.modelcontextprotocol/serverInfo"`
		} `json:"_meta"`
	}
	tests := []struct {
		method, name, rest string
		ttl                int // -1: no hint
		scope              string
	}{
		{"server/discover", "", "", 60000, "public"},
		{"tools/list", "", "", 0, "private"},
		{"tools/call", "whoami", `"name":"whoami","arguments":{}`, -1, ""},
		{"resources/read", "test://r", `"uri":"test://r"`, 0, "private"},
	}
	for _, test := range tests {
		res := e.Do(http.MethodPost, modernHeaders(tok, test.method, test.name), modernBody("1", test.method, test.rest))
		ht.WantStatus(t, test.method, res, 200)
		var a struct{ Result result }
		if err := json.Unmarshal(res.Body, &a); err != nil {
			t.Fatal(err)
		}
		r := a.Result
		if r.ResultType != "complete" || r.Meta.ServerInfo.Name != "srv" || r.Meta.ServerInfo.Version != "9" {
			t.Fatalf("%s = %s, want resultType complete and _meta.serverInfo srv 9", test.method, res)
		}
		if (test.ttl < 0) != (r.TTLMs == nil) || (r.TTLMs != nil && *r.TTLMs != test.ttl) || r.CacheScope != test.scope {
			t.Fatalf("%s = %s, want ttlMs %d cacheScope %q", test.method, res, test.ttl, test.scope)
		}
		if test.method == "server/discover" && (strings.Join(r.SupportedVersions, ",") != "2026-07-28,2025-11-25,2025-06-18,2025-03-26" || !strings.Contains(string(r.Capabilities), `"tools"`)) {
			t.Fatalf("discover = %s", res)
		}
	}
}

// TestHTTPModernParamHeaders: SPEC §5a.9 — an argument marked x-mcp-header
// that the call carries (not null) must come with its Mcp-Param-* header,
// equal once decoded: strings exactly, integers as numbers, booleans as
// true/false; else 400 -32020. Unmarked headers are ignored.
func TestHTTPModernParamHeaders(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	f.tool("geo", func(context.Context, principal.Principal, json.RawMessage, transport.Output) (*mcp.CallToolResult, error) {
		return textResult("ok"), nil
	})
	f.headers = map[string][]transport.ParamHeader{"geo": {
		{Header: "Region", Path: []string{"region"}, Type: "string"},
		{Header: "N", Path: []string{"n"}, Type: "integer"},
		{Header: "Deep", Path: []string{"o", "b"}, Type: "boolean"},
	}}
	e := newMCPEnv(t, f, transport.Options{})
	tests := []struct {
		name, args string
		headers    []string
		ok         bool
	}{
		{"none given, none expected", `{}`, nil, true},
		{"null needs none", `{"region":null}`, nil, true},
		{"all equal", `{"region":"eu","n":42,"o":{"b":true}}`, []string{"Mcp-Param-Region", "eu", "Mcp-Param-N", "42.0", "Mcp-Param-Deep", "true"}, true},
		{"base64", `{"region":"Hello"}`, []string{"Mcp-Param-Region", "=?base64?SGVsbG8=?="}, true},
		{"a literal that looks like base64", `{"region":"SGVsbG8="}`, []string{"Mcp-Param-Region", "SGVsbG8="}, true},
		{"an unclosed sentinel is a literal", `{"region":"=?base64?SGVsbG8="}`, []string{"Mcp-Param-Region", "=?base64?SGVsbG8="}, true},
		{"an unmarked header is ignored", `{}`, []string{"Mcp-Param-Other", "x"}, true},
		{"missing", `{"region":"eu"}`, nil, false},
		{"different", `{"region":"eu"}`, []string{"Mcp-Param-Region", "us"}, false},
		{"case differs", `{"region":"eu"}`, []string{"Mcp-Param-Region", "EU"}, false},
		{"bad padding", `{"region":"Hello"}`, []string{"Mcp-Param-Region", "=?base64?SGVsbG8?="}, false},
		{"bad alphabet", `{"region":"Hello"}`, []string{"Mcp-Param-Region", "=?base64?SGVs!!!bG8=?="}, false},
		{"another number", `{"n":42}`, []string{"Mcp-Param-N", "43"}, false},
		{"nested missing", `{"o":{"b":false}}`, nil, false},
	}
	for _, test := range tests {
		h := modernHeaders(tok, "tools/call", "geo")
		for i := 0; i < len(test.headers); i += 2 {
			h.Set(test.headers[i], test.headers[i+1])
		}
		res := e.Do(http.MethodPost, h, modernBody("1", "tools/call", `"name":"geo","arguments":`+test.args))
		a := res.RPC(t)
		switch {
		case test.ok && (res.Status != 200 || a.Error != nil):
			t.Errorf("%s = %s, want the result", test.name, res)
		case !test.ok && (res.Status != 400 || a.Error == nil || a.Error.Code != -32020 || string(a.ID) != "1"):
			t.Errorf("%s = %s, want 400 -32020 with id 1", test.name, res)
		}
	}
}

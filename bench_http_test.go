package mcpruntime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/transport"
)

// benchSession starts an MCP endpoint over the bench runtime and
// initializes one session; it returns a function that posts a body on that
// session and checks the status.
func benchSession(b *testing.B) func(body []byte) []byte {
	b.Helper()
	return benchSessionWith(b, mcpruntime.Config{})
}

// benchSessionWith is benchSession on a runtime of cfg.
func benchSessionWith(b *testing.B, cfg mcpruntime.Config) func(body []byte) []byte {
	b.Helper()
	rt, _, tok := benchRuntimeWith(b, cfg)
	return benchSessionOn(b, rt, tok)
}

// benchSessionOn is benchSession on rt, as tok.
func benchSessionOn(b *testing.B, rt *mcpruntime.Runtime, tok string) func(body []byte) []byte {
	b.Helper()
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	post := func(sid string, body []byte) (*http.Response, []byte) {
		return benchDo(b, srv, tok, http.MethodPost, sid, body)
	}
	resp, _ := post("", benchInitialize)
	sid := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || sid == "" {
		b.Fatalf("initialize: %s", resp.Status)
	}
	return func(body []byte) []byte {
		resp, out := post(sid, body)
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("POST: %s: %s", resp.Status, out)
		}
		return out
	}
}

var benchInitialized = []byte(`{"jsonrpc":"2.0","method":"notifications/initialized"}`)

var benchInitialize = []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}`)

// benchDo sends one MCP request to srv with tok, on session sid unless it
// is empty, and returns the response and its body.
func benchDo(b *testing.B, srv *httptest.Server, tok, method, sid string, body []byte) (*http.Response, []byte) {
	b.Helper()
	req, _ := http.NewRequest(method, srv.URL+"/mcp", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
		req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		b.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, out
}

// BenchmarkHTTPToolCall is one tools/call (thread_read) through the whole
// stack: HTTP, Origin/Host guard, authentication, owner check, session
// actor round trip, schema validation, tool, JSON response. Client and
// server share the process, so the figure includes the client's cost.
func BenchmarkHTTPToolCall(b *testing.B) { benchToolCalls(b, benchSession(b)) }

// benchToolCalls is the loop of BenchmarkHTTPToolCall on post.
func benchToolCalls(b *testing.B, post func(body []byte) []byte) {
	b.Helper()
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`)
	b.ReportAllocs()
	for b.Loop() {
		out := post(body)
		var r struct {
			Result struct {
				IsError bool `json:"isError"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &r); err != nil || r.Result.IsError {
			b.Fatalf("tools/call: %s", out)
		}
	}
}

// BenchmarkHTTPPing is the floor of the stack: everything but the tool.
func BenchmarkHTTPPing(b *testing.B) {
	post := benchSession(b)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"ping"}`)
	b.ReportAllocs()
	for b.Loop() {
		post(body)
	}
}

// BenchmarkServeToolCall is one tools/call (thread_read) through the
// transport's Dispatch and the backend's CallTool, without HTTP: params
// decoded, the checks, schema validation, the tool, the result value (not
// encoded).
func BenchmarkServeToolCall(b *testing.B) {
	rt, p, _ := benchRuntime(b)
	be := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	params := json.RawMessage(`{"name":"thread_read","arguments":{}}`)
	req := &transport.Request{Caller: p,
		Era: transport.EraSession, ClientCapabilities: &mcp.ClientCapabilities{}, Out: nopOutput{}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if res := transport.Dispatch(ctx, be, "tools/call", params, req); res.Result == nil {
			b.Fatalf("Dispatch = %+v", res.Err)
		}
	}
}

type nopOutput struct{}

func (nopOutput) Progress(float64, float64, string) {}
func (nopOutput) Log(mcp.LoggingLevel, string, any) {}
func (nopOutput) CloseStream()                      {}

// BenchmarkHTTPModernToolCall is BenchmarkHTTPToolCall in the 2026-07-28
// era: no session, the version and the client's capabilities in _meta and
// mirrored in headers, validated on every request (SPEC §5a).
func BenchmarkHTTPModernToolCall(b *testing.B) {
	rt, _, tok := benchRuntime(b)
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"thread_read","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	b.ReportAllocs()
	for b.Loop() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+"/mcp", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("MCP-Protocol-Version", "2026-07-28")
		req.Header.Set("Mcp-Method", "tools/call")
		req.Header.Set("Mcp-Name", "thread_read")
		resp, err := srv.Client().Do(req)
		if err != nil {
			b.Fatal(err)
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Result struct {
				IsError    bool   `json:"isError"`
				ResultType string `json:"resultType"`
			} `json:"result"`
		}
		if err := json.Unmarshal(out, &r); err != nil || r.Result.IsError || r.Result.ResultType != "complete" {
			b.Fatalf("tools/call: %s %s", resp.Status, out)
		}
	}
}

// BenchmarkHTTPToolCallAudited is BenchmarkHTTPToolCall with Config.Audit:
// each call also journals its audit record. With follow, a reader follows
// the journal and encodes every record, as the event stream and the audit
// file do: the cost of events and audit on, against BenchmarkHTTPToolCall.
func BenchmarkHTTPToolCallAudited(b *testing.B) {
	for _, follow := range []bool{false, true} {
		b.Run(map[bool]string{false: "journal", true: "followed"}[follow], func(b *testing.B) {
			rt, _, tok := benchRuntimeWith(b, mcpruntime.Config{Audit: true})
			if follow {
				done := make(chan struct{})
				go func() {
					defer close(done)
					enc := json.NewEncoder(io.Discard)
					var pos uint64
					for {
						page, err := rt.Records(pos, 512)
						if err != nil {
							return
						}
						for _, rec := range page.Records {
							pos = rec.ID
							_ = enc.Encode(&rec)
						}
						if len(page.Records) < 512 {
							<-page.Next
						}
					}
				}()
				b.Cleanup(func() { rt.Close(); <-done })
			}
			benchToolCalls(b, benchSessionOn(b, rt, tok))
		})
	}
}

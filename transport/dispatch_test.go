package transport_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
)

// stubBackend answers every feature method with err, or with res when err
// is nil; it records the arguments the dispatch decoded.
type stubBackend struct {
	err  error
	asks mcp.InputRequestMap // tools/call and prompts/get answer these, when set
	got  string              // what the last feature method was called with
}

func (b *stubBackend) Authenticate(string) (principal.Principal, error) {
	return principal.Principal{}, errors.New("no tokens")
}
func (b *stubBackend) Capabilities() *mcp.ServerCapabilities    { return &mcp.ServerCapabilities{} }
func (b *stubBackend) CanRead(principal.Principal, string) bool { return false }

func (b *stubBackend) ListTools(_ context.Context, _ *transport.Request, cursor string) (*mcp.ListToolsResult, error) {
	b.got = "cursor " + cursor
	return &mcp.ListToolsResult{}, b.err
}
func (b *stubBackend) ListResources(_ context.Context, _ *transport.Request, cursor string) (*mcp.ListResourcesResult, error) {
	b.got = "cursor " + cursor
	return &mcp.ListResourcesResult{}, b.err
}
func (b *stubBackend) ListResourceTemplates(_ context.Context, _ *transport.Request, cursor string) (*mcp.ListResourceTemplatesResult, error) {
	b.got = "cursor " + cursor
	return &mcp.ListResourceTemplatesResult{}, b.err
}
func (b *stubBackend) ListPrompts(_ context.Context, _ *transport.Request, cursor string) (*mcp.ListPromptsResult, error) {
	b.got = "cursor " + cursor
	return &mcp.ListPromptsResult{}, b.err
}
func (b *stubBackend) CallTool(_ context.Context, _ *transport.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	b.got = fmt.Sprintf("tool %s %s", name, args)
	if b.err != nil {
		return nil, b.err
	}
	return &mcp.CallToolResult{Content: []mcp.Content{}, InputRequests: b.asks, RequestState: "st"}, nil
}
func (b *stubBackend) ReadResource(_ context.Context, _ *transport.Request, uri string) (*mcp.ReadResourceResult, error) {
	b.got = "uri " + uri
	return &mcp.ReadResourceResult{}, b.err
}
func (b *stubBackend) GetPrompt(_ context.Context, _ *transport.Request, name string, args map[string]string) (*mcp.GetPromptResult, error) {
	b.got = fmt.Sprintf("prompt %s %v", name, args)
	if b.err != nil {
		return nil, b.err
	}
	return &mcp.GetPromptResult{InputRequests: b.asks}, nil
}
func (b *stubBackend) Complete(_ context.Context, _ *transport.Request, p *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	b.got = "ref " + p.Ref.Type
	return &mcp.CompleteResult{}, b.err
}

// TestDispatchErrors: every row of the endpoint's table of the backend's
// domain errors (backendErrors), in each era, and the params the dispatch
// refuses before the backend is called.
func TestDispatchErrors(t *testing.T) {
	s, m := transport.EraSession, transport.EraModern
	tests := []struct {
		name    string
		era     transport.Era
		method  string
		params  string
		err     error
		want    *transport.RPCError
		wantGot string // what the backend was called with; "" for not called
	}{
		{"unknown tool", s, "tools/call", `{"name":"nope","arguments":{"a":1}}`, fmt.Errorf("tool: %w", fault.ErrUnknownTool),
			&transport.RPCError{Code: -32602, Message: `unknown tool "nope"`}, `tool nope {"a":1}`},
		{"resource not found, session", s, "resources/read", `{"uri":"x://y"}`, fault.ErrResourceNotFound,
			&transport.RPCError{Code: -32002, Message: "Resource not found", Data: map[string]string{"uri": "x://y"}}, "uri x://y"},
		{"resource not found, 2026-07-28", m, "resources/read", `{"uri":"x://y"}`, fault.ErrResourceNotFound,
			&transport.RPCError{Code: -32602, Message: "Resource not found", Data: map[string]string{"uri": "x://y"}}, "uri x://y"},
		{"unknown prompt", s, "prompts/get", `{"name":"p","arguments":{"k":"v"}}`, fault.ErrUnknownPrompt,
			&transport.RPCError{Code: -32602, Message: `unknown prompt "p"`}, "prompt p map[k:v]"},
		{"unknown reference", m, "completion/complete", `{"ref":{"type":"ref/prompt","name":"p"},"argument":{"name":"a","value":""}}`, fault.ErrUnknownReference,
			&transport.RPCError{Code: -32602, Message: "unknown reference"}, "ref ref/prompt"},
		{"invalid argument", s, "prompts/get", `{"name":"p"}`, fmt.Errorf("argument a: %w", fault.ErrInvalidArgument),
			&transport.RPCError{Code: -32602, Message: "argument a: invalid argument"}, "prompt p map[]"},
		{"invalid cursor", s, "resources/templates/list", `{"cursor":"zz"}`, fault.ErrInvalidCursor,
			&transport.RPCError{Code: -32602, Message: "invalid cursor: not one a templates list returned"}, "cursor zz"},
		{"not served", s, "prompts/list", `{}`, transport.ErrNotServed,
			&transport.RPCError{Code: -32601, Message: `method "prompts/list" not found`}, "cursor "},
		{"anything else", m, "tools/call", `{"name":"t"}`, errors.New("disk on fire"),
			&transport.RPCError{Code: -32603, Message: "tool call failed"}, "tool t "},
		{"no name", s, "tools/call", `{"arguments":{}}`, nil,
			&transport.RPCError{Code: -32602, Message: "invalid params: tools/call needs params.name"}, ""},
		{"a cursor not a string", s, "tools/list", `{"cursor":1}`, nil,
			&transport.RPCError{Code: -32602, Message: "invalid params: cursor must be a string"}, ""},
		{"no uri", m, "resources/read", `{}`, nil,
			&transport.RPCError{Code: -32602, Message: "invalid params: resources/read needs params.uri"}, ""},
		{"an argument not a string", s, "prompts/get", `{"name":"p","arguments":{"k":1}}`, nil,
			&transport.RPCError{Code: -32602, Message: "invalid params: prompts/get needs params.name and string arguments"}, ""},
		{"no ref", s, "completion/complete", `{}`, nil,
			&transport.RPCError{Code: -32602, Message: "invalid params: completion/complete needs params.ref and params.argument"}, ""},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			b := &stubBackend{err: test.err}
			res := transport.Dispatch(context.Background(), b, test.method, json.RawMessage(test.params),
				&transport.Request{Era: test.era, ClientCapabilities: &mcp.ClientCapabilities{}})
			if diff := cmp.Diff(test.want, res.Err); diff != "" {
				t.Errorf("Dispatch(%s %s) error (-want +got):\n%s", test.method, test.params, diff)
			}
			if res.Result != nil || res.InputRequests != nil {
				t.Errorf("Dispatch(%s %s) = %+v, want the error alone", test.method, test.params, res)
			}
			if b.got != test.wantGot {
				t.Errorf("backend called with %q, want %q", b.got, test.wantGot)
			}
		})
	}
}

// TestDispatchCapabilities (SPEC §5b.6): input requests the client did not
// declare the capabilities of are never answered as such: in 2026-07-28
// -32021 with data.requiredCapabilities; in a session a tools/call's
// isError result, another method's -32602. Declared, they are answered
// with the backend's state.
func TestDispatchCapabilities(t *testing.T) {
	asks := mcp.InputRequestMap{
		"q":   &mcp.CreateMessageParams{MaxTokens: 1},
		"url": &mcp.ElicitParams{Mode: "url", URL: "https://example.test/", ElicitationID: "e"},
	}
	b := &stubBackend{asks: asks}
	none := &mcp.ClientCapabilities{Elicitation: &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}}}
	call := func(era transport.Era, method, params string, caps *mcp.ClientCapabilities) transport.Response {
		return transport.Dispatch(context.Background(), b, method, json.RawMessage(params), &transport.Request{Era: era, ClientCapabilities: caps})
	}
	const msg = "the client did not declare the elicitation (url mode), sampling capabilities: client capability not declared"

	res := call(transport.EraModern, "tools/call", `{"name":"t"}`, none)
	want := &transport.RPCError{Code: -32021, Message: msg, Data: map[string]any{"requiredCapabilities": map[string]any{
		"elicitation": &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}, "sampling": map[string]any{},
	}}}
	if diff := cmp.Diff(want, res.Err); diff != "" {
		t.Errorf("2026-07-28 error (-want +got):\n%s", diff)
	}
	res = call(transport.EraSession, "tools/call", `{"name":"t"}`, none)
	tr, _ := res.Result.(*mcp.CallToolResult)
	if tr == nil || !tr.IsError || len(tr.Content) != 1 || tr.Content[0].(*mcp.TextContent).Text != msg {
		t.Errorf("session tools/call = %+v, want an isError result %q", res, msg)
	}
	res = call(transport.EraSession, "prompts/get", `{"name":"p"}`, none)
	if diff := cmp.Diff(&transport.RPCError{Code: -32602, Message: msg}, res.Err); diff != "" {
		t.Errorf("session prompts/get error (-want +got):\n%s", diff)
	}
	all := &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}, Elicitation: &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}}}
	for _, era := range []transport.Era{transport.EraSession, transport.EraModern} {
		res = call(era, "tools/call", `{"name":"t"}`, all)
		if res.Err != nil || len(res.InputRequests) != 2 || res.State != "st" {
			t.Errorf("era %d declared = %+v, want the input requests and the state", era, res)
		}
	}
}

// TestDispatchCancelled: a request whose context ended gets the answer the
// endpoint never sends, whatever the backend returned.
func TestDispatchCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res := transport.Dispatch(ctx, &stubBackend{}, "tools/call", json.RawMessage(`{"name":"t"}`), &transport.Request{Era: transport.EraSession})
	if res.Err == nil || res.Err.Code != transport.CodeRequestCancelled || res.Result != nil {
		t.Errorf("cancelled = %+v, want CodeRequestCancelled alone", res)
	}
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"slices"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
)

// recOutput is an mcphttp.Output that records what a request sent back.
type recOutput struct {
	mu       sync.Mutex
	progress []float64
	logs     []string // level:data
	closed   int
}

func (o *recOutput) Progress(p, _ float64, _ string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.progress = append(o.progress, p)
}

func (o *recOutput) Log(level mcp.LoggingLevel, _ string, data any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	b, _ := json.Marshal(data)
	o.logs = append(o.logs, string(level)+":"+string(b))
}

func (o *recOutput) CloseStream() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed++
}

// recFeed is a change feed that records what the registries told it.
type recFeed struct {
	mu      sync.Mutex
	changed []string
	updated []string
}

func (f *recFeed) ListChanged(kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changed = append(f.changed, kind)
}

func (f *recFeed) ResourceUpdated(uri string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.updated = append(f.updated, uri)
}

func (f *recFeed) take() (changed, updated []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	changed, updated = slices.Clone(f.changed), slices.Clone(f.updated)
	f.changed, f.updated = nil, nil
	return changed, updated
}

// serveReq is one request to a backend: the caller, the era (0: a 2025
// session), the client's capabilities (nil: none), the method and params,
// and for a later round the answers and the state.
type serveReq struct {
	caller mcpruntime.Principal
	era    mcphttp.Era
	caps   *mcp.ClientCapabilities
	method string
	params string
	inputs mcp.InputResponseMap
	state  string
	out    mcphttp.Output
}

func serve(t *testing.T, b mcphttp.Backend, r serveReq) mcphttp.Response {
	t.Helper()
	if r.era == 0 {
		r.era = mcphttp.EraSession
	}
	if r.caps == nil {
		r.caps = &mcp.ClientCapabilities{}
	}
	if r.params == "" {
		r.params = "{}"
	}
	if r.out == nil {
		r.out = &recOutput{}
	}
	res := b.Serve(context.Background(), &mcphttp.Request{
		Method: r.method, Params: json.RawMessage(r.params), Caller: r.caller, Era: r.era,
		ClientCapabilities: r.caps, InputResponses: r.inputs, State: r.state, Out: r.out,
	})
	set := 0
	if res.Result != nil {
		set++
	}
	if len(res.InputRequests) > 0 {
		set++
	}
	if res.Err != nil {
		set++
	}
	if set != 1 {
		t.Fatalf("Serve(%s %s) = %+v: want exactly one of Result, InputRequests, Err", r.method, r.params, res)
	}
	return res
}

// wire is a value as the client would see it: its JSON, decoded.
func wire(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal %T: %v", v, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s is not an object: %v", b, err)
	}
	return m
}

// wantRPCError fails unless res is the JSON-RPC error code.
func wantRPCError(t *testing.T, what string, res mcphttp.Response, code int) *mcphttp.RPCError {
	t.Helper()
	if res.Err == nil || res.Err.Code != code {
		t.Fatalf("%s = %+v (err %+v), want JSON-RPC error %d", what, res, res.Err, code)
	}
	return res.Err
}

// resultOf returns res's result as a T.
func resultOf[T any](t *testing.T, what string, res mcphttp.Response) T {
	t.Helper()
	v, ok := res.Result.(T)
	if !ok {
		t.Fatalf("%s = %+v (err %+v), want a %T result", what, res, res.Err, *new(T))
	}
	return v
}

// clientOf issues a client grant of access and returns its principal.
func clientOf(t *testing.T, rt *mcpruntime.Runtime, access string) mcpruntime.Principal {
	t.Helper()
	ct, err := rt.IssueClient(context.Background(), "test", access)
	noErr(t, err)
	p, err := rt.Authenticate(ct.Token)
	noErr(t, err)
	return p
}

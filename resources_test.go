package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// staticResource answers text at its URI.
func staticResource(uri string, access mcpruntime.Access, capability string) mcpruntime.Resource {
	return mcpruntime.Resource{Resource: mcp.Resource{URI: uri, Name: uri, MIMEType: "text/plain"}, Access: access, Capability: capability,
		Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, MIMEType: "text/plain", Text: "content of " + read.URI}}}, nil
		}}
}

// resourcesFixture registers a resource of each class, one behind a
// capability, and a template whose handler knows ids 1-9 only.
func resourcesFixture(t *testing.T) (*mcpruntime.Runtime, transport.Backend) {
	t.Helper()
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterResource(staticResource("test://open", mcpruntime.AccessRead, "")))
	noErr(t, rt.RegisterResource(staticResource("test://mine", mcpruntime.AccessReadAsCaller, "")))
	noErr(t, rt.RegisterResource(staticResource("test://secret", mcpruntime.AccessRead, "x")))
	noErr(t, rt.RegisterResourceTemplate(mcpruntime.ResourceTemplate{
		ResourceTemplate: mcp.ResourceTemplate{URITemplate: "test://items/{id}", Name: "item"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			if id := read.Vars["id"]; len(id) != 1 || id < "1" || id > "9" {
				return nil, mcpruntime.ErrResourceNotFound
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, Text: "item " + read.Vars["id"]}}}, nil
		},
		Complete: func(_ context.Context, req *mcpruntime.CompletionRequest) (*mcp.CompletionResultDetails, error) {
			return &mcp.CompletionResultDetails{Values: []string{req.Argument.Value + "1", req.Argument.Value + "2"}}, nil
		},
	}))
	return rt, mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
}

func readRes(t *testing.T, b transport.Backend, p mcpruntime.Principal, era transport.Era, uri string) transport.Response {
	t.Helper()
	return serve(t, b, serveReq{caller: p, era: era, method: "resources/read", params: fmt.Sprintf(`{"uri":%q}`, uri)})
}

// TestServeResources (SPEC §5b.1-3): reads by URI and by template; a URI
// the caller may not read is answered exactly as one that does not exist
// (-32002 in a 2025 session, -32602 in 2026, data.uri either way); lists
// show what the caller may read; CanRead agrees with reads.
func TestServeResources(t *testing.T) {
	rt, b := resourcesFixture(t)
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	prov, _, _ := liveOn(t, rt, "T", "A")
	client := clientOf(t, rt, memdb.AccessReadOnly)

	res := resultOf[*mcp.ReadResourceResult](t, "read open", readRes(t, b, client, 0, "test://open"))
	if len(res.Contents) != 1 || res.Contents[0].Text != "content of test://open" {
		t.Errorf("read open = %+v", res.Contents)
	}
	res = resultOf[*mcp.ReadResourceResult](t, "read item", readRes(t, b, client, 0, "test://items/7"))
	if res.Contents[0].Text != "item 7" || res.Contents[0].URI != "test://items/7" {
		t.Errorf("read item = %+v", res.Contents[0])
	}
	if r := readRes(t, b, prov, 0, "test://mine"); r.Result == nil {
		t.Errorf("provider reads its readAsCaller resource: %+v", r.Err)
	}

	for _, era := range []transport.Era{transport.EraSession, transport.EraModern} {
		code := map[transport.Era]int{transport.EraSession: -32002, transport.EraModern: -32602}[era]
		for _, uri := range []string{"test://mine", "test://secret", "test://nothing", "test://items/42"} {
			got := wantRPCError(t, uri, readRes(t, b, client, era, uri), code)
			want := wantRPCError(t, "unknown", readRes(t, b, client, era, "test://nothing"), code)
			if want.Data.(map[string]string)["uri"] != "test://nothing" || !cmp.Equal(wire(t, got), wireWithURI(t, want, uri)) {
				t.Errorf("era %d: %s answered %+v, unknown answered %+v: want the same but for data.uri", era, uri, got, want)
			}
		}
	}

	list := func(p mcpruntime.Principal, method string) []string {
		w := wire(t, serve(t, b, serveReq{caller: p, method: method}).Result)
		var out []string
		key, field := "resources", "uri"
		if method == "resources/templates/list" {
			key, field = "resourceTemplates", "uriTemplate"
		}
		for _, r := range w[key].([]any) {
			out = append(out, r.(map[string]any)[field].(string))
		}
		if w["cacheScope"] != "private" {
			t.Errorf("%s cacheScope = %v, want private", method, w["cacheScope"])
		}
		return out
	}
	if diff := cmp.Diff([]string{"test://open"}, list(client, "resources/list")); diff != "" {
		t.Errorf("client resources/list (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"test://mine", "test://open"}, list(prov, "resources/list")); diff != "" {
		t.Errorf("provider resources/list (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{mcpruntime.TranscriptTemplate, "test://items/{id}"}, list(client, "resources/templates/list")); diff != "" {
		t.Errorf("resources/templates/list (-want +got):\n%s", diff)
	}

	for _, c := range []struct {
		p    mcpruntime.Principal
		uri  string
		want bool
	}{
		{client, "test://open", true}, {client, "test://mine", false}, {prov, "test://mine", true},
		{client, "test://secret", false}, {client, "test://nothing", false}, {client, "test://items/42", true},
		{client, mcpruntime.TranscriptURI("T"), true}, {client, mcpruntime.TranscriptURI("ghost"), false},
	} {
		if got := b.CanRead(c.p, c.uri); got != c.want {
			t.Errorf("CanRead(%s, %s) = %v, want %v", c.p.Namespace, c.uri, got, c.want)
		}
	}
}

// wireWithURI is e as the client sees it, with data.uri replaced.
func wireWithURI(t *testing.T, e *transport.RPCError, uri string) map[string]any {
	t.Helper()
	return wire(t, &transport.RPCError{Code: e.Code, Message: e.Message, Data: map[string]string{"uri": uri}})
}

// TestResourceRegistration: what cannot be registered, and list changes.
func TestResourceRegistration(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	f := &recFeed{}
	mcpruntime.AddChangeFeed(rt, f)
	ok := staticResource("test://a", mcpruntime.AccessRead, "")
	bad := []mcpruntime.Resource{
		staticResource("", mcpruntime.AccessRead, ""),
		staticResource("test://m", mcpruntime.AccessMutate, ""),
		staticResource("test://n", "", ""),
		{Resource: mcp.Resource{URI: "test://h", Name: "h"}, Access: mcpruntime.AccessRead},
	}
	noErr(t, rt.RegisterResource(ok))
	for _, r := range append(bad, ok) {
		if err := rt.RegisterResource(r); !errors.Is(err, mcpruntime.ErrInvalidResource) {
			t.Errorf("RegisterResource(%q) = %v, want ErrInvalidResource", r.URI, err)
		}
	}
	tmpl := mcpruntime.ResourceTemplate{ResourceTemplate: mcp.ResourceTemplate{URITemplate: "test://{unclosed", Name: "x"}, Access: mcpruntime.AccessRead, Handler: ok.Handler}
	if err := rt.RegisterResourceTemplate(tmpl); !errors.Is(err, mcpruntime.ErrInvalidResource) {
		t.Errorf("RegisterResourceTemplate(bad template) = %v, want ErrInvalidResource", err)
	}
	tmpl.URITemplate = "test://t/{x}"
	noErr(t, rt.RegisterResourceTemplate(tmpl))
	if !rt.RemoveResource("test://a") || !rt.RemoveResource("test://t/{x}") || rt.RemoveResource("test://a") {
		t.Error("RemoveResource of a resource, a template, a removed one")
	}
	if changed, _ := f.take(); !cmp.Equal(changed, []string{"resources", "resources", "resources", "resources"}) {
		t.Errorf("list changes = %v", changed)
	}
}

// TestTranscriptResource (SPEC §5b.5): a thread's transcript is a resource
// of the built-in template, JSON of its messages; posting tells its
// subscribers; a deleted thread has none.
func TestTranscriptResource(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	f := &recFeed{}
	mcpruntime.AddChangeFeed(rt, f)
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T:1")
	p, _, _ := liveOn(t, rt, "T:1", "A")
	ctx := context.Background()
	_, err := rt.Post(ctx, p, "", "hello")
	noErr(t, err)
	uri := mcpruntime.TranscriptURI("T:1")
	if uri != "mcpruntime://threads/T%3A1/transcript" {
		t.Errorf("TranscriptURI = %q", uri)
	}
	if _, updated := f.take(); !cmp.Equal(updated, []string{uri}) {
		t.Errorf("updates after a post = %v, want [%s]", updated, uri)
	}
	res := resultOf[*mcp.ReadResourceResult](t, "read transcript", readRes(t, b, clientOf(t, rt, memdb.AccessReadOnly), 0, uri))
	var tr struct {
		ThreadID string `json:"threadId"`
		Messages []struct {
			Text string `json:"text"`
		} `json:"messages"`
	}
	noErr(t, json.Unmarshal([]byte(res.Contents[0].Text), &tr))
	if tr.ThreadID != "T:1" || len(tr.Messages) != 1 || tr.Messages[0].Text != "hello" || res.Contents[0].MIMEType != "application/json" {
		t.Errorf("transcript = %s", res.Contents[0].Text)
	}
	// A post through thread_post is the same path.
	res2 := toolsCall(t, rt, p, "thread_post", `{"text":"again"}`)
	if res2.IsError {
		t.Fatalf("thread_post = %q", resultText(res2))
	}
	if _, updated := f.take(); !cmp.Equal(updated, []string{uri}) {
		t.Errorf("updates after thread_post = %v", updated)
	}
	noErr(t, rt.DeleteThread(ctx, "T:1"))
	if b.CanRead(p, uri) {
		t.Error("CanRead of a deleted thread's transcript")
	}
	wantRPCError(t, "read deleted", readRes(t, b, clientOf(t, rt, memdb.AccessReadOnly), 0, uri), -32002)
}

// TestReadCacheScope (SPEC §5b.1): a read answers cacheScope "private",
// as the lists do, in both eras, unless its handler set its own.
func TestReadCacheScope(t *testing.T) {
	rt, b := resourcesFixture(t)
	noErr(t, rt.RegisterResource(mcpruntime.Resource{Resource: mcp.Resource{URI: "test://public", Name: "public"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, Text: "same for all"}}, Cacheable: mcp.Cacheable{CacheScope: "public", TTLMs: 1000}}, nil
		}}))
	p := clientOf(t, rt, memdb.AccessReadOnly)
	for _, era := range []transport.Era{transport.EraSession, transport.EraModern} {
		for uri, want := range map[string]string{"test://open": "private", "test://items/3": "private", "test://public": "public"} {
			res := readRes(t, b, p, era, uri)
			if res.Err != nil {
				t.Fatalf("%v read %s: %+v", era, uri, res.Err)
			}
			if got := wire(t, res.Result)["cacheScope"]; got != want {
				t.Errorf("%v read %s: cacheScope %v, want %q", era, uri, got, want)
			}
		}
		list := serve(t, b, serveReq{caller: p, era: era, method: "resources/list", params: "{}"})
		if got := wire(t, list.Result)["cacheScope"]; got != "private" {
			t.Errorf("%v resources/list: cacheScope %v", era, got)
		}
	}
}

package mcpruntime_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// sdkBearerTransport adds "Authorization: Bearer <token>" to every request, as
// an MCP host configured with a static credential does.
type sdkBearerTransport struct {
	token string
	base  http.RoundTripper
}

func (b sdkBearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(req)
}

// interopServer serves rt's MCP endpoint on a test server. Cleanup closes
// the endpoint first (ending open streams), then the test server.
func interopServer(t *testing.T, rt *mcpruntime.Runtime) (*httptest.Server, interface{ Sessions() int }) {
	t.Helper()
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatalf("MCPHandler: %v", err)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	t.Cleanup(h.Close)
	return ts, h
}

// sdkConnect connects the official SDK client to ts with tok, pinned to
// 2025-11-25: a session. (Unpinned, v1.8.0 chooses 2026-07-28 now that it
// is served: TestInteropGoSDKModern.)
func sdkConnect(t *testing.T, ts *httptest.Server, tok string, opts *mcp.ClientOptions) *mcp.ClientSession {
	t.Helper()
	return sdkConnectClient(t, ts, tok, mcp.NewClient(&mcp.Implementation{Name: "interop-test", Version: "1.0.0"}, opts))
}

// sdkConnectClient connects client to ts with tok, pinned to 2025-11-25.
func sdkConnectClient(t *testing.T, ts *httptest.Server, tok string, client *mcp.Client) *mcp.ClientSession {
	t.Helper()
	return sdkConnectClientVersion(t, ts, tok, client, "2025-11-25")
}

// sdkConnectVersion connects the SDK client asking for version ("" = its
// default, the newest it knows).
func sdkConnectVersion(t *testing.T, ts *httptest.Server, tok string, opts *mcp.ClientOptions, version string) *mcp.ClientSession {
	t.Helper()
	return sdkConnectClientVersion(t, ts, tok, mcp.NewClient(&mcp.Implementation{Name: "interop-test", Version: "1.0.0"}, opts), version)
}

// sdkConnectClientVersion connects client to ts with tok, asking for
// version.
func sdkConnectClientVersion(t *testing.T, ts *httptest.Server, tok string, client *mcp.Client, version string) *mcp.ClientSession {
	t.Helper()
	transport := &mcp.StreamableClientTransport{
		Endpoint:   ts.URL + "/mcp",
		HTTPClient: &http.Client{Transport: sdkBearerTransport{token: tok, base: ts.Client().Transport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("SDK Connect: %v", err)
	}
	return cs
}

func sdkCall(t *testing.T, cs *mcp.ClientSession, params *mcp.CallToolParams) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, params)
	if err != nil {
		t.Fatalf("CallTool(%s) = %v", params.Name, err)
	}
	return res
}

func sdkStructured(t *testing.T, what string, res *mcp.CallToolResult) map[string]any {
	t.Helper()
	m, ok := res.StructuredContent.(map[string]any)
	if !ok {
		t.Fatalf("%s: structuredContent = %#v (%T), want an object", what, res.StructuredContent, res.StructuredContent)
	}
	return m
}

func sdkText(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			return tc.Text
		}
	}
	return ""
}

// interopPost posts body to ts with tok and an optional session id.
func interopPost(t *testing.T, ts *httptest.Server, tok, sid, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.URL+"/mcp", bytes.NewReader([]byte(body)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2025-11-25")
	if sid != "" {
		req.Header.Set("Mcp-Session-Id", sid)
	}
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read body: %v", err)
	}
	return resp, out
}

// TestInteropGoSDK drives the endpoint with the official MCP Go SDK client:
// initialize, tools/list, structured tool results, a refusal, progress
// notifications from a host tool, and Close, which must DELETE the session.
func TestInteropGoSDK(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	pA, run, tokA := liveOn(t, rt, "T", "A")

	// A host tool that reports progress before answering.
	const steps = 3
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "host_count", Description: "counts to three, reporting progress"},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			for i := 1; i <= steps; i++ {
				call.Progress(float64(i), steps, "step")
			}
			return textResult("counted", map[string]int{"count": steps}), nil
		},
	}))

	ts, srv := interopServer(t, rt)

	var (
		mu       sync.Mutex
		progress []mcp.ProgressNotificationParams
	)
	cs := sdkConnect(t, ts, tokA, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, *req.Params)
		},
	})
	closed := false
	t.Cleanup(func() {
		if !closed {
			cs.Close()
		}
	})

	sid := cs.ID()
	if len(sid) != len("mcps_")+32 || sid[:5] != "mcps_" {
		t.Fatalf("session id = %q, want mcps_ + 32 hex", sid)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" {
		t.Errorf("negotiated protocol version = %q, want 2025-11-25", got)
	}
	if got := srv.Sessions(); got != 1 {
		t.Errorf("Sessions() after connect = %d, want 1", got)
	}
	recs := rt.MCPSessions()
	if len(recs) != 1 || recs[0].ID != sid || recs[0].Owner != pA.Namespace || recs[0].ClientName != "interop-test" {
		t.Fatalf("session records after connect = %+v, want one for %s owned by %s", recs, sid, pA.Namespace)
	}

	// tools/list: the four built-ins plus the host tool, each with a schema.
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := cs.ListTools(lctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.InputSchema == nil {
			t.Errorf("tool %s has no input schema", tool.Name)
		}
	}
	slices.Sort(names)
	if diff := cmp.Diff([]string{"host_count", "runtime_capabilities", "thread_list", "thread_post", "thread_read"}, names); diff != "" {
		t.Errorf("ListTools names (-want +got):\n%s", diff)
	}

	// thread_post, then thread_read sees the message: structured results.
	post := sdkCall(t, cs, &mcp.CallToolParams{Name: "thread_post", Arguments: map[string]any{"text": "hello from the SDK"}})
	if post.IsError {
		t.Fatalf("thread_post: isError, %q", sdkText(post))
	}
	ps := sdkStructured(t, "thread_post", post)
	if ps["text"] != "hello from the SDK" || ps["threadId"] != "T" || ps["author"] != pA.Namespace || ps["seq"] != float64(0) {
		t.Errorf("thread_post structuredContent = %v, want seq 0 on T by %s", ps, pA.Namespace)
	}
	read := sdkCall(t, cs, &mcp.CallToolParams{Name: "thread_read", Arguments: map[string]any{}})
	if read.IsError {
		t.Fatalf("thread_read: isError, %q", sdkText(read))
	}
	rs := sdkStructured(t, "thread_read", read)
	if rs["threadId"] != "T" || rs["status"] != "active" || rs["instance"] != "A" {
		t.Errorf("thread_read structuredContent = %v, want active thread T on A", rs)
	}
	if ar, _ := rs["activeRun"].(map[string]any); ar["runId"] != run || ar["instance"] != "A" {
		t.Errorf("thread_read activeRun = %v, want run %s of A", rs["activeRun"], run)
	}
	msgs, _ := rs["messages"].([]any)
	if len(msgs) != 1 || msgs[0].(map[string]any)["text"] != "hello from the SDK" {
		t.Errorf("thread_read messages = %v, want the posted message", rs["messages"])
	}
	if sdkText(read) == "" {
		t.Errorf("thread_read has no text content")
	}

	// A refusal is a result, not a protocol error.
	missing := sdkCall(t, cs, &mcp.CallToolParams{Name: "thread_read", Arguments: map[string]any{"threadId": "nope"}})
	if !missing.IsError || sdkStructured(t, "thread_read nope", missing)["code"] != mcpruntime.CodeThreadNotFound {
		t.Errorf("thread_read of a missing thread = isError %v, %v; want isError with code %s", missing.IsError, missing.StructuredContent, mcpruntime.CodeThreadNotFound)
	}
	noErr(t, rt.EndRun(ctx, "T", run))
	refused := sdkCall(t, cs, &mcp.CallToolParams{Name: "thread_post", Arguments: map[string]any{"text": "late"}})
	if !refused.IsError || sdkStructured(t, "thread_post after EndRun", refused)["code"] != mcpruntime.CodeParentNotActive {
		t.Errorf("thread_post after EndRun = isError %v, %v; want isError with code %s", refused.IsError, refused.StructuredContent, mcpruntime.CodeParentNotActive)
	}
	bad := sdkCall(t, cs, &mcp.CallToolParams{Name: "thread_read", Arguments: map[string]any{"threadId": 7}})
	if !bad.IsError || sdkStructured(t, "thread_read bad args", bad)["code"] != mcpruntime.CodeInvalidArguments {
		t.Errorf("thread_read with a numeric threadId = isError %v, %v; want code %s", bad.IsError, bad.StructuredContent, mcpruntime.CodeInvalidArguments)
	}
	uctx, ucancel := context.WithTimeout(ctx, 10*time.Second)
	defer ucancel()
	if _, err := cs.CallTool(uctx, &mcp.CallToolParams{Name: "no_such_tool"}); err == nil {
		t.Errorf("CallTool(no_such_tool) succeeded, want a JSON-RPC error")
	}

	// Progress: the SDK hands every notification to its handler.
	params := &mcp.CallToolParams{Name: "host_count", Arguments: map[string]any{}}
	params.SetProgressToken("count-1")
	counted := sdkCall(t, cs, params)
	if counted.IsError || sdkStructured(t, "host_count", counted)["count"] != float64(steps) || sdkText(counted) != "counted" {
		t.Fatalf("host_count = %+v, want count %d", counted, steps)
	}
	waitUntil(t, "progress notifications delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(progress) >= steps
	})
	mu.Lock()
	for i, p := range progress {
		if p.ProgressToken != "count-1" || p.Progress != float64(i+1) || p.Total != steps || p.Message != "step" {
			t.Errorf("progress[%d] = %+v, want token count-1, progress %d of %d", i, p, i+1, steps)
		}
	}
	if len(progress) != steps {
		t.Errorf("got %d progress notifications, want %d", len(progress), steps)
	}
	mu.Unlock()

	// Close sends DELETE: the session, its record and its id are gone.
	closed = true
	if err := cs.Close(); err != nil {
		t.Fatalf("ClientSession.Close: %v", err)
	}
	recs = rt.MCPSessions()
	if len(recs) != 0 {
		t.Errorf("session records after Close = %+v, want none", recs)
	}
	waitUntil(t, "session actor gone after Close", func() bool { return srv.Sessions() == 0 })
	if resp, body := interopPost(t, ts, tokA, sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`); resp.StatusCode != http.StatusNotFound {
		t.Errorf("ping on the closed session = %s %s, want 404", resp.Status, body)
	}
}

// TestInteropForeignSession: a second principal cannot use the first's
// session id; the answer is the unknown-session 404, and the first
// client's session keeps working.
func TestInteropForeignSession(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, _, tokA := liveOn(t, rt, "T", "A")
	_, _, tokB := liveOn(t, rt, "U", "A")
	cl, _ := issueClient(t, rt, "ide", "read-write")

	ts, srv := interopServer(t, rt)
	csA := sdkConnect(t, ts, tokA, nil)
	t.Cleanup(func() { csA.Close() })
	csB := sdkConnect(t, ts, tokB, nil)
	t.Cleanup(func() { csB.Close() })
	sidA := csA.ID()
	if sidA == "" || sidA == csB.ID() {
		t.Fatalf("session ids %q and %q, want two distinct ids", sidA, csB.ID())
	}

	const ping = `{"jsonrpc":"2.0","id":1,"method":"ping"}`
	unknownResp, unknownBody := interopPost(t, ts, tokB, "mcps_00000000000000000000000000000000", ping)
	if unknownResp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown session = %s, want 404", unknownResp.Status)
	}
	for _, who := range []struct{ name, tok string }{{"provider B", tokB}, {"client grant", cl.Token}} {
		for _, body := range []string{
			ping,
			`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_read","arguments":{"threadId":"T"}}}`,
			`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		} {
			resp, got := interopPost(t, ts, who.tok, sidA, body)
			if resp.StatusCode != http.StatusNotFound || !bytes.Equal(got, unknownBody) {
				t.Errorf("%s with A's session id, body %s = %s %q, want 404 %q", who.name, body, resp.Status, got, unknownBody)
			}
		}
	}

	// A's session is untouched.
	if srv.Sessions() != 2 {
		t.Errorf("Sessions() = %d, want 2", srv.Sessions())
	}
	res := sdkCall(t, csA, &mcp.CallToolParams{Name: "runtime_capabilities"})
	if res.IsError || sdkStructured(t, "runtime_capabilities", res)["threadId"] != "T" {
		t.Errorf("A's runtime_capabilities after foreign attempts = %+v, want thread T", res)
	}
}

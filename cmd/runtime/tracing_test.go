package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestServeTraces (SPEC §5b.26): `runtime serve` with
// OTEL_EXPORTER_OTLP_ENDPOINT exports over OTLP/HTTP the request's span in
// the client's trace (its traceparent) and the tool call's span under it,
// flushed at shutdown; the resource names the service. Without the
// variable nothing is exported (TestServeEndToEnd runs without it).
func TestServeTraces(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	var service string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, kv := range rs.Resource.GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
		mu.Unlock()
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	defer recv.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", recv.URL) // the SDK reads the process's environment
	dir := t.TempDir()
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "env-admin-token-0123456789abcdef0123456789",
		"RUNTIME_ADMIN_TOKEN_FILE": filepath.Join(dir, "admin-token"), "OTEL_EXPORTER_OTLP_ENDPOINT": recv.URL}
	mcpAddr, _, logs, stop := startServe(t, env, "--memory", "--demo")
	auth, err := os.ReadFile(filepath.Join(dir, "demo-authorization"))
	if err != nil {
		t.Fatalf("demo credential: %v; logs:\n%s", err, logs)
	}
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", strings.TrimSpace(string(auth)))
	c.initialize()
	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	req := c.request(http.MethodPost, `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	resp, err := c.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("traced call: %v %v", err, resp)
	}
	resp.Body.Close()
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; logs:\n%s", code, logs)
	}
	mu.Lock()
	defer mu.Unlock()
	byName := map[string]*tracepb.Span{}
	for _, s := range spans {
		if hex.EncodeToString(s.TraceId) == traceID {
			byName[s.Name] = s
		}
	}
	httpSpan, tool := byName["POST /mcp"], byName["tools/call thread_read"]
	if httpSpan == nil || tool == nil {
		t.Fatalf("spans in the client's trace: %v; want POST /mcp and tools/call thread_read", byName)
	}
	if hex.EncodeToString(httpSpan.ParentSpanId) != parentID || hex.EncodeToString(tool.ParentSpanId) != hex.EncodeToString(httpSpan.SpanId) {
		t.Error("want the request's span under the client's, the tool's under the request's")
	}
	if service != "mcp-runtime" {
		t.Errorf("service.name %q, want mcp-runtime", service)
	}
}

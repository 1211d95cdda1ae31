package mcpruntime_test

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	mcpruntime "github.com/agenthost/mcpruntime"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// otlpReceiver is an in-process OTLP/HTTP trace receiver: it keeps every
// span exported to it.
type otlpReceiver struct {
	*httptest.Server
	mu    sync.Mutex
	spans []*tracepb.Span
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	o := &otlpReceiver{}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		var req coltrace.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		o.mu.Lock()
		for _, rs := range req.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				o.spans = append(o.spans, ss.Spans...)
			}
		}
		o.mu.Unlock()
		b, _ := proto.Marshal(&coltrace.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(b)
	}))
	t.Cleanup(o.Close)
	return o
}

// span returns the received span of that name in trace traceID (nil:
// none yet).
func (o *otlpReceiver) span(name, traceID string) *tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.spans {
		if s.Name == name && hex.EncodeToString(s.TraceId) == traceID {
			return s
		}
	}
	return nil
}

// wait waits for the span of that name in trace traceID: the request's
// span ends once its answer is written, maybe after the client read it.
func (o *otlpReceiver) wait(t *testing.T, name, traceID string) *tracepb.Span {
	t.Helper()
	var s *tracepb.Span
	waitUntil(t, "span "+name, func() bool { s = o.span(name, traceID); return s != nil })
	return s
}

func spanAttr(s *tracepb.Span, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == key {
			return kv.Value.GetStringValue()
		}
	}
	return ""
}

// TestTracing (SPEC §5b.26): with MCPOptions.TracerProvider, a request
// carrying the client's traceparent is a span of the client's trace, the
// tools/call under it is a span named after the tool, and the span the
// tool handler makes from its ctx nests under that — all exported over
// OTLP/HTTP to an in-process receiver. A trace context in params._meta
// parents the tool's span instead. No attribute carries an argument.
func TestTracing(t *testing.T) {
	recv := newOTLPReceiver(t)
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(recv.URL), otlptracehttp.WithInsecure())
	noErr(t, err)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })

	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	inTrace := make(chan trace.SpanContext, 1) // the span the handler's ctx carries
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool: mcp.Tool{Name: "traced"}, Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			inTrace <- trace.SpanContextFromContext(ctx)
			_, span := trace.SpanFromContext(ctx).TracerProvider().Tracer("host").Start(ctx, "host.work")
			span.End()
			return textResult("done", nil), nil
		},
	}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{TracerProvider: tp})
	sid := e.Initialize(tok)

	const traceID, parentID = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	h := ht.Headers(tok, sid)
	h.Set("traceparent", "00-"+traceID+"-"+parentID+"-01")
	res := e.Do(http.MethodPost, h, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"traced","arguments":{"secret":"s3cr3t"}}}`)
	ht.WantStatus(t, "traced call", res, http.StatusOK)
	// The handler ran before the answer: what its ctx carried is known now,
	// without waiting for the exporter.
	select {
	case sc := <-inTrace:
		if got := sc.TraceID().String(); got != traceID {
			t.Fatalf("the handler's span is in trace %s, want the client's %s", got, traceID)
		}
	default:
		t.Fatal("the traced call answered 200 without running its handler")
	}
	req, tool, host := recv.wait(t, "POST /mcp", traceID), recv.wait(t, "tools/call traced", traceID), recv.wait(t, "host.work", traceID)
	for _, s := range []*tracepb.Span{req, tool, host} {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.String(), "s3cr3t") || strings.Contains(kv.Value.String(), tok) {
				t.Errorf("span %q attribute %s carries an argument or the token", s.Name, kv.Key)
			}
		}
	}
	if got := hex.EncodeToString(req.ParentSpanId); got != parentID {
		t.Errorf("request span's parent %s, want the client's span %s", got, parentID)
	}
	if hex.EncodeToString(tool.ParentSpanId) != hex.EncodeToString(req.SpanId) || hex.EncodeToString(host.ParentSpanId) != hex.EncodeToString(tool.SpanId) {
		t.Error("want the handler's span under the tool's, the tool's under the request's")
	}
	if req.Kind != tracepb.Span_SPAN_KIND_SERVER || tool.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span kinds %v, %v; want server spans", req.Kind, tool.Kind)
	}
	if spanAttr(tool, "mcp.method.name") != "tools/call" || spanAttr(tool, "gen_ai.tool.name") != "traced" || spanAttr(req, "http.request.method") != "POST" {
		t.Errorf("attributes: tool %v, request %v", tool.Attributes, req.Attributes)
	}

	// A trace context in _meta: the tool's span joins that trace, linked
	// to the request's.
	const metaTrace = "0af7651916cd43dd8448eb211c80319c"
	res = e.Do(http.MethodPost, ht.Headers(tok, sid), `{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"runtime_capabilities","arguments":{},"_meta":{"traceparent":"00-`+metaTrace+`-b7ad6b7169203331-01"}}}`)
	ht.WantStatus(t, "call with _meta", res, http.StatusOK)
	caps := recv.wait(t, "tools/call runtime_capabilities", metaTrace)
	if hex.EncodeToString(caps.ParentSpanId) != "b7ad6b7169203331" || len(caps.Links) != 1 {
		t.Fatalf("the _meta call's span = %v, want it in trace %s under b7ad6b7169203331, linked to its request", caps, metaTrace)
	}
}

// TestTracingOff: without a TracerProvider a traceparent changes nothing
// and the handler's ctx carries no span.
func TestTracingOff(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	var valid bool
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool: mcp.Tool{Name: "traced"}, Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			valid = trace.SpanContextFromContext(ctx).IsValid()
			return textResult("done", nil), nil
		},
	}))
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.Initialize(tok)
	h := ht.Headers(tok, sid)
	h.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	ht.WantStatus(t, "call", e.Do(http.MethodPost, h, `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"traced","arguments":{}}}`), http.StatusOK)
	if valid {
		t.Error("the handler's ctx carries a span context without a TracerProvider")
	}
}

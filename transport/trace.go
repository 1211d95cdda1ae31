package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// The endpoint's spans (Options.TracerProvider, SPEC §5b.26), named and
// attributed after the OpenTelemetry semantic conventions for HTTP
// servers and for MCP: a server span per HTTP request, "POST /mcp",
// continuing the client's traceparent header; under it a server span per
// feature request, "{mcp.method.name} {target}" — "tools/call deploy",
// "prompts/get review", "resources/read" (a URI is no low-cardinality
// target) — whose parent is the trace context of the request's
// params._meta when it carries one (the HTTP span is then a link). The
// handler's ctx carries the feature span, so a host's own spans nest
// under it. No attribute carries a token, an argument or a result.

// tracerName is the instrumentation scope of the endpoint's spans.
const tracerName = "github.com/agenthost/mcpruntime/transport"

// maxAttr bounds the length of an attribute taken from the request.
const maxAttr = 128

func clip(s string) string {
	if len(s) > maxAttr {
		return s[:maxAttr]
	}
	return s
}

// traceHTTP starts the HTTP request's span; end ends it with the status.
func (s *Server) traceHTTP(r *http.Request, sw *statusWriter) (*http.Request, func()) {
	ctx := s.opts.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("http.route", s.opts.Path),
		attribute.String("url.path", clip(r.URL.Path)),
		attribute.String("network.protocol.name", "http"),
	}
	if v := r.Header.Get(headerProtocol); v != "" {
		attrs = append(attrs, attribute.String("mcp.protocol.version", clip(v)))
	}
	if v := r.Header.Get(headerSession); v != "" {
		attrs = append(attrs, attribute.String("mcp.session.id", clip(v)))
	}
	ctx, span := s.tracer.Start(ctx, r.Method+" "+s.opts.Path, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), func() {
		status := sw.answered()
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetAttributes(attribute.String("error.type", strconv.Itoa(status)))
			span.SetStatus(codes.Error, "")
		}
		span.End()
	}
}

// traceFeature starts a feature request's span.
func (s *Server) traceFeature(ctx context.Context, method string, params json.RawMessage, req *Request) (context.Context, trace.Span) {
	name := method
	attrs := []attribute.KeyValue{
		attribute.String("mcp.method.name", method),
		attribute.String("mcp.protocol.version", req.ProtocolVersion),
		attribute.String("jsonrpc.protocol.version", "2.0"),
	}
	switch method {
	case "tools/call":
		if tool, _, ok := toolCallParams(params); ok {
			name += " " + clip(tool)
			attrs = append(attrs, attribute.String("gen_ai.tool.name", clip(tool)), attribute.String("gen_ai.operation.name", "execute_tool"))
		}
	case "prompts/get", "resources/read":
		var p struct{ Name, URI string }
		if json.Unmarshal(params, &p) == nil {
			if p.Name != "" && method == "prompts/get" {
				name += " " + clip(p.Name)
				attrs = append(attrs, attribute.String("gen_ai.prompt.name", clip(p.Name)))
			}
			if p.URI != "" && method == "resources/read" {
				attrs = append(attrs, attribute.String("mcp.resource.uri", clip(p.URI)))
			}
		}
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...)}
	if meta, ok := metaCarrier(params); ok {
		if mctx := s.opts.Propagator.Extract(context.Background(), meta); trace.SpanContextFromContext(mctx).IsValid() {
			opts = append(opts, trace.WithLinks(trace.LinkFromContext(ctx)))
			ctx = trace.ContextWithRemoteSpanContext(ctx, trace.SpanContextFromContext(mctx))
		}
	}
	return s.tracer.Start(ctx, name, opts...)
}

// endFeature ends a feature request's span with its outcome: a JSON-RPC
// error's code, or "tool_error" for an isError result.
func endFeature(span trace.Span, res *Response) {
	switch {
	case res.Err != nil:
		code := strconv.Itoa(res.Err.Code)
		span.SetAttributes(attribute.String("error.type", code), attribute.String("rpc.response.status_code", code))
		span.SetStatus(codes.Error, "")
	case res.Result != nil:
		if r, ok := res.Result.(*mcp.CallToolResult); ok && r.IsError {
			span.SetAttributes(attribute.String("error.type", "tool_error"))
			span.SetStatus(codes.Error, "")
		}
	}
	span.End()
}

// metaCarrier is the trace context in params._meta, if it has one.
func metaCarrier(params json.RawMessage) (propagation.MapCarrier, bool) {
	if !bytes.Contains(params, []byte(`"traceparent"`)) {
		return nil, false
	}
	var p struct {
		Meta map[string]any `json:"_meta"`
	}
	if json.Unmarshal(params, &p) != nil || p.Meta == nil {
		return nil, false
	}
	c := propagation.MapCarrier{}
	for _, k := range []string{"traceparent", "tracestate", "baggage"} {
		if v, ok := p.Meta[k].(string); ok && len(v) <= 512 {
			c[k] = v
		}
	}
	return c, c["traceparent"] != ""
}

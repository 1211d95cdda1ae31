package main

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Tracing (SPEC §5b.26): the MCP endpoint's spans are exported over
// OTLP/HTTP when the environment names a collector —
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT —
// and OTEL_TRACES_EXPORTER is not "none". Everything else the standard
// OTEL_* variables say (headers, timeout, compression, OTEL_SERVICE_NAME,
// OTEL_RESOURCE_ATTRIBUTES, the sampler) the SDK reads itself. Unset:
// no spans are made.

// tracingOn reports whether the environment asks for traces.
func tracingOn(env map[string]string) bool {
	if strings.EqualFold(env["OTEL_TRACES_EXPORTER"], "none") {
		return false
	}
	return env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] != "" || env["OTEL_EXPORTER_OTLP_ENDPOINT"] != ""
}

// newTracerProvider builds the OTLP/HTTP exporter and a batching tracer
// provider; shutdown flushes what is left, within ctx.
func newTracerProvider(ctx context.Context, log *slog.Logger) (*sdktrace.TracerProvider, error) {
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", "mcp-runtime")),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil {
		log.Warn("trace resource", "err", err) // a partial resource still serves
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(2*time.Second)), sdktrace.WithResource(res))
	log.Info("exporting traces over OTLP/HTTP")
	return tp, nil
}

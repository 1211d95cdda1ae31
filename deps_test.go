package mcpruntime_test

import (
	"os/exec"
	"strings"
	"testing"
)

// clusterDeps are the import paths that only several nodes may link:
// etcd's client, gRPC and grpc-gateway under it, and zap. bbolt, also
// under go.etcd.io, is one node's durable store (internal/durable) and
// is allowed (oneNodeDeps).
var (
	clusterDeps = []string{"go.etcd.io/", "google.golang.org/grpc", "github.com/grpc-ecosystem/", "go.uber.org/zap"}
	oneNodeDeps = []string{"go.etcd.io/bbolt"}
)

// TestOneNodeLinksNoCluster: the packages an embedder on one node imports
// (the root, transport, admin, metrics, memdb, and the smallest host,
// examples/minimal) link none of clusterDeps; package cluster does, so
// the check sees them when they are there. One go list, from the module's
// build cache.
func TestOneNodeLinksNoCluster(t *testing.T) {
	single := []string{".", "./transport", "./admin", "./metrics", "./memdb", "./examples/minimal"}
	args := append([]string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, single...)
	out, err := exec.Command("go", append(args, "./cluster")...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	if len(deps) != len(single)+1 {
		t.Fatalf("go list listed %d packages, want %d:\n%s", len(deps), len(single)+1, out)
	}
	const mod = "github.com/agenthost/mcpruntime"
	for pkg, ds := range deps {
		var linked []string
	deps:
		for _, d := range ds {
			for _, prefix := range oneNodeDeps {
				if strings.HasPrefix(d, prefix) {
					continue deps
				}
			}
			for _, prefix := range clusterDeps {
				if strings.HasPrefix(d, prefix) {
					linked = append(linked, d)
					break
				}
			}
		}
		switch {
		case pkg == mod+"/cluster" && len(linked) == 0:
			t.Errorf("%s links none of %v: the check no longer sees what it looks for", pkg, clusterDeps)
		case pkg != mod+"/cluster" && len(linked) > 0:
			t.Errorf("%s links %d cluster packages, e.g. %s: a runtime on one node must not (import them only under package cluster)", pkg, len(linked), linked[0])
		}
	}
}

// traceExportDeps are the OpenTelemetry SDK's tracing and the OTLP
// exporter: cmd/runtime links them to export spans; an embedder's packages
// take a TracerProvider (the API) and link neither (SPEC §5b.26).
var traceExportDeps = []string{"go.opentelemetry.io/otel/sdk/trace", "go.opentelemetry.io/otel/exporters/otlp/", "go.opentelemetry.io/proto/otlp"}

// TestEmbedderLinksNoTraceExport: the root, transport, admin and
// examples/minimal link none of traceExportDeps; cmd/runtime does, so the
// check sees them when they are there.
func TestEmbedderLinksNoTraceExport(t *testing.T) {
	pkgs := []string{".", "./transport", "./admin", "./examples/minimal", "./cmd/runtime"}
	out, err := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(pkgs) {
		t.Fatalf("go list listed %d packages, want %d", len(lines), len(pkgs))
	}
	for _, line := range lines {
		f := strings.Fields(line)
		var linked []string
		for _, d := range f[1:] {
			for _, prefix := range traceExportDeps {
				if strings.HasPrefix(d, prefix) {
					linked = append(linked, d)
				}
			}
		}
		switch cmd := strings.HasSuffix(f[0], "/cmd/runtime"); {
		case cmd && len(linked) == 0:
			t.Errorf("%s links none of %v: the check no longer sees what it looks for", f[0], traceExportDeps)
		case !cmd && len(linked) > 0:
			t.Errorf("%s links %s: an embedder who does not export traces must not", f[0], linked[0])
		}
	}
}

package mcpruntime_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// BenchmarkHTTPSessionChurn is one initialize → notifications/initialized
// → DELETE cycle over loopback (a 2025 session's whole life, as the
// harness's churn row runs it),
// with the default 24 h credential window and with expiry off, and reports
// the live heap after a GC before and after the b.N cycles, and the actors
// left: what a server keeps of the sessions that ended.
// Measure with a fixed count, e.g. -bench HTTPSessionChurn -benchtime 60000x.
func BenchmarkHTTPSessionChurn(b *testing.B) {
	for _, window := range []struct {
		name string
		d    time.Duration
	}{{"window=24h", 0}, {"window=off", mcpruntime.NoExpiry}} {
		b.Run(window.name, func(b *testing.B) { benchSessionChurn(b, window.d) })
	}
}

func benchSessionChurn(b *testing.B, window time.Duration) {
	rt, _, tok := benchRuntimeWith(b, mcpruntime.Config{CredentialWindow: window})
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(h)
	b.Cleanup(srv.Close)
	cycle := func() {
		resp, _ := benchDo(b, srv, tok, http.MethodPost, "", benchInitialize)
		sid := resp.Header.Get("Mcp-Session-Id")
		if resp.StatusCode != http.StatusOK || sid == "" {
			b.Fatalf("initialize: %s", resp.Status)
		}
		if resp, _ := benchDo(b, srv, tok, http.MethodPost, sid, benchInitialized); resp.StatusCode != http.StatusAccepted {
			b.Fatalf("notifications/initialized: %s", resp.Status)
		}
		if resp, _ := benchDo(b, srv, tok, http.MethodDelete, sid, nil); resp.StatusCode != http.StatusNoContent {
			b.Fatalf("DELETE: %s", resp.Status)
		}
	}
	cycle() // the connection, the pools and the first session's lazy state
	before := liveHeap()
	b.ResetTimer()
	for range b.N {
		cycle()
	}
	b.StopTimer()
	after := liveHeap()
	b.ReportMetric(float64(before)/1e6, "heap-MB-before")
	b.ReportMetric(float64(after)/1e6, "heap-MB-after")
	b.ReportMetric(float64(rt.Stats().Processes), "actors-after")
}

// liveHeap is HeapAlloc after a full collection.
func liveHeap() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

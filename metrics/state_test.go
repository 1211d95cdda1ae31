package metrics_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/metrics"
)

// gathered returns the metric family called name, or nil.
func gathered(t *testing.T, reg *prometheus.Registry, name string) *dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf
		}
	}
	return nil
}

// The durable store's metrics count its writes and report its file's
// size; a runtime in memory has neither.
func TestMetricsStateFile(t *testing.T) {
	ctx := context.Background()
	rt, err := mcpruntime.New(mcpruntime.Config{StateFile: filepath.Join(t.TempDir(), "state.db"), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	reg := prometheus.NewRegistry()
	metrics.New(reg, rt)
	count := func() uint64 {
		mf := gathered(t, reg, "mcpruntime_state_write_duration_seconds")
		if mf == nil {
			t.Fatal("no mcpruntime_state_write_duration_seconds")
		}
		h := mf.GetMetric()[0].GetHistogram()
		var prev uint64
		for _, b := range h.GetBucket() {
			if b.GetCumulativeCount() < prev {
				t.Fatalf("buckets not cumulative: %v", h.GetBucket())
			}
			prev = b.GetCumulativeCount()
		}
		if prev > h.GetSampleCount() {
			t.Fatalf("buckets count %d writes, the histogram %d", prev, h.GetSampleCount())
		}
		return h.GetSampleCount()
	}
	before := count()
	for _, id := range []string{"a", "b", "c"} {
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if after := count(); after < before+3 {
		t.Errorf("writes %d after 3 thread creations, %d before", after, before)
	}
	size := gathered(t, reg, "mcpruntime_state_file_bytes")
	if size == nil || size.GetMetric()[0].GetGauge().GetValue() != float64(rt.StateStats().Bytes) || rt.StateStats().Bytes == 0 {
		t.Errorf("mcpruntime_state_file_bytes %v, the file has %d bytes", size, rt.StateStats().Bytes)
	}

	mem := prometheus.NewRegistry()
	metrics.New(mem, newRuntime(t))
	for _, name := range []string{"mcpruntime_state_write_duration_seconds", "mcpruntime_state_file_bytes"} {
		if gathered(t, mem, name) != nil {
			t.Errorf("%s on a runtime in memory", name)
		}
	}
}

package stats

import (
	"math"
	"testing"
	"time"
)

func ms(v ...int) []time.Duration {
	out := make([]time.Duration, len(v))
	for i, x := range v {
		out[i] = time.Duration(x) * time.Millisecond
	}
	return out
}

func TestPercentileNearestRank(t *testing.T) {
	one100 := make([]time.Duration, 100)
	for i := range one100 {
		one100[i] = time.Duration(i+1) * time.Millisecond
	}
	tests := []struct {
		name   string
		sorted []time.Duration
		q      float64
		want   time.Duration
	}{
		{"empty", nil, 0.5, 0},
		{"single", ms(7), 0.99, 7 * time.Millisecond},
		{"p0 is the minimum", ms(1, 2, 3), 0, time.Millisecond},
		{"p100 is the maximum", ms(1, 2, 3), 1, 3 * time.Millisecond},
		{"median of odd count", ms(1, 2, 3, 4, 5), 0.5, 3 * time.Millisecond},
		{"median of even count takes the lower middle", ms(1, 2, 3, 4), 0.5, 2 * time.Millisecond},
		{"p50 of 1..100", one100, 0.5, 50 * time.Millisecond},
		{"p99 of 1..100", one100, 0.99, 99 * time.Millisecond},
		{"p999 of 1..100 is the maximum", one100, 0.999, 100 * time.Millisecond},
		{"tiny q is the minimum", one100, 0.0001, time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Percentile(tt.sorted, tt.q); got != tt.want {
				t.Errorf("Percentile(q=%v) = %v, want %v", tt.q, got, tt.want)
			}
		})
	}
}

func TestSummarizeSorts(t *testing.T) {
	d := ms(5, 1, 4, 2, 3)
	got := Summarize(d)
	want := Latencies{P50: 3 * time.Millisecond, P99: 5 * time.Millisecond, P999: 5 * time.Millisecond, Max: 5 * time.Millisecond}
	if got != want {
		t.Errorf("Summarize = %+v, want %+v", got, want)
	}
	if d[0] != time.Millisecond || d[4] != 5*time.Millisecond {
		t.Errorf("Summarize did not sort its input: %v", d)
	}
}

func TestMedian(t *testing.T) {
	if got := Median(nil); !math.IsNaN(got) {
		t.Errorf("Median(nil) = %v, want NaN", got)
	}
	if got := Median([]float64{3, 1, 2}); got != 2 {
		t.Errorf("Median odd = %v, want 2", got)
	}
	in := []float64{4, 1, 3, 2}
	if got := Median(in); got != 2.5 {
		t.Errorf("Median even = %v, want 2.5", got)
	}
	if in[0] != 4 {
		t.Errorf("Median modified its input: %v", in)
	}
}

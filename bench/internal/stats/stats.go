// Package stats has the small amount of statistics the harness needs:
// latency percentiles of one run and medians across rounds.
package stats

import (
	"math"
	"slices"
	"time"
)

// Percentile returns the q-quantile (0 ≤ q ≤ 1) of sorted by the
// nearest-rank method: the smallest value such that at least q of the
// values are at or below it. It returns 0 for an empty slice.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	switch {
	case q <= 0:
		return sorted[0]
	case q >= 1:
		return sorted[len(sorted)-1]
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[max(rank, 1)-1]
}

// Latencies summarizes a run's latencies.
type Latencies struct {
	P50, P99, P999, Max time.Duration
}

// Summarize sorts d in place and returns its percentiles.
func Summarize(d []time.Duration) Latencies {
	slices.Sort(d)
	return Latencies{
		P50:  Percentile(d, 0.50),
		P99:  Percentile(d, 0.99),
		P999: Percentile(d, 0.999),
		Max:  Percentile(d, 1),
	}
}

// Median returns the median of v (the mean of the two middle values for an
// even count), or NaN for an empty slice. v is not modified.
func Median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	mid := len(s) / 2
	if len(s)%2 == 1 {
		return s[mid]
	}
	return (s[mid-1] + s[mid]) / 2
}

package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"

	"github.com/agenthost/mcpruntime/bench/internal/result"
	"github.com/agenthost/mcpruntime/bench/internal/stats"
)

// The runtime, then the peers and the floor it is compared with, in
// column order.
const runtimeImpl = "runtime"

var others = []string{"gosdk", "mcpgo", "floor"}

// better says which way a metric improves.
type better int

const (
	higher  better = iota // rates
	lower                 // latencies, memory
	neither               // counts that must be zero: no ratio
)

// aggregate folds one metric over rounds.
type aggregate func([]float64) float64

func maxOf(v []float64) float64 { return slices.Max(v) }

// metric is one row kind of a mode.
type metric struct {
	name   string
	format string // of one value
	better better
	agg    aggregate
	get    func(result.Result) float64
}

// The modern mode's rows are the calls mode's.
func init() { metrics[result.ModeModern] = metrics[result.ModeCalls] }

// metrics lists each mode's rows.
var metrics = map[string][]metric{
	result.ModeCalls: {
		{"calls/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"p50 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P50Ms }},
		{"p99 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P99Ms }},
		{"p999 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P999Ms }},
		{"server allocs/call", "%.0f", lower, stats.Median, func(r result.Result) float64 { return r.AllocsPerOp }},
		{"server B/call", "%.0f", lower, stats.Median, func(r result.Result) float64 { return r.AllocBytesPerOp }},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeChurn: {
		{"sessions/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"cycle p99 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P99Ms }},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeModernChurn: {
		{"clients/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"cycle p99 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P99Ms }},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeIdle: {
		{"live heap B/session", "%.0f", lower, stats.Median, func(r result.Result) float64 { return r.HeapPerSession }},
		{"goroutine stack B/session", "%.0f", lower, stats.Median, func(r result.Result) float64 { return r.StackPerSession }},
		{"RSS B/session", "%.0f", lower, stats.Median, func(r result.Result) float64 { return r.RSSPerSession }},
		{"goroutines/session", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.GoroutinesPerSession }},
		{"opened/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeRevoke: {
		{"stale accepts (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.StaleAccepts) }},
		{"stream close p99 ms", "%.1f", lower, stats.Median, closing(func(r result.Result) float64 { return r.CloseP99Ms })},
		{"stream close max ms (max)", "%.1f", lower, maxOf, closing(func(r result.Result) float64 { return r.CloseMaxMs })},
		{"streams unclosed (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.StreamsUnclosed) }},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
}

// closing wraps a stream-closing metric: it has no value (NaN) in a run
// where no stream closed.
func closing(get func(result.Result) float64) func(result.Result) float64 {
	return func(r result.Result) float64 {
		if r.StreamsClosed == 0 {
			return math.NaN()
		}
		return get(r)
	}
}

var modeOrder = []string{result.ModeCalls, result.ModeModern, result.ModeChurn, result.ModeModernChurn, result.ModeIdle, result.ModeRevoke}

// group is one mode at one concurrency over one number of tokens.
type group struct {
	mode     string
	sessions int
	tokens   int // one per session unless fewer
}

// groupOf is r's group. A result without Tokens (older result files, and
// modes other than calls and modern) has one token per session.
func groupOf(r result.Result) group {
	g := group{mode: r.Mode, sessions: r.Sessions, tokens: r.Tokens}
	if g.tokens == 0 {
		g.tokens = g.sessions
	}
	return g
}

// label is the group's part of a row label: "calls n=64", and
// "calls n=64 tokens=1" where the sessions share tokens.
func (g group) label() string {
	if g.tokens != g.sessions {
		return fmt.Sprintf("%s n=%d tokens=%d", g.mode, g.sessions, g.tokens)
	}
	return fmt.Sprintf("%s n=%d", g.mode, g.sessions)
}

// row is one line of the table: a metric's aggregate per server (absent
// where a server has no result), the runtime's range over rounds, and the
// runtime's ratios to the others.
type row struct {
	label      string
	values     map[string]float64
	rtLo, rtHi float64 // the runtime's smallest and largest value
	rtHasRange bool
	m          metric
}

type table struct {
	impls []string // columns
	rows  []row
}

// buildTable groups results by mode and concurrency and folds every
// metric over rounds.
func buildTable(rs []result.Result) table {
	byGroup := map[group]map[string][]result.Result{}
	for _, r := range rs {
		g := groupOf(r)
		if byGroup[g] == nil {
			byGroup[g] = map[string][]result.Result{}
		}
		byGroup[g][r.Impl] = append(byGroup[g][r.Impl], r)
	}
	groups := make([]group, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b group) int {
		return cmp.Or(cmp.Compare(slices.Index(modeOrder, a.mode), slices.Index(modeOrder, b.mode)),
			cmp.Compare(a.sessions, b.sessions), cmp.Compare(b.tokens, a.tokens))
	})
	t := table{impls: append([]string{runtimeImpl}, others...)}
	for _, g := range groups {
		for _, m := range metrics[g.mode] {
			t.rows = append(t.rows, foldRow(g, m, byGroup[g]))
		}
	}
	return t
}

func foldRow(g group, m metric, byImpl map[string][]result.Result) row {
	r := row{label: g.label() + " " + m.name, values: map[string]float64{}, m: m}
	for impl, rs := range byImpl {
		var v []float64
		for _, res := range rs {
			if x := m.get(res); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		if len(v) == 0 {
			continue
		}
		r.values[impl] = m.agg(v)
		if impl == runtimeImpl && len(v) > 1 {
			r.rtLo, r.rtHi, r.rtHasRange = slices.Min(v), slices.Max(v), true
		}
	}
	return r
}

// value is the row's value for impl, and whether there is one.
func (r row) value(impl string) (float64, bool) {
	v, ok := r.values[impl]
	return v, ok && !math.IsNaN(v)
}

// ratio is runtime ÷ other, or false where it means nothing.
func (r row) ratio(other string) (float64, bool) {
	rt, ok1 := r.value(runtimeImpl)
	o, ok2 := r.value(other)
	if !ok1 || !ok2 || r.m.better == neither || o == 0 {
		return 0, false
	}
	return rt / o, true
}

// render writes t as a Markdown table.
func render(w io.Writer, t table) error {
	var b strings.Builder
	b.WriteString("| metric | ")
	b.WriteString(strings.Join(t.impls, " | "))
	for _, o := range others {
		fmt.Fprintf(&b, " | rt/%s", o)
	}
	b.WriteString(" | better | runtime min–max |\n|---")
	b.WriteString(strings.Repeat("|---:", len(t.impls)+len(others)))
	b.WriteString("|---|---:|\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s", r.label)
		for _, impl := range t.impls {
			b.WriteString(" | ")
			if v, ok := r.value(impl); ok {
				fmt.Fprintf(&b, r.m.format, v)
			} else {
				b.WriteString("–")
			}
		}
		for _, o := range others {
			b.WriteString(" | ")
			if q, ok := r.ratio(o); ok {
				fmt.Fprintf(&b, "%.2f×", q)
			} else {
				b.WriteString("–")
			}
		}
		fmt.Fprintf(&b, " | %s | ", r.m.better)
		if r.rtHasRange {
			fmt.Fprintf(&b, r.m.format+"–"+r.m.format, r.rtLo, r.rtHi)
		}
		b.WriteString(" |\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func (b better) String() string {
	switch b {
	case higher:
		return "higher"
	case lower:
		return "lower"
	}
	return "must be 0"
}

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

// shippedImpl is the shipped binary with its default flags: besides its
// ratio to the runtime it gets one to each of the others.
const shippedImpl = "binary"

var others = []string{"gosdk", "mcpgo", "floor"}

// raisedImpl is the shipped binary with its session caps raised as the
// runtime's: the one the performance targets are of, so it gets a ratio
// to mcp-go and to the floor too.
const raisedImpl = "binary-raised"

// variantOrder is the column order of the runtime's variants: the same
// runtime in another configuration or form (servers.Names), each shown
// beside the runtime with its ratio to it. A variant not listed here
// comes after these, by name.
var variantOrder = []string{"runtime-audit", "runtime-events", "runtime-observed", "runtime-stalled", "binary", "binary-raised"}

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
		{"server CPU µs/call", "%.1f", lower, stats.Median, cpu},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeChurn: {
		{"sessions/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"cycle p99 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P99Ms }},
		{"server CPU µs/session", "%.1f", lower, stats.Median, cpu},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeModernChurn: {
		{"clients/s", "%.0f", higher, stats.Median, func(r result.Result) float64 { return r.Rate }},
		{"cycle p99 ms", "%.2f", lower, stats.Median, func(r result.Result) float64 { return r.P99Ms }},
		{"server CPU µs/client", "%.1f", lower, stats.Median, cpu},
		{"errors (max)", "%.0f", neither, maxOf, func(r result.Result) float64 { return float64(r.Errors) }},
	},
	result.ModeIdle: {
		{"live heap B/session", "%.0f", lower, stats.Median, func(r result.Result) float64 {
			if r.HeapUnmeasured {
				return math.NaN() // the shipped binary: no garbage collection on demand
			}
			return r.HeapPerSession
		}},
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

// cpu is the server's CPU time per operation; no value (NaN) in results
// without it (older files, a server that did not know it).
func cpu(r result.Result) float64 {
	if r.CPUPerOpUs == 0 {
		return math.NaN()
	}
	return r.CPUPerOpUs
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

// group is one mode at one concurrency over one number of tokens, on one
// tool where the tool's calls are what the mode measures.
type group struct {
	mode     string
	sessions int
	tokens   int    // one per session unless fewer
	tool     string // "" in modes that do not measure calls
}

// toolModes are the modes whose figures are of the tool's calls: a row
// of them compares servers on one tool. In the others (churn calls none;
// idle's calls are a probe, revoke's the traffic around a revocation)
// servers on different tools share a row.
var toolModes = []string{result.ModeCalls, result.ModeModern, result.ModeModernChurn}

// toolOf is the tool r called: echo unless it says (older result files
// say nothing).
func toolOf(r result.Result) string {
	if r.Tool == "" {
		return result.EchoTool
	}
	return r.Tool
}

// groupOf is r's group. A result without Tokens (older result files, and
// modes other than calls and modern) has one token per session.
func groupOf(r result.Result) group {
	g := group{mode: r.Mode, sessions: r.Sessions, tokens: r.Tokens}
	if g.tokens == 0 {
		g.tokens = g.sessions
	}
	if slices.Contains(toolModes, r.Mode) {
		g.tool = toolOf(r)
	}
	return g
}

// label is the group's part of a row label: "calls n=64", "calls n=64
// tokens=1" where the sessions share tokens, and the tool in brackets
// when it is not echo: "calls n=64 [runtime_capabilities]".
func (g group) label() string {
	l := fmt.Sprintf("%s n=%d", g.mode, g.sessions)
	if g.tokens != g.sessions {
		l += fmt.Sprintf(" tokens=%d", g.tokens)
	}
	if g.tool != "" && g.tool != result.EchoTool {
		l += " [" + g.tool + "]"
	}
	return l
}

// toolRank orders a group's tools: echo first, then by name.
func toolRank(a, b string) int {
	return cmp.Or(-cmp.Compare(boolInt(a == result.EchoTool), boolInt(b == result.EchoTool)), cmp.Compare(a, b))
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// cell is one server's figure in a row: its aggregate over rounds, and
// the smallest and largest round's value (the spread).
type cell struct {
	v, lo, hi float64
	n         int             // rounds with a value
	byRound   map[int]float64 // the value of each numbered round
}

// ratio is one server's figure over another's in a row: the median of the
// per-round ratios of the rounds both ran (the servers of one round ran
// minutes apart on the same machine), with their min–max; where no round
// pairs up, the ratio of the aggregates and no spread.
type ratio struct {
	v, lo, hi float64
	paired    int // rounds in the spread
}

// row is one line of the table: a metric's figure per server (absent
// where a server has no result) and the ratios of the table's columns.
type row struct {
	label string
	cells map[string]cell
	m     metric
}

type table struct {
	impls    []string // columns: the runtime, its variants, then the others
	variants []string // the variants present, in column order
	rows     []row
}

// buildTable groups results by mode and concurrency and folds every
// metric over rounds.
func buildTable(rs []result.Result) table {
	byGroup := map[group]map[string][]result.Result{}
	present := map[string]bool{}
	for _, r := range rs {
		g := groupOf(r)
		if byGroup[g] == nil {
			byGroup[g] = map[string][]result.Result{}
		}
		byGroup[g][r.Impl] = append(byGroup[g][r.Impl], r)
		present[r.Impl] = true
	}
	groups := make([]group, 0, len(byGroup))
	for g := range byGroup {
		groups = append(groups, g)
	}
	slices.SortFunc(groups, func(a, b group) int {
		return cmp.Or(cmp.Compare(slices.Index(modeOrder, a.mode), slices.Index(modeOrder, b.mode)),
			cmp.Compare(a.sessions, b.sessions), cmp.Compare(b.tokens, a.tokens), toolRank(a.tool, b.tool))
	})
	t := table{variants: variants(present)}
	t.impls = append(append([]string{runtimeImpl}, t.variants...), others...)
	for _, g := range groups {
		for _, m := range metrics[g.mode] {
			t.rows = append(t.rows, foldRow(g, m, byGroup[g]))
		}
	}
	return t
}

// variants are the implementations present that are neither the runtime
// nor one of the others, in column order.
func variants(present map[string]bool) []string {
	var out, rest []string
	for _, v := range variantOrder {
		if present[v] {
			out = append(out, v)
		}
	}
	for impl := range present {
		if impl != runtimeImpl && !slices.Contains(others, impl) && !slices.Contains(variantOrder, impl) {
			rest = append(rest, impl)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

func foldRow(g group, m metric, byImpl map[string][]result.Result) row {
	r := row{label: g.label() + " " + m.name, cells: map[string]cell{}, m: m}
	for impl, rs := range byImpl {
		c := cell{byRound: map[int]float64{}}
		var v []float64
		for _, res := range rs {
			x := m.get(res)
			if math.IsNaN(x) {
				continue
			}
			v = append(v, x)
			if res.Round > 0 {
				c.byRound[res.Round] = x
			}
		}
		if len(v) == 0 {
			continue
		}
		c.v, c.lo, c.hi, c.n = m.agg(v), slices.Min(v), slices.Max(v), len(v)
		r.cells[impl] = c
	}
	return r
}

// value is the row's value for impl, and whether there is one.
func (r row) value(impl string) (float64, bool) {
	c, ok := r.cells[impl]
	return c.v, ok
}

// ratio is num ÷ den, or false where it means nothing.
func (r row) ratio(num, den string) (ratio, bool) {
	a, ok1 := r.cells[num]
	b, ok2 := r.cells[den]
	if !ok1 || !ok2 || r.m.better == neither || b.v == 0 {
		return ratio{}, false
	}
	var per []float64
	for round, x := range a.byRound {
		if y, ok := b.byRound[round]; ok && y != 0 {
			per = append(per, x/y)
		}
	}
	if len(per) == 0 {
		return ratio{v: a.v / b.v}, true
	}
	return ratio{v: stats.Median(per), lo: slices.Min(per), hi: slices.Max(per), paired: len(per)}, true
}

// ratios are the table's ratio columns: each variant over the runtime,
// then the runtime over each of the others, then, when the shipped binary
// ran, it over each of the others, and the raised binary over mcp-go and
// the floor.
func (t table) ratios() [][2]string {
	var out [][2]string
	for _, v := range t.variants {
		out = append(out, [2]string{v, runtimeImpl})
	}
	for _, o := range others {
		out = append(out, [2]string{runtimeImpl, o})
	}
	if slices.Contains(t.variants, shippedImpl) {
		for _, o := range others {
			out = append(out, [2]string{shippedImpl, o})
		}
	}
	if slices.Contains(t.variants, raisedImpl) {
		out = append(out, [2]string{raisedImpl, "mcpgo"}, [2]string{raisedImpl, "floor"})
	}
	return out
}

// render writes t as a Markdown table: each figure with its min–max over
// rounds, each ratio with the min–max of its per-round ratios.
func render(w io.Writer, t table) error {
	var b strings.Builder
	b.WriteString("| metric | ")
	b.WriteString(strings.Join(t.impls, " | "))
	for _, q := range t.ratios() {
		fmt.Fprintf(&b, " | %s/%s", short(q[0]), short(q[1]))
	}
	b.WriteString(" | better |\n|---")
	b.WriteString(strings.Repeat("|---:", len(t.impls)+len(t.ratios())))
	b.WriteString("|---|\n")
	for _, r := range t.rows {
		fmt.Fprintf(&b, "| %s", r.label)
		for _, impl := range t.impls {
			b.WriteString(" | ")
			c, ok := r.cells[impl]
			if !ok {
				b.WriteString("–")
				continue
			}
			fmt.Fprintf(&b, r.m.format, c.v)
			if c.n > 1 && r.m.better != neither {
				fmt.Fprintf(&b, " ("+r.m.format+"–"+r.m.format+")", c.lo, c.hi)
			}
		}
		for _, q := range t.ratios() {
			b.WriteString(" | ")
			x, ok := r.ratio(q[0], q[1])
			if !ok {
				b.WriteString("–")
				continue
			}
			fmt.Fprintf(&b, "%.2f×", x.v)
			if x.paired > 1 {
				fmt.Fprintf(&b, " (%.2f–%.2f)", x.lo, x.hi)
			}
		}
		fmt.Fprintf(&b, " | %s |\n", r.m.better)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// short names the runtime "rt" in a ratio's heading.
func short(impl string) string {
	if impl == runtimeImpl {
		return "rt"
	}
	return impl
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

// toolNote says which tool the rows of rs call: the calls, modern and
// modern-churn rows are one tool each (named when not echo); in the idle
// and revoke rows each server called its own, named where not echo.
func toolNote(rs []result.Result) string {
	var tools []string
	shared := map[string][]string{} // tool → servers, in idle and revoke
	for _, r := range rs {
		t := toolOf(r)
		if slices.Contains(toolModes, r.Mode) {
			if !slices.Contains(tools, t) {
				tools = append(tools, t)
			}
			continue
		}
		if (r.Mode == result.ModeIdle || r.Mode == result.ModeRevoke) && t != result.EchoTool && !slices.Contains(shared[t], r.Impl) {
			shared[t] = append(shared[t], r.Impl)
		}
	}
	slices.SortFunc(tools, toolRank)
	var b strings.Builder
	b.WriteString(`Tools: a calls, modern or modern-churn row without a tool in brackets calls echo {"text": …} and checks the text`)
	if len(tools) > 1 || (len(tools) == 1 && tools[0] != result.EchoTool) {
		var named []string
		for _, t := range tools {
			if t != result.EchoTool {
				named = append(named, t)
			}
		}
		fmt.Fprintf(&b, "; a row marked [%s] calls it with {} on every server with a figure in it, and checks only that the result is complete, not an error", strings.Join(named, "], ["))
		if slices.Contains(named, "runtime_capabilities") {
			b.WriteString(" (runtime_capabilities: the runtime's built-in, which then serves its built-ins only as the shipped binary does; the peers' and the floor's a stand-in of the same result)")
		}
	}
	b.WriteString(".")
	names := make([]string, 0, len(shared))
	for t := range shared {
		names = append(names, t)
	}
	slices.Sort(names)
	for _, t := range names {
		impls := shared[t]
		slices.Sort(impls)
		fmt.Fprintf(&b, " In the idle and revoke rows %s called %s, the others echo: there the calls are a probe or the traffic around a revocation, not what is measured.", strings.Join(impls, " and "), t)
	}
	return b.String()
}

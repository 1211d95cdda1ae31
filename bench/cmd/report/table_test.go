package main

import (
	"strings"
	"testing"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

func TestBuildTableMediansAndRatios(t *testing.T) {
	rs := []result.Result{
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Rate: 100, Round: 1},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Rate: 300, Round: 2},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Rate: 200, Round: 3, Errors: 4},
		{Impl: "mcpgo", Mode: result.ModeCalls, Sessions: 16, Rate: 100},
		{Impl: "runtime", Mode: result.ModeChurn, Sessions: 8, Rate: 50},
	}
	tb := buildTable(rs)
	find := func(label string) row {
		for _, r := range tb.rows {
			if r.label == label {
				return r
			}
		}
		t.Fatalf("no row %q", label)
		return row{}
	}

	rate := find("calls n=16 calls/s")
	if v, _ := rate.value("runtime"); v != 200 {
		t.Errorf("runtime median = %v, want 200", v)
	}
	if q, ok := rate.ratio("runtime", "mcpgo"); !ok || q.v != 2 || q.paired != 0 {
		t.Errorf("rt/mcpgo = %+v, %v; want 2 from the medians (no round pairs up)", q, ok)
	}
	if _, ok := rate.ratio("runtime", "gosdk"); ok {
		t.Error("a ratio to a server without results")
	}
	errs := find("calls n=16 errors (max)")
	if v, _ := errs.value("runtime"); v != 4 {
		t.Errorf("errors = %v, want the maximum 4", v)
	}
	if _, ok := errs.ratio("runtime", "mcpgo"); ok {
		t.Error("a ratio of error counts")
	}
	if tb.rows[0].label != "calls n=16 calls/s" || !strings.HasPrefix(tb.rows[len(tb.rows)-1].label, "churn") {
		t.Errorf("rows not in mode order: first %q, last %q", tb.rows[0].label, tb.rows[len(tb.rows)-1].label)
	}
}

func TestRender(t *testing.T) {
	tb := buildTable([]result.Result{
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 1, Rate: 3000, P99Ms: 1},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 1, Rate: 2000, P99Ms: 1},
		{Impl: "floor", Mode: result.ModeCalls, Sessions: 1, Rate: 6000, P99Ms: 0.5},
	})
	var b strings.Builder
	if err := render(&b, tb); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| metric | runtime | gosdk | mcpgo | floor | rt/gosdk | rt/mcpgo | rt/floor | better |",
		"| calls n=1 calls/s | 2500 (2000–3000) | – | – | 6000 | – | – | 0.42× | higher |",
		"| calls n=1 p99 ms | 1.00 (1.00–1.00) | – | – | 0.50 | – | – | 2.00× | lower |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestStreamCloseWithoutClosedStreamsHasNoValue(t *testing.T) {
	tb := buildTable([]result.Result{
		{Impl: "runtime", Mode: result.ModeRevoke, Sessions: 4, StreamsClosed: 4, CloseP99Ms: 12},
		{Impl: "gosdk", Mode: result.ModeRevoke, Sessions: 4, StreamsUnclosed: 4},
	})
	for _, r := range tb.rows {
		if r.label != "revoke n=4 stream close p99 ms" {
			continue
		}
		if v, ok := r.value("runtime"); !ok || v != 12 {
			t.Errorf("runtime = %v, %v; want 12", v, ok)
		}
		if v, ok := r.value("gosdk"); ok {
			t.Errorf("gosdk = %v: a closing time without a closed stream", v)
		}
		return
	}
	t.Fatal("no stream close row")
}

// TestTokensAndEras: sessions sharing tokens are a row group of their own,
// after the one-token-per-session group of the same concurrency; a result
// without Tokens (an older file) joins the one-per-session group; each
// era's churn has its rows, the 2025 one first.
func TestTokensAndEras(t *testing.T) {
	tb := buildTable([]result.Result{
		{Impl: "runtime", Mode: result.ModeModernChurn, Sessions: 16, Rate: 700},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 64, Tokens: 1, Rate: 100},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 64, Tokens: 64, Rate: 300},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 64, Rate: 500},
		{Impl: "mcpgo", Mode: result.ModeCalls, Sessions: 64, Tokens: 1, Rate: 50},
		{Impl: "runtime", Mode: result.ModeChurn, Sessions: 16, Rate: 900},
	})
	var labels []string
	values := map[string]float64{}
	for _, r := range tb.rows {
		if strings.HasSuffix(r.label, "/s") {
			labels = append(labels, r.label)
			values[r.label], _ = r.value("runtime")
		}
	}
	want := []string{"calls n=64 calls/s", "calls n=64 tokens=1 calls/s", "churn n=16 sessions/s", "modern-churn n=16 clients/s"}
	if strings.Join(labels, "; ") != strings.Join(want, "; ") {
		t.Fatalf("rate rows %q, want %q", labels, want)
	}
	if values["calls n=64 calls/s"] != 400 || values["calls n=64 tokens=1 calls/s"] != 100 {
		t.Errorf("runtime rates %v: want the median 400 of tokens=64 and unset, 100 for tokens=1", values)
	}
	for _, r := range tb.rows {
		if r.label == "calls n=64 tokens=1 calls/s" {
			if q, ok := r.ratio("runtime", "mcpgo"); !ok || q.v != 2 {
				t.Errorf("rt/mcpgo at tokens=1 = %v, %v; want 2", q, ok)
			}
		}
	}
}

// TestVariantsAndSpreads: a variant of the runtime gets a column after it
// and a ratio to it; ratios pair rounds, so each carries the spread of the
// per-round ratios, and every figure the spread of its rounds.
func TestVariantsAndSpreads(t *testing.T) {
	var rs []result.Result
	for round, rates := range [][3]float64{{100, 90, 200}, {120, 96, 200}, {150, 150, 300}} {
		rs = append(rs,
			result.Result{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Round: round + 1, Rate: rates[0]},
			result.Result{Impl: "runtime-observed", Mode: result.ModeCalls, Sessions: 16, Round: round + 1, Rate: rates[1]},
			result.Result{Impl: "floor", Mode: result.ModeCalls, Sessions: 16, Round: round + 1, Rate: rates[2]})
	}
	tb := buildTable(rs)
	if got := strings.Join(tb.impls, " "); got != "runtime runtime-observed gosdk mcpgo floor" {
		t.Fatalf("columns %q", got)
	}
	r := tb.rows[0]
	obs, ok := r.ratio("runtime-observed", "runtime")
	if !ok || obs.paired != 3 || obs.lo != 0.8 || obs.hi != 1 || obs.v != 0.9 {
		t.Errorf("observed/rt = %+v, %v; want 0.9 (0.8–1) over 3 rounds", obs, ok)
	}
	fl, ok := r.ratio("runtime", "floor")
	if !ok || fl.v != 0.5 || fl.lo != 0.5 || fl.hi != 0.6 {
		t.Errorf("rt/floor = %+v, %v; want 0.5 (0.5–0.6)", fl, ok)
	}
	var b strings.Builder
	if err := render(&b, tb); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| metric | runtime | runtime-observed | gosdk | mcpgo | floor | runtime-observed/rt | rt/gosdk | rt/mcpgo | rt/floor | better |",
		"| calls n=16 calls/s | 120 (100–150) | 96 (90–150) | – | – | 200 (200–300) | 0.90× (0.80–1.00) | – | – | 0.50× (0.50–0.60) | higher |",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}

// TestToolRows: in the modes that measure calls a row is one tool, the
// echo row first, so the shipped binary (on runtime_capabilities) is
// compared with the runtime and the floor on the same tool only, and its
// ratios to the others get columns; in idle and revoke the servers share
// a row whatever they called, and the binary's live heap, which it cannot
// collect on demand, has no value while its RSS has.
func TestToolRows(t *testing.T) {
	const caps = "runtime_capabilities"
	tb := buildTable([]result.Result{
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Rate: 1000},
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 800, CPUPerOpUs: 100},
		{Impl: "binary", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 600, CPUPerOpUs: 120},
		{Impl: "floor", Mode: result.ModeCalls, Sessions: 16, Tool: "echo", Rate: 2000},
		{Impl: "floor", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 1200},
		{Impl: "runtime", Mode: result.ModeIdle, Sessions: 100, HeapPerSession: 1500, RSSPerSession: 2000},
		{Impl: "binary", Mode: result.ModeIdle, Sessions: 100, Tool: caps, HeapUnmeasured: true, HeapPerSession: 9, RSSPerSession: 3000},
	})
	rows := map[string]row{}
	var labels []string
	for _, r := range tb.rows {
		rows[r.label] = r
		if strings.HasSuffix(r.label, "calls/s") {
			labels = append(labels, r.label)
		}
	}
	if want := []string{"calls n=16 calls/s", "calls n=16 [runtime_capabilities] calls/s"}; strings.Join(labels, "; ") != strings.Join(want, "; ") {
		t.Fatalf("rate rows %q, want %q", labels, want)
	}
	echo, capsRow := rows["calls n=16 calls/s"], rows["calls n=16 [runtime_capabilities] calls/s"]
	if v, ok := echo.value("floor"); !ok || v != 2000 {
		t.Errorf("floor on echo = %v, %v; want 2000 (a result naming echo joins the unnamed)", v, ok)
	}
	if _, ok := echo.value("binary"); ok {
		t.Error("the binary has a figure in the echo row")
	}
	if q, ok := capsRow.ratio("binary", "runtime"); !ok || q.v != 0.75 {
		t.Errorf("binary/rt on runtime_capabilities = %+v, %v; want 0.75", q, ok)
	}
	if q, ok := capsRow.ratio("binary", "floor"); !ok || q.v != 0.5 {
		t.Errorf("binary/floor on runtime_capabilities = %+v, %v; want 0.5", q, ok)
	}
	if q, ok := rows["calls n=16 [runtime_capabilities] server CPU µs/call"].ratio("binary", "runtime"); !ok || q.v != 1.2 {
		t.Errorf("binary/rt CPU per call = %+v, %v; want 1.2", q, ok)
	}
	if v, ok := rows["calls n=16 server CPU µs/call"].value("floor"); ok {
		t.Errorf("floor CPU per call = %v: a result without one", v)
	}
	heap, rss := rows["idle n=100 live heap B/session"], rows["idle n=100 RSS B/session"]
	if v, ok := heap.value("binary"); ok {
		t.Errorf("binary live heap = %v: a heap it could not collect", v)
	}
	if v, ok := heap.value("runtime"); !ok || v != 1500 {
		t.Errorf("runtime live heap = %v, %v; want 1500", v, ok)
	}
	if q, ok := rss.ratio("binary", "runtime"); !ok || q.v != 1.5 {
		t.Errorf("binary/rt RSS = %+v, %v; want 1.5 in the shared idle row", q, ok)
	}
	var b strings.Builder
	if err := render(&b, tb); err != nil {
		t.Fatal(err)
	}
	if want := "| metric | runtime | binary | gosdk | mcpgo | floor | binary/rt | rt/gosdk | rt/mcpgo | rt/floor | binary/gosdk | binary/mcpgo | binary/floor | better |"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}

// TestRaisedBinaryRatios: the binary with its caps raised, which the
// performance targets are of, gets its ratio to mcp-go and to the floor
// beside its ratio to the runtime.
func TestRaisedBinaryRatios(t *testing.T) {
	const caps = "runtime_capabilities"
	tb := buildTable([]result.Result{
		{Impl: "runtime", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 800},
		{Impl: "binary-raised", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 900},
		{Impl: "mcpgo", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 600},
		{Impl: "floor", Mode: result.ModeCalls, Sessions: 16, Tool: caps, Rate: 1000},
	})
	var r row
	for _, x := range tb.rows {
		if x.label == "calls n=16 [runtime_capabilities] calls/s" {
			r = x
		}
	}
	for _, tc := range []struct {
		over string
		want float64
	}{{"runtime", 1.125}, {"mcpgo", 1.5}, {"floor", 0.9}} {
		if q, ok := r.ratio("binary-raised", tc.over); !ok || q.v != tc.want {
			t.Errorf("binary-raised/%s = %+v, %v; want %v", tc.over, q, ok, tc.want)
		}
	}
	var b strings.Builder
	if err := render(&b, tb); err != nil {
		t.Fatal(err)
	}
	if want := "| binary-raised/rt | rt/gosdk | rt/mcpgo | rt/floor | binary-raised/mcpgo | binary-raised/floor | better |"; !strings.Contains(b.String(), want) {
		t.Errorf("table lacks %q:\n%s", want, b.String())
	}
}

func TestToolNote(t *testing.T) {
	for _, tc := range []struct {
		name     string
		rs       []result.Result
		has, not []string
	}{
		{"echo only", []result.Result{{Impl: "runtime", Mode: result.ModeCalls}, {Impl: "runtime", Mode: result.ModeIdle}},
			[]string{`calls echo {"text": …}`}, []string{"[", "idle and revoke"}},
		{"with the binary", []result.Result{
			{Impl: "runtime", Mode: result.ModeCalls},
			{Impl: "binary", Mode: result.ModeCalls, Tool: "runtime_capabilities"},
			{Impl: "binary-raised", Mode: result.ModeRevoke, Tool: "runtime_capabilities"},
			{Impl: "binary", Mode: result.ModeIdle, Tool: "runtime_capabilities"},
			{Impl: "runtime", Mode: result.ModeRevoke},
		}, []string{"a row marked [runtime_capabilities] calls it with {}", "stand-in", "In the idle and revoke rows binary and binary-raised called runtime_capabilities"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			note := toolNote(tc.rs)
			for _, s := range tc.has {
				if !strings.Contains(note, s) {
					t.Errorf("note lacks %q: %s", s, note)
				}
			}
			for _, s := range tc.not {
				if strings.Contains(note, s) {
					t.Errorf("note has %q: %s", s, note)
				}
			}
		})
	}
}

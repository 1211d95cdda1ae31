// Package result is the machine-readable record of one load run: the JSON
// line cmd/load prints and cmd/report reads.
package result

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// EchoTool is the tool every server of the bench but the shipped binary
// serves: {"text": …} in, that text out.
const EchoTool = "echo"

// Modes of cmd/load.
const (
	ModeCalls  = "calls"
	ModeModern = "modern" // calls, each a stateless 2026-07-28 request
	ModeChurn  = "churn"
	// ModeModernChurn is churn for the 2026-07-28 era: a fresh connection,
	// server/discover, one tools/call, the connection closed.
	ModeModernChurn = "modern-churn"
	ModeIdle        = "idle"
	ModeRevoke      = "revoke"
)

// Result is one run of one mode against one server. Fields that do not
// apply to the mode are zero and omitted.
type Result struct {
	Impl  string `json:"impl"`
	Mode  string `json:"mode"`
	Round int    `json:"round,omitempty"`
	// Tool is the tool the run's tools/call called: "echo" (with its
	// text, checked), or another called with {} whose result is only
	// checked to be complete (the shipped binary has no echo). Empty in
	// results written before the field: echo.
	Tool string `json:"tool,omitempty"`
	// Sessions is the concurrency: sessions (calls, idle), loops (churn) or
	// tokens (revoke).
	Sessions int `json:"sessions"`
	// Tokens is how many distinct bearer tokens the sessions of calls and
	// modern used (the runtime: one namespace each); session i uses token
	// i mod Tokens. Zero in other modes.
	Tokens   int     `json:"tokens,omitempty"`
	Seconds  float64 `json:"seconds,omitempty"` // measured window
	Ops      int64   `json:"ops"`               // calls or sessions completed
	Errors   int64   `json:"errors"`
	FirstErr string  `json:"first_error,omitempty"`

	// Rate is calls/s (calls) or sessions/s (churn, idle opening).
	Rate   float64 `json:"rate,omitempty"`
	P50Ms  float64 `json:"p50_ms,omitempty"`
	P99Ms  float64 `json:"p99_ms,omitempty"`
	P999Ms float64 `json:"p999_ms,omitempty"`
	// AllocsPerOp and AllocBytesPerOp are the server's heap allocations
	// per call (calls), counted over the measured window.
	AllocsPerOp     float64 `json:"allocs_per_op,omitempty"`
	AllocBytesPerOp float64 `json:"alloc_bytes_per_op,omitempty"`
	// CPUPerOpUs is the server process's CPU time per operation (call,
	// session or client), in µs, over the measured window: less disturbed
	// by a busy machine than the rates.
	CPUPerOpUs float64 `json:"cpu_us_per_op,omitempty"`

	// Idle: live heap, goroutine stack and RSS growth per held session, in
	// bytes, and the server's goroutines per session.
	HeapPerSession float64 `json:"heap_per_session,omitempty"`
	// HeapUnmeasured: the server could not collect garbage before its
	// memory was read (the shipped binary, a child process), so its heap
	// holds garbage too and HeapPerSession is not given; RSS still is.
	HeapUnmeasured       bool    `json:"heap_unmeasured,omitempty"`
	StackPerSession      float64 `json:"stack_per_session,omitempty"`
	RSSPerSession        float64 `json:"rss_per_session,omitempty"`
	GoroutinesPerSession float64 `json:"goroutines_per_session,omitempty"`

	// Revoke.
	Revoked         int     `json:"revoked,omitempty"`
	StaleAccepts    int64   `json:"stale_accepts"`
	Rejected        int64   `json:"rejected,omitempty"`       // requests refused once their revoke started
	StreamsClosed   int     `json:"streams_closed,omitempty"` // by the server, after their revoke
	StreamsUnclosed int     `json:"streams_unclosed,omitempty"`
	CloseP99Ms      float64 `json:"close_p99_ms,omitempty"`
	CloseMaxMs      float64 `json:"close_max_ms,omitempty"`
}

// String is the human line of the result.
func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-7s %-12s n=%-6d", r.Impl, r.Mode, r.Sessions)
	if r.Tokens != 0 && r.Tokens != r.Sessions {
		fmt.Fprintf(&b, " tokens=%d", r.Tokens)
	}
	if r.Tool != "" && r.Tool != EchoTool {
		fmt.Fprintf(&b, " [%s]", r.Tool)
	}
	switch r.Mode {
	case ModeCalls, ModeModern:
		fmt.Fprintf(&b, " %9.0f calls/s  p50 %7.2f ms  p99 %8.2f ms  p999 %8.2f ms  %5.0f allocs/call %6.0f B/call %6.1f µs CPU/call",
			r.Rate, r.P50Ms, r.P99Ms, r.P999Ms, r.AllocsPerOp, r.AllocBytesPerOp, r.CPUPerOpUs)
	case ModeChurn:
		fmt.Fprintf(&b, " %9.0f sessions/s  p99 %8.2f ms  %6.1f µs CPU/session", r.Rate, r.P99Ms, r.CPUPerOpUs)
	case ModeModernChurn:
		fmt.Fprintf(&b, " %9.0f clients/s  p99 %8.2f ms  %6.1f µs CPU/client", r.Rate, r.P99Ms, r.CPUPerOpUs)
	case ModeIdle:
		if r.HeapUnmeasured {
			b.WriteString("      ? B heap/session (not collected)")
			fmt.Fprintf(&b, "  %6.0f B stack/session  %6.0f B RSS/session  %.2f goroutines/session  (opened at %.0f/s)",
				r.StackPerSession, r.RSSPerSession, r.GoroutinesPerSession, r.Rate)
			break
		}
		fmt.Fprintf(&b, " %6.0f B heap/session  %6.0f B stack/session  %6.0f B RSS/session  %.2f goroutines/session  (opened at %.0f/s)",
			r.HeapPerSession, r.StackPerSession, r.RSSPerSession, r.GoroutinesPerSession, r.Rate)
	case ModeRevoke:
		fmt.Fprintf(&b, " revoked %d  stale accepts %d  rejected %d  streams closed %d (p99 %.1f ms, max %.1f ms)  unclosed %d",
			r.Revoked, r.StaleAccepts, r.Rejected, r.StreamsClosed, r.CloseP99Ms, r.CloseMaxMs, r.StreamsUnclosed)
	}
	fmt.Fprintf(&b, "  errors %d", r.Errors)
	if r.FirstErr != "" {
		fmt.Fprintf(&b, " (first: %s)", r.FirstErr)
	}
	return b.String()
}

// ServerStats is what a server's /bench/stats returns: its process's
// memory after two garbage collections, or, where the server cannot
// collect (Collected false: the shipped binary, read from its /metrics),
// as it is.
type ServerStats struct {
	Collected    bool   `json:"collected"`  // read after forced garbage collections
	HeapAlloc    uint64 `json:"heap_alloc"` // live heap, bytes
	HeapInuse    uint64 `json:"heap_inuse"`
	StackInuse   uint64 `json:"stack_inuse"` // goroutine stacks, bytes (not in the heap)
	NumGoroutine int    `json:"goroutines"`
	VmRSS        uint64 `json:"vm_rss"` // resident set size, bytes; 0 if unknown
}

// AllocCounts is what a server's /bench/allocs returns: its cumulative heap
// allocations, read without stopping the world, and its process's CPU
// time.
type AllocCounts struct {
	Objects uint64 `json:"objects"`
	Bytes   uint64 `json:"bytes"`
	// CPUNanos is the server process's user and system CPU time, from
	// /proc/<pid>/stat (10 ms ticks); 0 where unknown.
	CPUNanos uint64 `json:"cpu_ns,omitempty"`
}

// Read decodes the JSON lines of r: every line that starts with '{'.
// Other lines (human lines, blank lines) are skipped.
func Read(r io.Reader) ([]Result, error) {
	var out []Result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var res Result
		if err := json.Unmarshal(line, &res); err != nil {
			return out, fmt.Errorf("line %d: %w", n, err)
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

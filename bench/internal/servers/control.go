package servers

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/metrics"
	"strconv"

	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// maxTokensPerRequest bounds /bench/tokens?n=.
const maxTokensPerRequest = 1_000_000

// Tokens mints and revokes a server's bearer tokens (Server's methods).
type Tokens interface {
	IssueTokens(ctx context.Context, n int) ([]string, error)
	Revoke(ctx context.Context, token string) error
}

// Meter reads a server process's memory and cumulative allocations.
type Meter interface {
	Stats(ctx context.Context) (result.ServerStats, error)
	Allocs(ctx context.Context) (result.AllocCounts, error)
}

// Control returns the control endpoint of srv, which runs in this
// process, meant for its own loopback listener:
//
//	POST /bench/tokens?n=N    → {"tokens":[...]}: N fresh tokens
//	POST /bench/revoke?token=T → 204 once T is revoked; 404 if unknown
//	GET  /bench/stats         → result.ServerStats, after runtime.GC twice
//	GET  /bench/allocs        → result.AllocCounts, no GC
//	     /debug/pprof/...     → net/http/pprof
func Control(srv Server) http.Handler {
	mux := control(srv, self{})
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return mux
}

// ControlBinary is the control endpoint of the shipped binary: the same
// routes as Control's, translated to its admin API (tokens are client
// grants), /metrics (its stats are not collected first: Collected false)
// and /proc; no pprof (the adapter's own profile would say nothing of the
// binary).
func ControlBinary(b *BinaryServer) http.Handler { return control(b, b) }

// self is the Meter of this process.
type self struct{}

func (self) Stats(context.Context) (result.ServerStats, error)  { return ReadStats(), nil }
func (self) Allocs(context.Context) (result.AllocCounts, error) { return ReadAllocs(), nil }

func control(srv Tokens, meter Meter) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /bench/tokens", func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil || n < 1 || n > maxTokensPerRequest {
			http.Error(w, fmt.Sprintf("n must be 1..%d", maxTokensPerRequest), http.StatusBadRequest)
			return
		}
		toks, err := srv.IssueTokens(r.Context(), n)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, map[string][]string{"tokens": toks})
	})
	mux.HandleFunc("POST /bench/revoke", func(w http.ResponseWriter, r *http.Request) {
		tok := r.URL.Query().Get("token")
		switch err := srv.Revoke(r.Context(), tok); {
		case errors.Is(err, ErrUnknownToken):
			http.Error(w, err.Error(), http.StatusNotFound)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	mux.HandleFunc("GET /bench/stats", func(w http.ResponseWriter, r *http.Request) {
		st, err := meter.Stats(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /bench/allocs", func(w http.ResponseWriter, r *http.Request) {
		a, err := meter.Allocs(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		writeJSON(w, a)
	})
	return mux
}

// ReadStats collects garbage twice (the second pass frees what the first
// one's finalizers released) and reads the process's memory.
func ReadStats() result.ServerStats {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return result.ServerStats{
		Collected:    true,
		HeapAlloc:    m.HeapAlloc,
		HeapInuse:    m.HeapInuse,
		StackInuse:   m.StackInuse,
		NumGoroutine: runtime.NumGoroutine(),
		VmRSS:        vmRSS(),
	}
}

// allocMetrics are the runtime/metrics samples ReadAllocs sums: small and
// large objects, tiny objects (counted apart), and bytes.
var allocMetrics = []string{
	"/gc/heap/allocs:objects",
	"/gc/heap/tiny/allocs:objects",
	"/gc/heap/allocs:bytes",
}

// ReadAllocs returns the process's cumulative heap allocations and its
// CPU time. Unlike ReadStats it neither collects nor stops the world, so
// it can be read while load runs.
func ReadAllocs() result.AllocCounts {
	samples := make([]metrics.Sample, len(allocMetrics))
	for i, name := range allocMetrics {
		samples[i].Name = name
	}
	metrics.Read(samples)
	value := func(i int) uint64 {
		if samples[i].Value.Kind() != metrics.KindUint64 {
			return 0 // not supported by this Go release
		}
		return samples[i].Value.Uint64()
	}
	cpu, _ := processCPU("self")
	return result.AllocCounts{Objects: value(0) + value(1), Bytes: value(2), CPUNanos: cpu}
}

// userHZ is the unit of /proc/<pid>/stat's CPU times: USER_HZ, 100 on
// every Linux architecture Go runs on.
const userHZ = 100

// processCPU reads the user and system CPU time of process pid ("self" or
// a number) from /proc/<pid>/stat, in nanoseconds. The same source for
// the servers in this process and the shipped binary, so that both have
// the same 10 ms resolution.
func processCPU(pid string) (uint64, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := parseProcStatCPU(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return ticks * (1e9 / userHZ), nil
}

// parseProcStatCPU returns utime + stime (fields 14 and 15, in clock
// ticks) of a /proc/<pid>/stat line. The command name (field 2) is in
// parentheses and may hold spaces and parentheses itself: the fields are
// counted from the last ')'.
func parseProcStatCPU(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := bytes.Fields(stat[i+1:])
	if len(f) < 13 { // state (field 3) … stime (field 15)
		return 0, errors.New("too few fields")
	}
	utime, err1 := strconv.ParseUint(string(f[11]), 10, 64)
	stime, err2 := strconv.ParseUint(string(f[12]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, errors.New("utime or stime is not a number")
	}
	return utime + stime, nil
}

// vmRSS reads VmRSS from /proc/self/status, in bytes; 0 if unavailable.
func vmRSS() uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return parseVmRSS(b)
}

// parseVmRSS finds the "VmRSS:   1234 kB" line of a /proc status file.
func parseVmRSS(status []byte) uint64 {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("VmRSS:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v) // a write error means the client left
}

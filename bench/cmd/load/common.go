package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
	"github.com/agenthost/mcpruntime/bench/internal/stats"
)

// openConcurrency is how many sessions calls and revoke open at once.
const openConcurrency = 64

// control is the client of a server's control endpoint.
type control struct {
	http *http.Client
	base string // http://host:port
}

func newControl(addr string) control {
	return control{http: mcpclient.NewHTTPClient(4), base: "http://" + addr}
}

// tokens asks for n fresh tokens.
func (c control) tokens(ctx context.Context, n int) ([]string, error) {
	var out struct {
		Tokens []string `json:"tokens"`
	}
	if err := c.do(ctx, http.MethodPost, "/bench/tokens?n="+strconv.Itoa(n), &out); err != nil {
		return nil, err
	}
	if len(out.Tokens) != n {
		return nil, fmt.Errorf("asked for %d tokens, got %d", n, len(out.Tokens))
	}
	return out.Tokens, nil
}

// revoke revokes tok; it returns once the server says it is revoked.
func (c control) revoke(ctx context.Context, tok string) error {
	return c.do(ctx, http.MethodPost, "/bench/revoke?token="+url.QueryEscape(tok), nil)
}

// stats reads the server's memory after GC.
func (c control) stats(ctx context.Context) (result.ServerStats, error) {
	var s result.ServerStats
	err := c.do(ctx, http.MethodGet, "/bench/stats", &s)
	return s, err
}

func (c control) do(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("control %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
		return fmt.Errorf("control %s: HTTP %d: %s", path, resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("control %s: %w", path, err)
	}
	return nil
}

// allocs reads the server's cumulative allocations.
func (c control) allocs(ctx context.Context) (result.AllocCounts, error) {
	var a result.AllocCounts
	err := c.do(ctx, http.MethodGet, "/bench/allocs", &a)
	return a, err
}

// parallel runs fn(i) for i in [0, n) on at most conc goroutines and
// returns when all are done.
func parallel(n, conc int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, conc) {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// openSessions initializes one session per token (tokens[i%len(tokens)]
// for i < n), conc at a time. A failed open leaves a nil session; the
// errors are counted.
func openSessions(ctx context.Context, c *mcpclient.Client, tokens []string, n, conc int, timeout time.Duration, errs *errorCount) []*mcpclient.Session {
	out := make([]*mcpclient.Session, n)
	parallel(n, conc, func(i int) {
		if ctx.Err() != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		s, err := c.Initialize(rctx, tokens[i%len(tokens)])
		if err != nil {
			errs.add(err)
			return
		}
		out[i] = s
	})
	return out
}

// errorCount counts errors and keeps the first. Safe for concurrent use.
type errorCount struct {
	mu    sync.Mutex
	n     int64
	first error
}

func (e *errorCount) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.n == 0 {
		e.first = err
	}
	e.n++
}

// fill copies the count into r.
func (e *errorCount) fill(r *result.Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	r.Errors = e.n
	if e.first != nil {
		r.FirstErr = e.first.Error()
	}
}

// window is the measured part of a run: [start, end).
type window struct{ start, end time.Time }

func newWindow(warmup, d time.Duration) window {
	start := time.Now().Add(warmup)
	return window{start: start, end: start.Add(d)}
}

func (w window) contains(t time.Time) bool { return !t.Before(w.start) && t.Before(w.end) }

// recorder collects the latencies of operations completed inside a window,
// one per worker, merged at the end.
type recorder struct {
	w   window
	lat []time.Duration
}

// observe records an operation that started at begin and just completed.
func (r *recorder) observe(begin time.Time) {
	if now := time.Now(); r.w.contains(now) {
		r.lat = append(r.lat, now.Sub(begin))
	}
}

// summarize fills rate and percentiles from the workers' recorders.
func summarize(w window, recs []*recorder, r *result.Result) {
	var all []time.Duration
	for _, rec := range recs {
		all = append(all, rec.lat...)
	}
	secs := w.end.Sub(w.start).Seconds()
	l := stats.Summarize(all)
	r.Seconds = secs
	r.Ops = int64(len(all))
	r.Rate = float64(len(all)) / secs
	r.P50Ms, r.P99Ms, r.P999Ms = ms(l.P50), ms(l.P99), ms(l.P999)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// sleepCtx sleeps for d or until ctx is done.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

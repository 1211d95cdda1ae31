package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// runCalls opens -sessions sessions over -tokens tokens and loops
// tools/call on each.
func runCalls(ctx context.Context, cfg config) (result.Result, error) {
	res := result.Result{Sessions: cfg.sessions, Tokens: cfg.tokens}
	tokens, err := newControl(cfg.control).tokens(ctx, cfg.tokens)
	if err != nil {
		return res, err
	}
	c := newClient(cfg, cfg.sessions)
	var errs errorCount
	var sessions []*mcpclient.Session
	if cfg.mode == result.ModeModern {
		for i := range cfg.sessions {
			sessions = append(sessions, c.Stateless(tokens[i%len(tokens)]))
		}
	} else {
		sessions = openSessions(ctx, c, tokens, cfg.sessions, openConcurrency, cfg.timeout, &errs)
	}
	w := newWindow(cfg.warmup, cfg.duration)
	recs := make([]*recorder, len(sessions))
	var wg sync.WaitGroup
	var allocs allocDelta
	wg.Go(func() { allocs = watchAllocs(ctx, newControl(cfg.control), w) })
	for i, s := range sessions {
		recs[i] = &recorder{w: w}
		if s == nil {
			continue
		}
		wg.Go(func() { callLoop(ctx, cfg, s, fmt.Sprintf("hello %d", i), recs[i], &errs) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("calls: %w", err)
	}
	summarize(w, recs, &res)
	if allocs.err != nil {
		errs.add(fmt.Errorf("server allocations: %w", allocs.err))
	} else if res.Ops > 0 {
		res.AllocsPerOp = float64(allocs.objects) / float64(res.Ops)
		res.AllocBytesPerOp = float64(allocs.bytes) / float64(res.Ops)
		res.CPUPerOpUs = allocs.cpuPerOpUs(res.Ops)
	}
	errs.fill(&res)
	return res, nil
}

// allocDelta is what the server allocated, and the CPU time it used,
// during a window.
type allocDelta struct {
	objects, bytes uint64
	cpuNanos       uint64 // 0 where the server does not know its CPU time
	err            error
}

// cpuPerOpUs is the CPU time per operation in µs; 0 without a CPU time.
func (d allocDelta) cpuPerOpUs(ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d.cpuNanos) / 1e3 / float64(ops)
}

// watchAllocs reads the server's allocation counters and CPU time at the
// start and at the end of w.
func watchAllocs(ctx context.Context, ctl control, w window) allocDelta {
	sleepCtx(ctx, time.Until(w.start))
	before, err := ctl.allocs(ctx)
	if err != nil {
		return allocDelta{err: err}
	}
	sleepCtx(ctx, time.Until(w.end))
	after, err := ctl.allocs(ctx)
	if err != nil {
		return allocDelta{err: err}
	}
	d := allocDelta{objects: after.Objects - before.Objects, bytes: after.Bytes - before.Bytes}
	if before.CPUNanos > 0 && after.CPUNanos >= before.CPUNanos {
		d.cpuNanos = after.CPUNanos - before.CPUNanos
	}
	return d
}

// callLoop calls cfg's tool on s until the window ends.
func callLoop(ctx context.Context, cfg config, s *mcpclient.Session, text string, rec *recorder, errs *errorCount) {
	for ctx.Err() == nil && time.Now().Before(rec.w.end) {
		begin := time.Now()
		rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		err := cfg.call(rctx, s, text)
		cancel()
		if err != nil {
			errs.add(err)
			continue
		}
		rec.observe(begin)
	}
}

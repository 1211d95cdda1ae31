package main

import (
	"context"
	"fmt"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// idleProbes is how many held sessions are called after the measurement,
// to check that they are really alive.
const idleProbes = 16

// runIdle opens sessions, holds them, and reads the server's memory before
// and after. The first read is of a warm server (see warmUp), so that what
// does not grow with the sessions held is not counted as their cost.
func runIdle(ctx context.Context, cfg config) (result.Result, error) {
	res := result.Result{Sessions: cfg.sessions}
	ctl := newControl(cfg.control)
	tokens, err := ctl.tokens(ctx, cfg.tokens)
	if err != nil {
		return res, err
	}
	c := newClient(cfg, cfg.conns)
	var errs errorCount
	warmUp(ctx, cfg, c, tokens, &errs)
	before, err := ctl.stats(ctx)
	if err != nil {
		return res, err
	}
	start := time.Now()
	sessions := openSessions(ctx, c, tokens, cfg.sessions, cfg.conns, cfg.timeout, &errs)
	opened := countOpen(sessions)
	res.Seconds = time.Since(start).Seconds()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("idle: opened %d of %d: %w", opened, cfg.sessions, err)
	}
	after, err := ctl.stats(ctx)
	if err != nil {
		return res, err
	}
	probe(ctx, cfg, sessions, &errs)
	res.Ops = int64(opened)
	res.Rate = float64(opened) / res.Seconds
	if opened > 0 {
		n := float64(opened)
		if before.Collected && after.Collected {
			res.HeapPerSession = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
		} else {
			res.HeapUnmeasured = true // a heap with garbage in it says nothing per session
		}
		res.StackPerSession = (float64(after.StackInuse) - float64(before.StackInuse)) / n
		res.RSSPerSession = (float64(after.VmRSS) - float64(before.VmRSS)) / n
		res.GoroutinesPerSession = float64(after.NumGoroutine-before.NumGoroutine) / n
	}
	errs.fill(&res)
	return res, nil
}

// warmUp opens one session per connection the load will use, cfg.conns at
// once, and deletes them: the connections are open (each with its
// server-side buffers and goroutine) and every lazily made part of the
// server's initialize path exists before the baseline is read, as they do
// whether the server then holds 100 sessions or 100 000. Without it those
// ~0.75 MB of the runtime's were divided among the sessions held: ~75 B
// per session at 10 000, ~8 at 100 000.
func warmUp(ctx context.Context, cfg config, c *mcpclient.Client, tokens []string, errs *errorCount) {
	n := min(cfg.conns, cfg.sessions)
	for _, s := range openSessions(ctx, c, tokens, n, n, cfg.timeout, errs) {
		if s == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		if err := s.Delete(rctx); err != nil {
			errs.add(fmt.Errorf("warm-up session: %w", err))
		}
		cancel()
	}
}

func countOpen(sessions []*mcpclient.Session) int {
	n := 0
	for _, s := range sessions {
		if s != nil {
			n++
		}
	}
	return n
}

// probe calls cfg's tool on a few held sessions spread over the whole set.
func probe(ctx context.Context, cfg config, sessions []*mcpclient.Session, errs *errorCount) {
	step := max(len(sessions)/idleProbes, 1)
	for i := 0; i < len(sessions); i += step {
		if sessions[i] == nil {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		if err := cfg.call(rctx, sessions[i], "still there?"); err != nil {
			errs.add(fmt.Errorf("held session %d: %w", i, err))
		}
		cancel()
	}
}

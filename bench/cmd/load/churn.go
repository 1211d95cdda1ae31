package main

import (
	"context"
	"fmt"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// runChurn runs one initialize → initialized → DELETE loop per token.
func runChurn(ctx context.Context, cfg config) (result.Result, error) {
	c := newClient(cfg, cfg.sessions)
	return runLoops(ctx, cfg, "churn", func(_ int, tok string, rec *recorder, errs *errorCount) {
		churnLoop(ctx, cfg, c, tok, rec, errs)
	})
}

// runLoops runs loop once per token, -sessions tokens, on a goroutine each,
// and summarizes what their recorders saw inside the window, with the
// server's CPU time per cycle over it.
func runLoops(ctx context.Context, cfg config, name string, loop func(i int, tok string, rec *recorder, errs *errorCount)) (result.Result, error) {
	res := result.Result{Sessions: cfg.sessions}
	tokens, err := newControl(cfg.control).tokens(ctx, cfg.sessions)
	if err != nil {
		return res, err
	}
	var errs errorCount
	w := newWindow(cfg.warmup, cfg.duration)
	recs := make([]*recorder, len(tokens))
	var wg sync.WaitGroup
	var usage allocDelta
	wg.Go(func() { usage = watchAllocs(ctx, newControl(cfg.control), w) })
	for i, tok := range tokens {
		recs[i] = &recorder{w: w}
		wg.Go(func() { loop(i, tok, recs[i], &errs) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("%s: %w", name, err)
	}
	summarize(w, recs, &res)
	if usage.err != nil {
		errs.add(fmt.Errorf("server CPU time: %w", usage.err))
	} else {
		res.CPUPerOpUs = usage.cpuPerOpUs(res.Ops)
	}
	errs.fill(&res)
	return res, nil
}

// churnLoop opens and deletes sessions as tok until the window ends.
func churnLoop(ctx context.Context, cfg config, c *mcpclient.Client, tok string, rec *recorder, errs *errorCount) {
	for ctx.Err() == nil && time.Now().Before(rec.w.end) {
		begin := time.Now()
		if err := churnOnce(ctx, cfg, c, tok); err != nil {
			errs.add(err)
			continue
		}
		rec.observe(begin)
	}
}

func churnOnce(ctx context.Context, cfg config, c *mcpclient.Client, tok string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	s, err := c.Initialize(ctx, tok)
	if err != nil {
		return err
	}
	return s.Delete(ctx)
}

// runModernChurn runs one loop per token of what a new short-lived
// 2026-07-28 client does: a fresh connection, server/discover, one
// tools/call (its text checked), then the connection closed.
func runModernChurn(ctx context.Context, cfg config) (result.Result, error) {
	return runLoops(ctx, cfg, "modern churn", func(i int, tok string, rec *recorder, errs *errorCount) {
		// Each loop has a client of its own, so the connection it closes
		// is the one its cycle used, and no other loop's.
		c := newClient(cfg, 1)
		modernChurnLoop(ctx, cfg, c, tok, fmt.Sprintf("hello %d", i), rec, errs)
	})
}

// modernChurnLoop runs short-lived 2026-07-28 clients as tok until the
// window ends. The cycle's time includes closing its connection.
func modernChurnLoop(ctx context.Context, cfg config, c *mcpclient.Client, tok, text string, rec *recorder, errs *errorCount) {
	defer c.HTTP.CloseIdleConnections()
	for ctx.Err() == nil && time.Now().Before(rec.w.end) {
		begin := time.Now()
		err := modernChurnOnce(ctx, cfg, c, tok, text)
		c.HTTP.CloseIdleConnections() // the client leaves
		if err != nil {
			errs.add(err)
			continue
		}
		rec.observe(begin)
	}
}

// modernChurnOnce is one short-lived client. It fails unless the discover
// went over a new connection and the call over the same one: every
// server's cycle costs exactly one connection.
func modernChurnOnce(ctx context.Context, cfg config, c *mcpclient.Client, tok, text string) error {
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	var conns connCount
	ctx = httptrace.WithClientTrace(ctx, conns.trace())
	s := c.Stateless(tok)
	if err := s.Discover(ctx); err != nil {
		return err
	}
	if err := cfg.call(ctx, s, text); err != nil {
		return err
	}
	if fresh, reused := conns.fresh.Load(), conns.reused.Load(); fresh != 1 || reused != 1 {
		return fmt.Errorf("a short-lived client used %d new and %d reused connections, want 1 and 1", fresh, reused)
	}
	return nil
}

// connCount counts the connections a client's requests got.
type connCount struct{ fresh, reused atomic.Int32 }

func (cc *connCount) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if info.Reused {
			cc.reused.Add(1)
		} else {
			cc.fresh.Add(1)
		}
	}}
}

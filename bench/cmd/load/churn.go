package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// runChurn runs one initialize → initialized → DELETE loop per token.
func runChurn(ctx context.Context, cfg config) (result.Result, error) {
	res := result.Result{Sessions: cfg.sessions}
	tokens, err := newControl(cfg.control).tokens(ctx, cfg.sessions)
	if err != nil {
		return res, err
	}
	c := newClient(cfg, cfg.sessions)
	var errs errorCount
	w := newWindow(cfg.warmup, cfg.duration)
	recs := make([]*recorder, len(tokens))
	var wg sync.WaitGroup
	for i, tok := range tokens {
		recs[i] = &recorder{w: w}
		wg.Go(func() { churnLoop(ctx, cfg, c, tok, recs[i], &errs) })
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("churn: %w", err)
	}
	summarize(w, recs, &res)
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

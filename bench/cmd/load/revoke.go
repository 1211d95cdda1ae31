package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
	"github.com/agenthost/mcpruntime/bench/internal/stats"
)

// outcome is how one call of the revoke run ended.
type outcome int

const (
	succeeded outcome = iota // the call's result came back
	rejected                 // 401 or 404: the token or its session is gone
	failed                   // anything else
)

// call is one tools/call of the revoke run.
type call struct {
	sent, done time.Time // before the request was sent; when its answer was read
	outcome    outcome
	err        error // for rejected and failed
}

// tokenRun is one token of the revoke run: its session, its open GET
// stream, the calls made with it and when it was revoked.
type tokenRun struct {
	token   string
	session *mcpclient.Session
	stream  *mcpclient.Stream // nil if it could not be opened
	calls   []call            // written by the token's caller only

	mu                     sync.Mutex
	revokeStart, revokeEnd time.Time // around the control call
}

func (t *tokenRun) setRevoked(start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.revokeStart, t.revokeEnd = start, end
}

func (t *tokenRun) revoked() (start, end time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.revokeStart, t.revokeEnd
}

// runRevoke revokes tokens one by one while each has calls in flight and
// an open stream.
func runRevoke(ctx context.Context, cfg config) (result.Result, error) {
	res := result.Result{Sessions: cfg.sessions}
	ctl := newControl(cfg.control)
	tokens, err := ctl.tokens(ctx, cfg.sessions)
	if err != nil {
		return res, err
	}
	var errs errorCount
	runs, err := prepareRevoke(ctx, cfg, tokens, &errs)
	if err != nil {
		return res, err
	}
	var wg sync.WaitGroup
	for _, tr := range runs {
		wg.Go(func() { revokeCaller(ctx, cfg, tr) })
	}
	sleepCtx(ctx, cfg.warmup)
	last := revokeAll(ctx, cfg, ctl, runs, &errs)
	wg.Wait()
	waitStreams(ctx, runs, last.Add(cfg.streamWait))
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("revoke: %w", err)
	}
	res.Revoked = len(runs)
	tallyRevoke(runs, &res, &errs)
	errs.fill(&res)
	return res, nil
}

// prepareRevoke opens a session and its GET stream per token.
func prepareRevoke(ctx context.Context, cfg config, tokens []string, errs *errorCount) ([]*tokenRun, error) {
	c := newClient(cfg, 2*len(tokens)+4)
	sessions := openSessions(ctx, c, tokens, len(tokens), openConcurrency, cfg.timeout, errs)
	var runs []*tokenRun
	for i, s := range sessions {
		if s == nil {
			continue
		}
		tr := &tokenRun{token: tokens[i], session: s}
		st, err := s.OpenStream(ctx) // lives until the server closes it or the run ends
		if err != nil {
			errs.add(fmt.Errorf("open stream: %w", err))
		}
		tr.stream = st
		runs = append(runs, tr)
	}
	if len(runs) == 0 {
		return nil, errors.New("revoke: no session could be opened")
	}
	return runs, nil
}

// revokeCaller calls cfg's tool on tr's session until cfg.revokeTail after its
// revoke returned.
func revokeCaller(ctx context.Context, cfg config, tr *tokenRun) {
	for ctx.Err() == nil {
		if _, end := tr.revoked(); !end.IsZero() && time.Since(end) > cfg.revokeTail {
			return
		}
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		err := cfg.call(rctx, tr.session, "in flight")
		cancel()
		tr.calls = append(tr.calls, call{sent: sent, done: time.Now(), outcome: classify(err), err: err})
	}
}

func classify(err error) outcome {
	switch {
	case err == nil:
		return succeeded
	case mcpclient.IsStatus(err, http.StatusUnauthorized), mcpclient.IsStatus(err, http.StatusNotFound):
		return rejected
	}
	return failed
}

// revokeAll revokes every token in turn and returns when the last revoke
// returned.
func revokeAll(ctx context.Context, cfg config, ctl control, runs []*tokenRun, errs *errorCount) time.Time {
	var last time.Time
	for _, tr := range runs {
		if ctx.Err() != nil {
			break
		}
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, cfg.timeout)
		err := ctl.revoke(rctx, tr.token)
		cancel()
		last = time.Now()
		if err != nil {
			errs.add(err)
		}
		tr.setRevoked(start, last)
		sleepCtx(ctx, cfg.revokeInterval)
	}
	return last
}

// waitStreams waits until every stream ended or the deadline, then closes
// those still open.
func waitStreams(ctx context.Context, runs []*tokenRun, deadline time.Time) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	for _, tr := range runs {
		if tr.stream == nil {
			continue
		}
		select {
		case <-tr.stream.Done():
		case <-ctx.Done():
		}
	}
	for _, tr := range runs {
		if tr.stream != nil {
			_ = tr.stream.Close()
		}
	}
}

// tallyRevoke counts stale accepts, rejections, errors and stream closing
// times.
func tallyRevoke(runs []*tokenRun, res *result.Result, errs *errorCount) {
	var closing []time.Duration
	for _, tr := range runs {
		start, end := tr.revoked()
		t := tallyCalls(tr.calls, start, end)
		res.StaleAccepts += t.stale
		res.Rejected += t.rejected
		for _, err := range t.errs {
			errs.add(err)
		}
		if tr.stream == nil {
			continue
		}
		d, ok, err := streamClosing(tr.stream.ClosedAt(), start, end)
		switch {
		case err != nil:
			errs.add(err)
		case !ok:
			res.StreamsUnclosed++
		default:
			closing = append(closing, d)
		}
	}
	slices.Sort(closing)
	res.StreamsClosed = len(closing)
	res.CloseP99Ms = ms(stats.Percentile(closing, 0.99))
	res.CloseMaxMs = ms(stats.Percentile(closing, 1))
}

// callTally is what the calls of one token amount to.
type callTally struct {
	stale, rejected int64
	errs            []error
}

// tallyCalls judges one token's calls against its revoke, which started
// at start and returned at end (zero: never revoked). A success sent after
// end is a stale accept. A rejection is expected once the revoke has
// started; before, it is an error, as is any other failure.
func tallyCalls(calls []call, start, end time.Time) callTally {
	var t callTally
	for _, c := range calls {
		switch c.outcome {
		case succeeded:
			if !end.IsZero() && c.sent.After(end) {
				t.stale++
			}
		case rejected:
			if start.IsZero() || c.done.Before(start) {
				t.errs = append(t.errs, fmt.Errorf("rejected before its revoke: %w", c.err))
				continue
			}
			t.rejected++
		default:
			t.errs = append(t.errs, c.err)
		}
	}
	return t
}

// streamClosing returns how long after its revoke returned (end) a stream
// closed (0 if it closed while the revoke was in progress); ok is false if
// it never closed. A stream that closed before the revoke started is an
// error.
func streamClosing(closed, start, end time.Time) (d time.Duration, ok bool, err error) {
	switch {
	case closed.IsZero():
		return 0, false, nil
	case start.IsZero() || closed.Before(start):
		return 0, false, errors.New("stream closed before its revoke")
	}
	return max(closed.Sub(end), 0), true, nil
}

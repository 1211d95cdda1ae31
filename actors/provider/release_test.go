package provider_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/memdb"
)

// orderLog records, in order, what the Release hook and the driver's Close
// saw. Safe for concurrent use.
type orderLog struct {
	mu    sync.Mutex // guards steps
	steps []string
}

func (l *orderLog) add(step string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.steps = append(l.steps, step)
}

func (l *orderLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.steps)
}

// loggedDriver is a driver whose sessions log their Close, and the time
// left on its context, and whose CloseBudget is budget (0: none).
type loggedDriver struct {
	provider.Driver
	log    *orderLog
	budget time.Duration
	// closeLeft receives, per Close, the time its context had left.
	closeLeft chan time.Duration
}

func (d *loggedDriver) Open(ctx context.Context, req provider.OpenRequest) (provider.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &loggedSession{Session: s, id: req.SessionID, d: d}, nil
}

type loggedSession struct {
	provider.Session
	id string
	d  *loggedDriver
}

func (s *loggedSession) Close(ctx context.Context) error {
	s.d.log.add("close " + s.id)
	if s.d.closeLeft != nil {
		dl, _ := ctx.Deadline()
		s.d.closeLeft <- time.Until(dl)
	}
	return s.Session.Close(ctx)
}

// budgetDriver is a loggedDriver with a close budget.
type budgetDriver struct{ *loggedDriver }

func (d budgetDriver) CloseBudget() time.Duration { return d.budget }

// TestReleaseBeforeClose: a session released by the host, released as
// idle, or dead has its record removed and Config.Release called (its
// credentials revoked) before the driver's Close; CloseSession answers
// after both, with Release's error. Shutdown and an aborted open do not
// call Release (issue 11, item 2).
func TestReleaseBeforeClose(t *testing.T) {
	tests := []struct {
		name        string
		reason      string
		release     bool // Release is called
		close       func(e *env, pid *actor.PID, id string)
		releaseFail bool
	}{
		{name: "released", reason: provider.ReasonReleased, release: true, close: func(e *env, pid *actor.PID, id string) {
			res := actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
			if res.Err != nil {
				e.t.Errorf("CloseSession = %v", res.Err)
			}
		}},
		{name: "released, Release fails", reason: provider.ReasonReleased, release: true, releaseFail: true, close: func(e *env, pid *actor.PID, id string) {
			res := actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
			if !errors.Is(res.Err, errRevokeFailed) {
				e.t.Errorf("CloseSession = %v, want the Release error", res.Err)
			}
		}},
		{name: "idle", reason: provider.ReasonIdle, release: true, close: func(e *env, pid *actor.PID, id string) {
			e.clock.Advance(2 * time.Minute)
			res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
			if len(res.Sessions) != 1 || res.Err != nil {
				e.t.Errorf("ReleaseIdle = %+v, want one session and no error", res)
			}
		}},
		{name: "idle, Release fails", reason: provider.ReasonIdle, release: true, releaseFail: true, close: func(e *env, pid *actor.PID, id string) {
			e.clock.Advance(2 * time.Minute)
			res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
			if len(res.Sessions) != 1 || !errors.Is(res.Err, errRevokeFailed) {
				e.t.Errorf("ReleaseIdle = %+v, want one session and the Release error", res)
			}
		}},
		{name: "died", reason: provider.ReasonDied, release: true, close: func(e *env, pid *actor.PID, id string) {
			e.inproc.Session(id).Kill(errors.New("exit status 1"))
			eventually(e.t, "the dead session's driver closed", func() bool { return e.inproc.Session(id).Closed() })
		}},
		{name: "shutdown", reason: provider.ReasonShutdown, close: func(e *env, pid *actor.PID, id string) {
			actortest.Ask[*provider.CloseAllResult](e.t, e.root, pid, &provider.CloseAll{Reason: provider.ReasonShutdown})
		}},
		{name: "aborted", reason: provider.ReasonAborted, close: func(e *env, pid *actor.PID, id string) {
			actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonAborted})
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			e.idleRelease = time.Minute
			log := &orderLog{}
			var got []*memdb.ProviderSession
			e.release = func(_ context.Context, closed *memdb.ProviderSession) error {
				// The record is gone already: another session's release
				// sees this one as no longer holding its credentials.
				if _, err := e.record(closed.ID); !errors.Is(err, memdb.ErrNotFound) {
					t.Errorf("record of %s at Release: %v, want ErrNotFound", closed.ID, err)
				}
				log.add("release " + closed.ID)
				got = append(got, closed)
				if test.releaseFail {
					return errRevokeFailed
				}
				return nil
			}
			inner, err := e.inproc.Factory()("a", nil)
			if err != nil {
				t.Fatal(err)
			}
			pid := e.spawn("a", &loggedDriver{Driver: inner, log: log})
			id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			test.close(e, pid, id)
			e.sessions(pid) // barrier
			eventually(t, "the driver session closed", func() bool { return e.inproc.Session(id).Closed() })

			want := []string{"close ps_1"}
			if test.release {
				want = []string{"release ps_1", "close ps_1"}
				if len(got) != 1 || got[0].CloseReason != test.reason || !slices.Equal(got[0].Credentials, []string{"c1"}) {
					t.Errorf("Release got %+v, want ps_1 closed for %s holding [c1]", got, test.reason)
				}
			}
			if steps := log.get(); !slices.Equal(steps, want) {
				t.Errorf("steps %v, want %v", steps, want)
			}
		})
	}
}

var errRevokeFailed = errors.New("revoke failed")

// TestCloseAnsweredAfterDriverClose: with Release taking its time, the
// driver's Close waits for it, and CloseSession is answered only once the
// driver's Close returned.
func TestCloseAnsweredAfterDriverClose(t *testing.T) {
	e := newEnv(t)
	releasing, releaseGate := make(chan struct{}), make(chan struct{})
	e.release = func(context.Context, *memdb.ProviderSession) error {
		close(releasing)
		<-releaseGate
		return nil
	}
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	closeGate := make(chan struct{})
	pid := e.spawn("a", &gatedDriver{inner: inner, closeGate: closeGate})
	id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	done := make(chan *provider.CloseSessionResult, 1)
	go func() {
		done <- actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
	}()
	select {
	case <-releasing:
	case <-time.After(timeout): // detects a hang only
		t.Fatal("Release was not called")
	}
	e.sessions(pid) // barrier: the instance keeps answering meanwhile
	if e.inproc.Session(id).Closed() {
		t.Fatal("driver session closed while Release runs")
	}
	close(releaseGate)
	select {
	case res := <-done:
		t.Fatalf("CloseSession answered (%+v) while the driver's Close is blocked", res)
	default:
	}
	close(closeGate)
	if res := <-done; res.Err != nil || res.Session.ID != id {
		t.Fatalf("CloseSession = %+v", res)
	}
	if !e.inproc.Session(id).Closed() {
		t.Error("CloseSession answered before the driver's Close returned")
	}
}

// TestCloseBudget: a driver's CloseBudget, longer than the bound on driver
// calls, is the bound on its sessions' Close; without one, Close gets the
// bound on driver calls (issue 11, item 2: the exec grace was cut at
// OpenTimeout).
func TestCloseBudget(t *testing.T) {
	for _, budget := range []time.Duration{0, time.Hour} {
		e := newEnv(t)
		inner, err := e.inproc.Factory()("a", nil)
		if err != nil {
			t.Fatal(err)
		}
		ld := &loggedDriver{Driver: inner, log: &orderLog{}, budget: budget, closeLeft: make(chan time.Duration, 1)}
		var d provider.Driver = ld
		if budget > 0 {
			d = budgetDriver{ld}
		}
		if got, want := provider.CloseTimeout(d, e.opTimeout), max(e.opTimeout, budget); got != want {
			t.Errorf("budget %v: CloseTimeout = %v, want %v", budget, got, want)
		}
		pid := e.spawn("a", d)
		id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
		actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
		left := <-ld.closeLeft
		switch {
		case budget == 0 && left > e.opTimeout:
			t.Errorf("no budget: Close had %v left, more than the bound on driver calls (%v)", left, e.opTimeout)
		case budget > 0 && left <= e.opTimeout:
			t.Errorf("budget %v: Close had %v left, no more than the bound on driver calls (%v)", budget, left, e.opTimeout)
		}
	}
}

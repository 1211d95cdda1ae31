package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/fault"
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
	driver.Driver
	log    *orderLog
	budget time.Duration
	// closeLeft receives, per Close, the time its context had left.
	closeLeft chan time.Duration
}

func (d *loggedDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &loggedSession{Session: s, id: req.SessionID, d: d}, nil
}

type loggedSession struct {
	driver.Session
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
// idle, or dead has its record removed and its thread's actor asked to
// revoke its credentials before the driver's Close; CloseSession answers
// after both, with the revocation's failure. Shutdown and an aborted open
// do not ask.
func TestReleaseBeforeClose(t *testing.T) {
	revokeFailed := fault.New(fault.Internal, "revoke failed")
	tests := []struct {
		name        string
		reason      string
		release     bool // the thread is asked to release
		close       func(e *env, pid *actor.PID, id string)
		releaseFail bool
	}{
		{name: "released", reason: provider.ReasonReleased, release: true, close: func(e *env, pid *actor.PID, id string) {
			res := actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
			if res.Err() != nil {
				e.t.Errorf("CloseSession = %v", res.Err())
			}
		}},
		{name: "released, revocation fails", reason: provider.ReasonReleased, release: true, releaseFail: true, close: func(e *env, pid *actor.PID, id string) {
			res := actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
			if res.Fault != revokeFailed {
				e.t.Errorf("CloseSession = %+v, want the revocation's fault", res.Fault)
			}
		}},
		{name: "idle", reason: provider.ReasonIdle, release: true, close: func(e *env, pid *actor.PID, id string) {
			e.clock.Advance(2 * time.Minute)
			res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
			if len(res.Sessions) != 1 || res.Err() != nil {
				e.t.Errorf("ReleaseIdle = %+v, want one session and no error", res)
			}
		}},
		{name: "idle, revocation fails", reason: provider.ReasonIdle, release: true, releaseFail: true, close: func(e *env, pid *actor.PID, id string) {
			e.clock.Advance(2 * time.Minute)
			res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
			if len(res.Sessions) != 1 || res.Fault != revokeFailed {
				e.t.Errorf("ReleaseIdle = %+v, want one session and the revocation's fault", res)
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
			stub := &threadStub{onRelease: func(m *provider.ReleaseCredentials) {
				// The record is gone already: another session's release
				// sees this one as no longer holding its credentials.
				if _, err := e.record(m.SessionID); !errors.Is(err, memdb.ErrNotFound) {
					t.Errorf("record of %s at the release: %v, want ErrNotFound", m.SessionID, err)
				}
				log.add("release " + m.SessionID)
			}}
			if test.releaseFail {
				stub.fault = revokeFailed
			}
			e.stubThread("t1", stub)
			inner, err := e.inproc.Factory()("a", nil)
			if err != nil {
				t.Fatal(err)
			}
			pid := e.spawn("a", &loggedDriver{Driver: inner, log: log})
			id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			test.close(e, pid, id)
			e.sessions(pid) // barrier
			eventually(t, "the driver session closed", func() bool { return e.inproc.Session(id).Closed() })
			if ev := e.waitEvents(1)[0]; ev.Reason != test.reason {
				t.Errorf("SessionClosed reason %q, want %q", ev.Reason, test.reason)
			}

			want := []string{"close ps_1"}
			if test.release {
				want = []string{"release ps_1", "close ps_1"}
				got := stub.releases()
				if len(got) != 1 || got[0].SessionID != "ps_1" || !slices.Equal(got[0].Credentials, []string{"c1"}) {
					t.Errorf("thread t1 was asked %+v, want to release ps_1's [c1] once", got)
				}
			} else if got := stub.releases(); len(got) != 0 {
				t.Errorf("thread t1 was asked %+v, want nothing", got)
			}
			if steps := log.get(); !slices.Equal(steps, want) {
				t.Errorf("steps %v, want %v", steps, want)
			}
		})
	}
}

// TestCloseWaitsForRevocation: a session released by the host, released
// as idle, or dead does not have its driver's Close called while its
// thread's actor has not answered the revocation, however long that takes;
// the answer, and only it, lets the Close run. The thread's actor holds its
// answer, and the test waits until every goroutine of its bubble is
// blocked (synctest.Wait): what could run without the answer has run, so
// a Close sent before the revocation is seen, never missed.
func TestCloseWaitsForRevocation(t *testing.T) {
	tests := []struct {
		name string
		// end starts the session's end and returns the request that
		// waits for it (nil: none does, as for a death).
		end func(e *env, pid *actor.PID, id string) *actor.Future
	}{
		{name: "released", end: func(e *env, pid *actor.PID, id string) *actor.Future {
			return e.root.RequestFuture(pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased}, actortest.Timeout)
		}},
		{name: "idle", end: func(e *env, pid *actor.PID, id string) *actor.Future {
			e.clock.Advance(2 * time.Minute)
			return e.root.RequestFuture(pid, &provider.ReleaseIdle{}, actortest.Timeout)
		}},
		{name: "died", end: func(e *env, pid *actor.PID, id string) *actor.Future {
			e.inproc.Session(id).Kill(errors.New("exit status 1"))
			return nil
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				// Registered first, run last: protoactor's dead-letter
				// throttle waits out its interval on a goroutine of its own,
				// and the bubble ends only once every goroutine in it has.
				t.Cleanup(func() { time.Sleep(time.Second) })
				e := newEnv(t)
				e.idleRelease = time.Minute
				log := &orderLog{}
				stubPID := e.stubThread("t1", &threadStub{hold: true, onRelease: func(m *provider.ReleaseCredentials) {
					log.add("release " + m.SessionID)
				}})
				inner, err := e.inproc.Factory()("a", nil)
				if err != nil {
					t.Fatal(err)
				}
				pid := e.spawn("a", &loggedDriver{Driver: inner, log: log})
				id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
				f := test.end(e, pid, id)
				synctest.Wait()
				if steps, want := log.get(), []string{"release ps_1"}; !slices.Equal(steps, want) {
					t.Fatalf("with the revocation unanswered: steps %v, want %v", steps, want)
				}
				e.root.Send(stubPID, &stubAnswer{})
				synctest.Wait()
				if steps, want := log.get(), []string{"release ps_1", "close ps_1"}; !slices.Equal(steps, want) {
					t.Errorf("once answered: steps %v, want %v", steps, want)
				}
				if f != nil {
					if _, err := f.Result(); err != nil {
						t.Errorf("the end's request: %v", err)
					}
				}
			})
		})
	}
}

// TestCloseAnsweredAfterDriverClose: with the thread taking its time to
// revoke, the driver's Close waits for it, and CloseSession is answered
// only once the driver's Close returned.
func TestCloseAnsweredAfterDriverClose(t *testing.T) {
	e := newEnv(t)
	releasing := make(chan struct{}, 1)
	stubPID := e.stubThread("t1", &threadStub{hold: true, onRelease: func(*provider.ReleaseCredentials) { releasing <- struct{}{} }})
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	closeGate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, CloseGate: closeGate})
	id := e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	done := make(chan *provider.CloseSessionResult, 1)
	go func() {
		done <- actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: id, Reason: provider.ReasonReleased})
	}()
	select {
	case <-releasing:
	case <-time.After(actortest.Timeout): // detects a hang only
		t.Fatal("the thread was not asked to release")
	}
	e.sessions(pid) // barrier: the instance keeps answering meanwhile
	if e.inproc.Session(id).Closed() {
		t.Fatal("driver session closed while the thread revokes")
	}
	e.root.Send(stubPID, &stubAnswer{})
	select {
	case res := <-done:
		t.Fatalf("CloseSession answered (%+v) while the driver's Close is blocked", res)
	default:
	}
	close(closeGate)
	if res := <-done; res.Err() != nil || res.Session.ID != id {
		t.Fatalf("CloseSession = %+v", res)
	}
	if !e.inproc.Session(id).Closed() {
		t.Error("CloseSession answered before the driver's Close returned")
	}
}

// TestCloseBudget: a driver's CloseBudget, longer than the bound on driver
// calls, is the bound on its sessions' Close; without one, Close gets the
// bound on driver calls.
func TestCloseBudget(t *testing.T) {
	for _, budget := range []time.Duration{0, time.Hour} {
		e := newEnv(t)
		inner, err := e.inproc.Factory()("a", nil)
		if err != nil {
			t.Fatal(err)
		}
		ld := &loggedDriver{Driver: inner, log: &orderLog{}, budget: budget, closeLeft: make(chan time.Duration, 1)}
		var d driver.Driver = ld
		if budget > 0 {
			d = budgetDriver{ld}
		}
		if got, want := driver.CloseTimeout(d, e.opTimeout), max(e.opTimeout, budget); got != want {
			t.Errorf("budget %v: driver.CloseTimeout = %v, want %v", budget, got, want)
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

// TestReleaseKeepsCredentialsHeldElsewhere: a released session's
// credential that another open session of the instance holds is not
// released; one that none holds is (SPEC §3.2 release).
func TestReleaseKeepsCredentialsHeldElsewhere(t *testing.T) {
	e := newEnv(t)
	stub := e.stubThread("t1", &threadStub{})
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
	// A second session given the same credential.
	e.mustOpen(pid, "ps_2", binding("t1", "c1"))
	if r := e.rebind(pid, binding("t1", "c2")); r.Err() != nil || !slices.Equal(r.Sessions, []string{"ps_2"}) {
		t.Fatalf("rebind = %+v", r)
	}
	actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})
	if got := e.releasesOf(stub); len(got) != 0 {
		t.Errorf("releasing ps_1, whose c1 ps_2 holds, asked %+v, want nothing", got)
	}
	actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: "ps_2", Reason: provider.ReasonReleased})
	want := []provider.ReleaseCredentials{{SessionID: "ps_2", Credentials: []string{"c1", "c2"}}}
	if diff := cmp.Diff(want, e.releasesOf(stub), cmpopts.IgnoreFields(provider.ReleaseCredentials{}, "Request")); diff != "" {
		t.Errorf("releasing ps_2 asked (-want +got):\n%s", diff)
	}
}

// TestReleaseAsksEachThreadOnce: however a session ends — released, idle
// (asked, or on the timer, or both), dead, dead while its release runs,
// released again meanwhile — each thread it served is asked exactly once,
// by the instance that closed it, to release the session's credentials of
// that thread: the instance's close is the one release path.
func TestReleaseAsksEachThreadOnce(t *testing.T) {
	tests := []struct {
		name string
		hold bool // the threads answer only when told
		end  func(e *env, pid *actor.PID, answer func())
	}{
		{name: "released", end: func(e *env, pid *actor.PID, _ func()) {
			actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})
		}},
		{name: "released twice", hold: true, end: func(e *env, pid *actor.PID, answer func()) {
			first := e.root.RequestFuture(pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased}, actortest.Timeout)
			again := actortest.Ask[*provider.CloseSessionResult](e.t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})
			if !errors.Is(again.Err(), fault.ErrUnknownProviderSession) {
				e.t.Errorf("second release = %v, want ErrUnknownProviderSession", again.Err())
			}
			answer()
			if _, err := first.Result(); err != nil {
				e.t.Fatal(err)
			}
		}},
		{name: "idle", end: func(e *env, pid *actor.PID, _ func()) {
			e.clock.Advance(2 * time.Minute)
			if res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{}); len(res.Sessions) != 1 {
				e.t.Errorf("ReleaseIdle = %+v, want ps_1", res)
			}
		}},
		{name: "idle, asked twice", hold: true, end: func(e *env, pid *actor.PID, answer func()) {
			e.clock.Advance(2 * time.Minute)
			first := e.root.RequestFuture(pid, &provider.ReleaseIdle{}, actortest.Timeout)
			second := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
			if len(second.Sessions) != 0 {
				e.t.Errorf("second ReleaseIdle = %+v, want nothing (ps_1 is closing)", second)
			}
			answer()
			if _, err := first.Result(); err != nil {
				e.t.Fatal(err)
			}
		}},
		{name: "died", end: func(e *env, pid *actor.PID, _ func()) {
			e.inproc.Session("ps_1").Kill(errors.New("exit status 1"))
		}},
		{name: "died while releasing", hold: true, end: func(e *env, pid *actor.PID, answer func()) {
			f := e.root.RequestFuture(pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased}, actortest.Timeout)
			e.inproc.Session("ps_1").Kill(errors.New("exit status 1"))
			e.sessions(pid) // barrier: the death was handled
			answer()
			if _, err := f.Result(); err != nil {
				e.t.Fatal(err)
			}
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			e.idleRelease = time.Minute
			t1 := e.stubThread("t1", &threadStub{hold: test.hold})
			t2 := e.stubThread("t2", &threadStub{hold: test.hold})
			pid := e.spawnInproc("a", json.RawMessage(`{"multiThread":true}`))
			e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			e.mustOpen(pid, "ps_x", binding("t2", "c2"))
			answer := func() {
				for _, p := range []*actor.PID{t1, t2} {
					e.root.Send(p, &stubAnswer{})
				}
			}
			test.end(e, pid, answer)
			if test.name == "died" {
				e.waitEvents(1)
			}
			e.sessions(pid) // barrier
			ignore := cmpopts.IgnoreFields(provider.ReleaseCredentials{}, "Request")
			for _, th := range []struct {
				pid  *actor.PID
				cred string
			}{{t1, "c1"}, {t2, "c2"}} {
				want := []provider.ReleaseCredentials{{SessionID: "ps_1", Credentials: []string{th.cred}}}
				if diff := cmp.Diff(want, e.releasesOf(th.pid), ignore); diff != "" {
					t.Errorf("releases asked of the thread holding %s (-want +got):\n%s", th.cred, diff)
				}
			}
		})
	}
}

package provider_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/actortest"
)

// Races between attach and detach/close, found by the concurrent property
// machine (proptest) and kept here as plain tests. Each holds a driver's
// Attach at a gate so the race is taken the same way every time.

// attachGated wraps a driver so that Attach signals and waits for gate.
type attachGated struct {
	driver.Driver
	attaching chan string // buffered; the thread of every Attach
	gate      chan struct{}
}

func (d *attachGated) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &attachGatedSession{Session: s, d: d}, nil
}

type attachGatedSession struct {
	driver.Session
	d *attachGated
}

func (s *attachGatedSession) Attach(ctx context.Context, b driver.Binding) error {
	s.d.attaching <- b.Thread
	select {
	case <-s.d.gate:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Session.Attach(ctx, b)
}

func (e *env) spawnGated(id string, config json.RawMessage) (*actor.PID, *attachGated) {
	e.t.Helper()
	inner, err := e.inproc.Factory()(id, config)
	if err != nil {
		e.t.Fatal(err)
	}
	d := &attachGated{Driver: inner, attaching: make(chan string, 8), gate: make(chan struct{})}
	return e.spawn(id, d), d
}

func waitAttaching(t *testing.T, d *attachGated) {
	t.Helper()
	select {
	case <-d.attaching:
	case <-time.After(actortest.Timeout):
		t.Fatal("the driver's Attach was not called")
	}
}

// TestRebindOvertakenByDetach: a rotation's re-bind is on its way to the
// driver when the thread is detached. The detach reaches the driver after
// the re-bind, so the thread ends detached; the session holds the new
// credential.
func TestRebindOvertakenByDetach(t *testing.T) {
	e := newEnv(t)
	pid, d := e.spawnGated("a", nil)
	sid := e.mustOpen(pid, "", binding("t1", "c1"))
	rebind := e.root.RequestFuture(pid, &provider.RebindThread{Binding: binding("t1", "c2"), Replaces: []string{"c1"}}, actortest.Timeout)
	waitAttaching(t, d)
	det := actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
	if !slices.Equal(det.Sessions, []string{sid}) {
		t.Fatalf("detach from %v, want [%s]", det.Sessions, sid)
	}
	close(d.gate)
	res, err := rebind.Result()
	if err != nil || res.(*provider.ThreadRebound).Err() != nil {
		t.Fatalf("re-bind = %v, %v", res, err)
	}
	rec, err := e.record(sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Threads) != 0 || !slices.Equal(rec.Credentials, []string{"c2"}) {
		t.Fatalf("after re-bind then detach: threads %v credentials %v, want none and [c2]", rec.Threads, rec.Credentials)
	}
	// The driver's Detach was queued behind the re-bind's Attach; it runs
	// right after the re-bind answered.
	deadline := time.Now().Add(actortest.Timeout)
	for got := e.inproc.Session(sid).Attached(); len(got) != 0; got = e.inproc.Session(sid).Attached() {
		if time.Now().After(deadline) {
			t.Fatalf("driver session still attached to %v, want none", got)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestRebindOfDetachedThreadDoesNothing: a re-bind that a detach overtook
// on its way to the instance finds the thread gone: the session neither
// serves the thread again nor gets the new credential.
func TestRebindOfDetachedThreadDoesNothing(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	sid := e.mustOpen(pid, "", binding("t1", "c1"))
	actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
	res := e.rebind(pid, binding("t1", "c2"), "c1")
	if res.Err() != nil || len(res.Sessions) != 0 {
		t.Fatalf("re-bind of a detached thread = %+v, want nothing re-bound", res)
	}
	rec, err := e.record(sid)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Threads) != 0 || !slices.Equal(rec.Credentials, []string{"c1"}) {
		t.Fatalf("threads %v credentials %v, want none and [c1]", rec.Threads, rec.Credentials)
	}
	if n := len(e.inproc.Session(sid).Bindings()); n != 1 {
		t.Fatalf("driver got %d bindings, want only Open's", n)
	}
}

// TestMultiThreadOpenJoiningAClosingSession: an open of a multi-thread
// instance joins its open session, which is closed before the attach
// completes. The open does not fail: it opens a new session, as if it had
// come after the close.
func TestMultiThreadOpenJoiningAClosingSession(t *testing.T) {
	e := newEnv(t)
	pid, d := e.spawnGated("m", json.RawMessage(`{"multiThread":true}`))
	first := e.mustOpen(pid, "", binding("t1", "c1"))
	open := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_second", Binding: binding("t2", "c2")}, actortest.Timeout)
	waitAttaching(t, d)
	closing := e.root.RequestFuture(pid, &provider.CloseSession{SessionID: first, Reason: provider.ReasonReleased}, actortest.Timeout)
	close(d.gate)
	res, err := open.Result()
	if err != nil {
		t.Fatal(err)
	}
	r := res.(*provider.OpenSessionResult)
	if r.Err() != nil || r.SessionID != "ps_second" {
		t.Fatalf("open joining a closing session = %+v, want a new session ps_second", r)
	}
	if _, err := closing.Result(); err != nil {
		t.Fatal(err)
	}
	rec, err := e.record("ps_second")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rec.Threads, []string{"t2"}) || !slices.Equal(rec.Credentials, []string{"c2"}) {
		t.Fatalf("new session serves %v with %v, want [t2] with [c2]", rec.Threads, rec.Credentials)
	}
}

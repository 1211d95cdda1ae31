package provider_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
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

func TestInstanceRecordWrittenOnStart(t *testing.T) {
	e := newEnv(t)
	d, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.spawn("a", d, "thread.read")
	got, err := e.store.Read().Instance("a")
	if err != nil {
		t.Fatalf("Instance(a) = %v", err)
	}
	want := &memdb.Instance{ID: "a", Driver: driver.InprocKind, Capabilities: []string{"thread.read"}, Created: actortest.T0}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("instance record (-want +got):\n%s", diff)
	}
}

func TestOpenSession(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	b := binding("t1", "c1")

	if got := e.mustOpen(pid, "ps_1", b); got != "ps_1" {
		t.Fatalf("OpenSession(ps_1) session = %q, want ps_1", got)
	}
	s := e.inproc.Session("ps_1")
	if s == nil {
		t.Fatal("inproc has no session ps_1")
	}
	if diff := cmp.Diff([]driver.Binding{b}, s.Bindings()); diff != "" {
		t.Errorf("driver bindings (-want +got):\n%s", diff)
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
		State: memdb.SessionOpen, Opened: actortest.T0,
	}
	got, err := e.record("ps_1")
	if err != nil {
		t.Fatalf("ProviderSession(ps_1) = %v", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]memdb.ProviderSession{*want}, e.sessions(pid)); diff != "" {
		t.Errorf("GetSessions (-want +got):\n%s", diff)
	}

	// Without a requested id the actor picks one.
	id := e.mustOpen(pid, "", binding("t2", "c2"))
	if !strings.HasPrefix(id, "ps_") || id == "ps_1" {
		t.Errorf("OpenSession(\"\") session = %q, want a fresh ps_ id", id)
	}
	if n := len(e.inproc.Sessions("a")); n != 2 {
		t.Errorf("exclusive driver has %d sessions after two opens, want 2", n)
	}
}

func TestOpenSessionMultiThreadAttaches(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", json.RawMessage(`{"multiThread":true}`))
	b1, b2, b3 := binding("t1", "c1"), binding("t2", "c2"), binding("t3", "c3")

	first := e.mustOpen(pid, "ps_1", b1)
	if got := e.mustOpen(pid, "ps_2", b2); got != first {
		t.Errorf("second OpenSession session = %q, want the open one %q", got, first)
	}
	if got := e.mustOpen(pid, "ps_3", b3); got != first {
		t.Errorf("third OpenSession session = %q, want the open one %q", got, first)
	}

	if n := len(e.inproc.Sessions("a")); n != 1 {
		t.Fatalf("multi-thread driver has %d sessions, want 1", n)
	}
	s := e.inproc.Session(first)
	if diff := cmp.Diff([]driver.Binding{b1, b2, b3}, s.Bindings()); diff != "" {
		t.Errorf("driver bindings (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"t1", "t2", "t3"}, s.Attached()); diff != "" {
		t.Errorf("attached (-want +got):\n%s", diff)
	}
	want := &memdb.ProviderSession{
		ID: first, Instance: "a", MultiThread: true,
		Threads: []string{"t1", "t2", "t3"}, Credentials: []string{"c1", "c2", "c3"},
		State: memdb.SessionOpen, Opened: actortest.T0,
	}
	got, err := e.record(first)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
}

func TestOpenSessionMultiThreadWhileOpening(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", json.RawMessage(`{"multiThread":true}`))
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: make(chan string, 4), OpenGate: gate})

	f1 := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	f2 := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_2", Binding: binding("t2", "c2")}, actortest.Timeout)
	e.sessions(pid) // both opens were handled while the first is still opening
	close(gate)
	for i, f := range []*actor.Future{f1, f2} {
		res, err := f.Result()
		if err != nil {
			t.Fatalf("open %d: %v", i+1, err)
		}
		if r := res.(*provider.OpenSessionResult); r.Err() != nil || r.SessionID != "ps_1" {
			t.Errorf("open %d = %+v, want session ps_1", i+1, r)
		}
	}
	if n := len(e.inproc.Sessions("a")); n != 1 {
		t.Errorf("driver opened %d sessions, want 1", n)
	}
	got, err := e.record("ps_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"t1", "t2"}, got.Threads); diff != "" {
		t.Errorf("threads (-want +got):\n%s", diff)
	}
}

// TestAcquireSession: the instance answers, from its own sessions, whether
// one serves the thread with the credential asked about (Reused), can take
// the thread back (Attached: the driver's Attach gets the binding without a
// token), or neither (NeedsCredential) — the one question of the open
// protocol.
func TestAcquireSession(t *testing.T) {
	tests := []struct {
		name        string
		multi       bool
		detach      bool // t1 is detached from ps_1 first
		ask         driver.Binding
		wantOutcome provider.Outcome
		wantThreads []string // ps_1's threads after
	}{
		{name: "the pair's session", ask: binding("t1", "c1"), wantOutcome: provider.Reused, wantThreads: []string{"t1"}},
		{name: "no live credential", ask: binding("t1", ""), wantOutcome: provider.NeedsCredential, wantThreads: []string{"t1"}},
		{name: "a credential no session holds", ask: binding("t1", "c9"), wantOutcome: provider.NeedsCredential, wantThreads: []string{"t1"}},
		{name: "exclusive session serving another thread", ask: binding("t2", "c1"), wantOutcome: provider.NeedsCredential, wantThreads: []string{"t1"}},
		{name: "plainly detached: re-attached", detach: true, ask: binding("t1", "c1"), wantOutcome: provider.Attached, wantThreads: []string{"t1"}},
		{name: "multi-thread session holding it", multi: true, ask: binding("t2", "c1"), wantOutcome: provider.Attached, wantThreads: []string{"t1", "t2"}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			var cfg json.RawMessage
			if test.multi {
				cfg = json.RawMessage(`{"multiThread":true}`)
			}
			pid := e.spawnInproc("a", cfg)
			e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			if test.detach {
				actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
			}
			res := e.acquire(pid, test.ask)
			if res.Err() != nil || res.Outcome != test.wantOutcome {
				t.Fatalf("AcquireSession(%s, %s) = %+v, want outcome %d", test.ask.Thread, test.ask.CredentialID, res, test.wantOutcome)
			}
			if test.wantOutcome != provider.NeedsCredential && res.SessionID != "ps_1" {
				t.Errorf("AcquireSession session = %q, want ps_1", res.SessionID)
			}
			got, err := e.record("ps_1")
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(test.wantThreads, got.Threads); diff != "" {
				t.Errorf("threads (-want +got):\n%s", diff)
			}
			wantBindings := []driver.Binding{binding("t1", "c1")}
			if test.wantOutcome == provider.Attached {
				re := test.ask
				re.Authorization = ""
				wantBindings = append(wantBindings, re)
			}
			if diff := cmp.Diff(wantBindings, e.inproc.Session("ps_1").Bindings()); diff != "" {
				t.Errorf("driver bindings (-want +got):\n%s", diff)
			}
		})
	}
}

// TestOpenSessionRebindsAttachedThread: an open with a new credential for a
// thread still attached to a session (its credential expired) re-binds that
// session instead of starting a second one.
func TestOpenSessionRebindsAttachedThread(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	res := e.open(pid, "ps_2", binding("t1", "c2"))
	if res.Err() != nil || res.SessionID != "ps_1" || res.New {
		t.Fatalf("OpenSession(t1, c2) = %+v, want ps_1 re-bound, not new", res)
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1", "c2"},
		State: memdb.SessionOpen, Opened: actortest.T0,
	}
	got, err := e.record("ps_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]driver.Binding{binding("t1", "c1"), binding("t1", "c2")}, e.inproc.Session("ps_1").Bindings()); diff != "" {
		t.Errorf("driver bindings (-want +got):\n%s", diff)
	}
	if n := len(e.inproc.Sessions("a")); n != 1 {
		t.Errorf("driver opened %d sessions, want 1", n)
	}
}

// TestRebindThread: a rotation's new credential replaces the old one in
// every session serving the thread, and the driver gets the new binding.
func TestRebindThread(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.mustOpen(pid, "ps_2", binding("t2", "c3"))
	res := e.rebind(pid, binding("t1", "c2"), "c1")
	if res.Err() != nil || !slices.Equal(res.Sessions, []string{"ps_1"}) {
		t.Fatalf("RebindThread = %+v, want ps_1 re-bound", res)
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c2"},
		State: memdb.SessionOpen, Opened: actortest.T0,
	}
	got, err := e.record("ps_1")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]driver.Binding{binding("t1", "c1"), binding("t1", "c2")}, e.inproc.Session("ps_1").Bindings()); diff != "" {
		t.Errorf("driver bindings (-want +got):\n%s", diff)
	}
	if n := len(e.inproc.Session("ps_2").Bindings()); n != 1 {
		t.Errorf("the other thread's session got %d bindings, want 1", n)
	}
	// A thread no session serves: nothing to re-bind.
	if res := e.rebind(pid, binding("t9", "c9"), "c8"); res.Err() != nil || len(res.Sessions) != 0 {
		t.Errorf("RebindThread(t9) = %+v, want nothing re-bound", res)
	}
}

func TestDetachThreadKeepsCredentials(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))

	res := actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
	if diff := cmp.Diff([]string{"ps_1"}, res.Sessions); diff != "" {
		t.Errorf("DetachThread(t1) sessions (-want +got):\n%s", diff)
	}
	got, err := e.record("ps_1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Threads) != 0 || !slices.Equal(got.Credentials, []string{"c1"}) || got.State != memdb.SessionOpen {
		t.Errorf("record after detach = %+v, want no threads, credentials [c1], open", got)
	}
	s := e.inproc.Session("ps_1")
	eventually(t, "the driver detached t1", func() bool { return len(s.Attached()) == 0 })
	if s.Closed() {
		t.Error("detach closed the driver session")
	}

	// An unknown thread is detached from nothing.
	res = actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t9"})
	if len(res.Sessions) != 0 {
		t.Errorf("DetachThread(t9) sessions = %v, want none", res.Sessions)
	}

	// A detached exclusive session can take the thread back.
	re := driver.Binding{Thread: "t1", Instance: "a", CredentialID: "c1"}
	if r := e.acquire(pid, re); r.Err() != nil || r.Outcome != provider.Attached {
		t.Fatalf("re-attach = %+v, want Attached", r)
	}
	got, err = e.record("ps_1")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.Threads, []string{"t1"}) || !slices.Equal(got.Credentials, []string{"c1"}) {
		t.Errorf("record after re-attach = %+v, want threads [t1], credentials [c1]", got)
	}
}

func TestCloseSession(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.clock.Advance(time.Minute)

	res := actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})
	if res.Err() != nil {
		t.Fatalf("CloseSession(ps_1) = %v", res.Err())
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
		State: memdb.SessionClosed, Opened: actortest.T0, Closed: actortest.T0.Add(time.Minute), CloseReason: provider.ReasonReleased,
	}
	if diff := cmp.Diff(*want, res.Session); diff != "" {
		t.Errorf("CloseSession result (-want +got):\n%s", diff)
	}
	if _, err := e.record("ps_1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ProviderSession(ps_1) after close = %v, want ErrNotFound", err)
	}
	s := e.inproc.Session("ps_1")
	eventually(t, "the driver session is closed", s.Closed)

	evs := e.waitEvents(1)
	wantEv := []*provider.SessionClosed{{Session: *want, Reason: provider.ReasonReleased}}
	if diff := cmp.Diff(wantEv, evs, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("SessionClosed events (-want +got):\n%s", diff)
	}

	again := actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})
	if !errors.Is(again.Err(), fault.ErrUnknownProviderSession) {
		t.Errorf("second CloseSession(ps_1) = %v, want ErrUnknownProviderSession", again.Err())
	}
}

func TestKillReportsDied(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.mustOpen(pid, "ps_2", binding("t2", "c2"))

	boom := errors.New("process exited")
	e.inproc.Session("ps_1").Kill(boom)

	evs := e.waitEvents(1)
	ev := evs[0]
	if ev.Reason != provider.ReasonDied || ev.Cause != boom.Error() || ev.Session.ID != "ps_1" {
		t.Errorf("event = %+v, want ps_1 died with %v", ev, boom)
	}
	if diff := cmp.Diff([]string{"c1"}, ev.Session.Credentials); diff != "" {
		t.Errorf("died session credentials (-want +got):\n%s", diff)
	}
	eventually(t, "the record of ps_1 is removed", func() bool {
		_, err := e.record("ps_1")
		return errors.Is(err, memdb.ErrNotFound)
	})
	eventually(t, "the dead driver session is closed", e.inproc.Session("ps_1").Closed)
	got := e.sessions(pid)
	if len(got) != 1 || got[0].ID != "ps_2" {
		t.Errorf("GetSessions after death = %+v, want only ps_2", got)
	}
	if e.inproc.Session("ps_2").Closed() {
		t.Error("the other session was closed")
	}
	// A second report of the same death is ignored.
	e.inproc.Session("ps_1").Kill(boom)
	e.sessions(pid)
	if n := len(e.waitEvents(1)); n != 1 {
		t.Errorf("%d SessionClosed events after a repeated death, want 1", n)
	}
}

func TestFailNextOpen(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	boom := errors.New("no such binary")
	e.inproc.FailNextOpen("a", boom)

	res := e.open(pid, "ps_1", binding("t1", "c1"))
	if !actortest.OpenFailed(res.Err(), boom) {
		t.Fatalf("OpenSession after FailNextOpen = %+v, want %v", res, boom)
	}
	if _, err := e.record("ps_1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ProviderSession(ps_1) after a failed open = %v, want ErrNotFound", err)
	}
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions after a failed open = %+v, want none", got)
	}
	// The failure is one-shot, and the failed id can be used again once the
	// instance has reaped the failed session actor; until then an open of
	// that id is refused as unavailable (never a new actor that the old
	// one's Terminated would be taken for).
	var retry *provider.OpenSessionResult
	eventually(t, "the failed id opens again", func() bool {
		retry = e.open(pid, "ps_1", binding("t1", "c1"))
		if err := retry.Err(); err != nil && !errors.Is(err, fault.ErrUnavailable) {
			t.Fatalf("OpenSession(ps_1) while the failed one stops = %v, want ErrUnavailable or success", err)
		}
		return retry.Err() == nil
	})
	if retry.SessionID != "ps_1" {
		t.Errorf("retry session = %q, want ps_1", retry.SessionID)
	}
	// The session opened is kept: the failed actor's late Terminated did not
	// close it.
	if got := e.sessions(pid); len(got) != 1 || got[0].ID != "ps_1" || got[0].State != memdb.SessionOpen {
		t.Errorf("GetSessions after the retry = %+v, want ps_1 open", got)
	}
}

func TestFailedMultiThreadOpenFailsQueuedAttach(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", json.RawMessage(`{"multiThread":true}`))
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: make(chan string, 4), OpenGate: gate})
	boom := errors.New("handshake failed")
	e.inproc.FailNextOpen("a", boom)

	f1 := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	f2 := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_2", Binding: binding("t2", "c2")}, actortest.Timeout)
	e.sessions(pid) // the second open is queued on the opening session
	close(gate)
	// The queued attach (open 2) and the failed open itself (open 1) are
	// both answered with the driver's error.
	for _, f := range []*actor.Future{f2, f1} {
		res, err := f.Result()
		if err != nil {
			t.Errorf("open request to %s: %v", f.PID().Id, err)
			continue
		}
		if r := res.(*provider.OpenSessionResult); !actortest.OpenFailed(r.Err(), boom) {
			t.Errorf("open = %+v, want %v", r, boom)
		}
	}
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions = %+v, want none", got)
	}
}

func TestCloseAll(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	ids := []string{"ps_1", "ps_2", "ps_3"}
	for i, id := range ids {
		n := strconv.Itoa(i + 1)
		e.mustOpen(pid, id, binding("t"+n, "c"+n))
	}

	res := actortest.Ask[*provider.CloseAllResult](t, e.root, pid, &provider.CloseAll{Reason: provider.ReasonShutdown})
	var closed []string
	for _, s := range res.Sessions {
		closed = append(closed, s.ID)
		if s.State != memdb.SessionClosed || s.CloseReason != provider.ReasonShutdown {
			t.Errorf("closed record %+v, want state closed, reason shutdown", s)
		}
	}
	if diff := cmp.Diff(ids, closed); diff != "" {
		t.Errorf("CloseAll sessions (-want +got):\n%s", diff)
	}
	// By the time CloseAll answers, every driver session is closed and every
	// session actor has stopped.
	for _, id := range ids {
		if !e.inproc.Session(id).Closed() {
			t.Errorf("driver session %s not closed when CloseAll answered", id)
		}
		if _, ok := e.sys.ProcessRegistry.GetLocal("provider/a/" + id); ok {
			t.Errorf("session actor %s still registered when CloseAll answered", id)
		}
	}
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions after CloseAll = %+v, want none", got)
	}
	if n := len(e.waitEvents(3)); n != 3 {
		t.Errorf("%d SessionClosed events, want 3", n)
	}
	if r := e.open(pid, "ps_4", binding("t4", "c4")); !errors.Is(r.Err(), fault.ErrInstanceStopping) {
		t.Errorf("OpenSession after CloseAll = %v, want ErrInstanceStopping", r.Err())
	}
	// Nothing left: answered at once.
	if r := actortest.Ask[*provider.CloseAllResult](t, e.root, pid, &provider.CloseAll{Reason: provider.ReasonShutdown}); len(r.Sessions) != 0 {
		t.Errorf("second CloseAll sessions = %+v, want none", r.Sessions)
	}
}

func TestCloseAllWaitsForDriverClose(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: make(chan string, 4), CloseGate: gate})
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.mustOpen(pid, "ps_2", binding("t2", "c2"))

	// A protoactor future wakes a single waiter, so only this goroutine
	// waits on it.
	f := e.root.RequestFuture(pid, &provider.CloseAll{Reason: provider.ReasonShutdown}, actortest.Timeout)
	type result struct {
		res any
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.Result()
		done <- result{res, err}
	}()
	// The barrier is answered after CloseAll was handled: the driver Close
	// calls are blocked, so CloseAll must not have answered.
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions during CloseAll = %+v, want none (records removed)", got)
	}
	select {
	case <-done:
		t.Fatal("CloseAll answered while driver Close calls were still running")
	default:
	}
	close(gate)
	r := <-done
	if r.err != nil {
		t.Fatalf("CloseAll: %v", r.err)
	}
	if n := len(r.res.(*provider.CloseAllResult).Sessions); n != 2 {
		t.Errorf("CloseAll closed %d sessions, want 2", n)
	}
	for _, id := range []string{"ps_1", "ps_2"} {
		if !e.inproc.Session(id).Closed() {
			t.Errorf("driver session %s not closed when CloseAll answered", id)
		}
	}
}

// TestReceiveNeverBlocksOnDriver: while a driver Open is stuck, the
// instance actor keeps answering.
func TestReceiveNeverBlocksOnDriver(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	opening := make(chan string, 4)
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: opening, OpenGate: gate})

	f := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	if id := <-opening; id != "ps_1" {
		t.Fatalf("driver opening %q, want ps_1", id)
	}
	// Open is blocked inside the driver right now.
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions while opening = %+v, want none", got)
	}
	if r := actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"}); len(r.Sessions) != 0 {
		t.Errorf("DetachThread while opening = %v, want none", r.Sessions)
	}
	close(gate)
	res, err := f.Result()
	if err != nil {
		t.Fatal(err)
	}
	if r := res.(*provider.OpenSessionResult); r.Err() != nil || r.SessionID != "ps_1" {
		t.Fatalf("OpenSession = %+v, want ps_1", r)
	}
	if got := e.sessions(pid); len(got) != 1 {
		t.Errorf("GetSessions after open = %+v, want ps_1", got)
	}
}

func TestOpenBoundedByOpTimeout(t *testing.T) {
	e := newEnv(t)
	e.opTimeout = 50 * time.Millisecond
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.spawn("a", &providertest.Gated{Inner: inner, OpenGate: make(chan struct{})}) // never opens

	res := e.open(pid, "ps_1", binding("t1", "c1"))
	if !actortest.OpenFailed(res.Err(), context.DeadlineExceeded) {
		t.Fatalf("OpenSession on a stuck driver = %+v, want DeadlineExceeded", res)
	}
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions = %+v, want none", got)
	}
}

// TestCloseSessionWhileOpening: a session closed before its open finished
// is closed once it has opened, and its open is answered with
// ErrUnknownProviderSession.
func TestCloseSessionWhileOpening(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	opening := make(chan string, 4)
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: opening, OpenGate: gate})

	fOpen := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	<-opening
	fClose := e.root.RequestFuture(pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonAborted}, actortest.Timeout)
	e.sessions(pid) // CloseSession was handled while Open is blocked

	// Force the interleaving in which the session actor's Terminated (a
	// system message) reaches the instance actor before the report that
	// the open succeeded: hold the instance actor's user messages until the
	// session actor has opened, closed and stopped.
	suspend(t, e.sys, pid)
	close(gate)
	eventually(t, "the session actor stopped", func() bool {
		_, ok := e.sys.ProcessRegistry.GetLocal("provider/a/ps_1")
		return !ok
	})
	resume(t, e.sys, pid)

	res, err := fOpen.Result()
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	if r := res.(*provider.OpenSessionResult); !errors.Is(r.Err(), fault.ErrUnknownProviderSession) {
		t.Errorf("OpenSession of an aborted session = %+v, want ErrUnknownProviderSession", r)
	}
	res, err = fClose.Result()
	if err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	closed := res.(*provider.CloseSessionResult)
	if closed.Err() != nil {
		t.Fatalf("CloseSession while opening = %v", closed.Err())
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
		State: memdb.SessionClosed, Closed: actortest.T0, CloseReason: provider.ReasonAborted,
	}
	if diff := cmp.Diff(*want, closed.Session); diff != "" {
		t.Errorf("closed record (-want +got):\n%s", diff)
	}
	eventually(t, "the aborted driver session is closed", func() bool {
		s := e.inproc.Session("ps_1")
		return s != nil && s.Closed()
	})
	if _, err := e.record("ps_1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ProviderSession(ps_1) = %v, want ErrNotFound", err)
	}
	evs := e.waitEvents(1)
	if diff := cmp.Diff([]*provider.SessionClosed{{Session: *want, Reason: provider.ReasonAborted}}, evs, cmpopts.EquateErrors()); diff != "" {
		t.Errorf("SessionClosed events (-want +got):\n%s", diff)
	}
}

// TestCloseSessionWhileOpeningThenOpenFails: CloseSession's reply carries
// the record as it was at close (what the session was handed), even when
// the open it interrupted then fails.
func TestCloseSessionWhileOpeningThenOpenFails(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	opening := make(chan string, 4)
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: opening, OpenGate: gate})
	boom := errors.New("handshake failed")
	e.inproc.FailNextOpen("a", boom)

	fOpen := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	<-opening
	fClose := e.root.RequestFuture(pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonAborted}, actortest.Timeout)
	e.sessions(pid) // CloseSession was handled while Open is blocked
	close(gate)

	res, err := fOpen.Result()
	if err != nil {
		t.Fatalf("OpenSession: %v", err)
	}
	if r := res.(*provider.OpenSessionResult); r.Err() == nil {
		t.Errorf("OpenSession = %+v, want an error", r)
	}
	res, err = fClose.Result()
	if err != nil {
		t.Fatalf("CloseSession: %v", err)
	}
	closed := res.(*provider.CloseSessionResult)
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
		State: memdb.SessionClosed, Closed: actortest.T0, CloseReason: provider.ReasonAborted,
	}
	if diff := cmp.Diff(*want, closed.Session); closed.Err() != nil || diff != "" {
		t.Errorf("CloseSession = %v, record (-want +got):\n%s", closed.Err(), diff)
	}
}

func TestRegistry(t *testing.T) {
	var in providertest.Inproc
	bad := errors.New("bad config")
	var r driver.Registry
	if got := r.Kinds(); len(got) != 0 {
		t.Errorf("empty registry Kinds() = %v, want none", got)
	}
	r.Register(driver.InprocKind, in.Factory())
	r.Register("broken", func(string, json.RawMessage) (driver.Driver, error) { return nil, bad })
	r.Register("exec", in.Factory())

	if diff := cmp.Diff([]string{"broken", "exec", driver.InprocKind}, r.Kinds()); diff != "" {
		t.Errorf("Kinds() (-want +got):\n%s", diff)
	}
	tests := []struct {
		name      string
		kind      string
		config    json.RawMessage
		wantErr   error
		wantMulti bool
	}{
		{name: "inproc", kind: driver.InprocKind},
		{name: "inproc multi-thread", kind: driver.InprocKind, config: json.RawMessage(`{"multiThread":true}`), wantMulti: true},
		{name: "unknown kind", kind: "docker", wantErr: driver.ErrUnknownDriver},
		{name: "factory error", kind: "broken", wantErr: bad},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			d, err := r.Build(test.kind, "a", test.config)
			if !errors.Is(err, test.wantErr) {
				t.Fatalf("Build(%q) = %v, want %v", test.kind, err, test.wantErr)
			}
			if err == nil && d.MultiThread() != test.wantMulti {
				t.Errorf("Build(%q).MultiThread() = %v, want %v", test.kind, d.MultiThread(), test.wantMulti)
			}
		})
	}
	// Registering a name again replaces it.
	r.Register("broken", in.Factory())
	if _, err := r.Build("broken", "a", nil); err != nil {
		t.Errorf("Build(broken) after re-register = %v, want nil", err)
	}
}

func TestInprocConfig(t *testing.T) {
	tests := []struct {
		name      string
		config    string
		wantErr   bool
		wantMulti bool
	}{
		{name: "empty", config: ""},
		{name: "null", config: "null"},
		{name: "empty object", config: "{}"},
		{name: "multi-thread", config: `{"multiThread":true}`, wantMulti: true},
		{name: "unknown field", config: `{"multiThread":true,"cmd":"x"}`, wantErr: true},
		{name: "misspelled field", config: `{"multithreaded":true}`, wantErr: true},
		{name: "wrong type", config: `{"multiThread":"yes"}`, wantErr: true},
		{name: "not an object", config: `[1]`, wantErr: true},
	}
	var in providertest.Inproc
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			d, err := in.Factory()("a", json.RawMessage(test.config))
			if (err != nil) != test.wantErr {
				t.Fatalf("inproc factory(%q) = %v, want error %v", test.config, err, test.wantErr)
			}
			if err == nil && d.MultiThread() != test.wantMulti {
				t.Errorf("inproc factory(%q).MultiThread() = %v, want %v", test.config, d.MultiThread(), test.wantMulti)
			}
		})
	}
}

// releaseIdle asks pid to release its idle sessions and returns the ids
// of the records it answered with.
func (e *env) releaseIdle(pid *actor.PID) ([]string, []memdb.ProviderSession) {
	e.t.Helper()
	res := actortest.Ask[*provider.ReleaseIdleResult](e.t, e.root, pid, &provider.ReleaseIdle{})
	var ids []string
	for _, s := range res.Sessions {
		ids = append(ids, s.ID)
	}
	return ids, res.Sessions
}

// wantReleased requires that ReleaseIdle releases exactly ids.
func (e *env) wantReleased(what string, pid *actor.PID, ids ...string) {
	e.t.Helper()
	got, _ := e.releaseIdle(pid)
	if !slices.Equal(got, ids) {
		e.t.Fatalf("%s: ReleaseIdle released %v, want %v", what, got, ids)
	}
}

// putThread writes a thread row, as the thread actor would.
func (e *env) putThread(th *memdb.Thread) {
	e.t.Helper()
	if th.Status == "" {
		th.Status = memdb.ThreadActive
	}
	if err := e.store.Write(func(w *memdb.Writer) error { return w.PutThread(th) }); err != nil {
		e.t.Fatalf("PutThread(%s) = %v", th.ID, err)
	}
}

// providerEvents returns every provider event published so far.
func (e *env) providerEvents() []provider.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.allEvents)
}

func TestReleaseIdle(t *testing.T) {
	e := newEnv(t)
	e.idleRelease = time.Minute
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.clock.Advance(30 * time.Second)
	e.mustOpen(pid, "ps_2", binding("t2", "c2"))

	e.clock.Advance(29 * time.Second)
	e.wantReleased("ps_1 idle for 59s", pid)

	e.clock.Advance(time.Second)
	ids, recs := e.releaseIdle(pid)
	if !slices.Equal(ids, []string{"ps_1"}) {
		t.Fatalf("ReleaseIdle after a minute released %v, want [ps_1]", ids)
	}
	want := &memdb.ProviderSession{
		ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
		State: memdb.SessionClosed, Opened: actortest.T0, Closed: actortest.T0.Add(time.Minute), CloseReason: provider.ReasonIdle,
	}
	if diff := cmp.Diff([]memdb.ProviderSession{*want}, recs); diff != "" {
		t.Errorf("ReleaseIdle records (-want +got):\n%s", diff)
	}
	if _, err := e.record("ps_1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("ProviderSession(ps_1) after idle release = %v, want ErrNotFound", err)
	}
	eventually(t, "the idle driver session is closed", e.inproc.Session("ps_1").Closed)
	if diff := cmp.Diff([]*provider.SessionClosed{{Session: *want, Reason: provider.ReasonIdle}}, e.waitEvents(1), cmpopts.EquateErrors()); diff != "" {
		t.Errorf("SessionClosed events (-want +got):\n%s", diff)
	}
	if got := e.sessions(pid); len(got) != 1 || got[0].ID != "ps_2" {
		t.Errorf("GetSessions = %+v, want only ps_2", got)
	}
	if e.inproc.Session("ps_2").Closed() {
		t.Error("the younger session was closed")
	}

	e.clock.Advance(30 * time.Second)
	e.wantReleased("ps_2 idle for a minute", pid, "ps_2")
	e.wantReleased("nothing open", pid)
}

// TestReleaseIdleThreadRows: idleness counts from the session's own
// activity or its threads' last turns, whichever is later, and a run of
// this instance on one of its threads defers release.
func TestReleaseIdleThreadRows(t *testing.T) {
	tests := []struct {
		name    string
		thread  *memdb.Thread // written after the open at t0; nil: none
		advance time.Duration
		want    bool // released
	}{
		{name: "no thread row, a minute", advance: time.Minute, want: true},
		{name: "no thread row, 59s", advance: 59 * time.Second},
		{name: "turn before the open", thread: &memdb.Thread{ID: "t1", LastTurn: actortest.T0.Add(-time.Hour)}, advance: time.Minute, want: true},
		{name: "turn 50s after the open, 100s", thread: &memdb.Thread{ID: "t1", LastTurn: actortest.T0.Add(50 * time.Second)}, advance: 100 * time.Second},
		{name: "turn 50s after the open, 110s", thread: &memdb.Thread{ID: "t1", LastTurn: actortest.T0.Add(50 * time.Second)}, advance: 110 * time.Second, want: true},
		{name: "run of this instance", thread: &memdb.Thread{ID: "t1", Run: &memdb.Run{ID: "run_1", Instance: "a", Started: actortest.T0}, LastTurn: actortest.T0}, advance: 1000 * time.Hour},
		{name: "run of another instance", thread: &memdb.Thread{ID: "t1", Run: &memdb.Run{ID: "run_1", Instance: "b", Started: actortest.T0}, LastTurn: actortest.T0}, advance: time.Minute, want: true},
		{name: "another thread's run", thread: &memdb.Thread{ID: "t9", Run: &memdb.Run{ID: "run_1", Instance: "a", Started: actortest.T0}, LastTurn: actortest.T0.Add(time.Hour)}, advance: time.Minute, want: true},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			e.idleRelease = time.Minute
			pid := e.spawnInproc("a", nil)
			e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			if test.thread != nil {
				e.putThread(test.thread)
			}
			e.clock.Advance(test.advance)
			var want []string
			if test.want {
				want = []string{"ps_1"}
			}
			e.wantReleased("after "+test.advance.String(), pid, want...)
		})
	}
}

// TestReleaseIdleRunEnds: a session deferred by a run is released a full
// IdleRelease after the run ended (LastTurn), not at once.
func TestReleaseIdleRunEnds(t *testing.T) {
	e := newEnv(t)
	e.idleRelease = time.Minute
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.putThread(&memdb.Thread{ID: "t1", Run: &memdb.Run{ID: "run_1", Instance: "a", Started: actortest.T0}, LastTurn: actortest.T0})
	e.clock.Advance(time.Hour)
	e.wantReleased("run in flight", pid)

	e.putThread(&memdb.Thread{ID: "t1", LastTurn: e.clock.Now()}) // the run ends
	e.clock.Advance(59 * time.Second)
	e.wantReleased("59s after the run ended", pid)
	e.clock.Advance(time.Second)
	e.wantReleased("a minute after the run ended", pid, "ps_1")
}

// TestReleaseIdleAttachDetach: attaching or detaching a thread is activity
// of the session; a detached thread's turns no longer count, and a session
// serving no thread still idles.
func TestReleaseIdleAttachDetach(t *testing.T) {
	e := newEnv(t)
	e.idleRelease = time.Minute
	pid := e.spawnInproc("a", json.RawMessage(`{"multiThread":true}`))
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))

	e.clock.Advance(40 * time.Second)
	e.mustOpen(pid, "ps_x", binding("t2", "c2")) // attaches t2 to ps_1 at +40s
	e.clock.Advance(40 * time.Second)
	e.wantReleased("40s after the attach", pid)

	// t2 detaches at +80s and has a turn at +130s, which no longer counts.
	actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t2"})
	e.clock.Advance(50 * time.Second)
	e.putThread(&memdb.Thread{ID: "t2", LastTurn: e.clock.Now()})
	e.clock.Advance(9 * time.Second)
	e.wantReleased("59s after the detach", pid)
	e.clock.Advance(time.Second)
	e.wantReleased("a minute after the detach, 10s after a detached thread's turn", pid, "ps_1")

	// A session whose every thread detached still idles, and its record
	// keeps the credentials the detach left live.
	e.mustOpen(pid, "ps_2", binding("t3", "c3"))
	actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t3"})
	e.clock.Advance(59 * time.Second)
	e.wantReleased("59s after the last detach", pid)
	e.clock.Advance(time.Second)
	_, recs := e.releaseIdle(pid)
	if len(recs) != 1 || recs[0].ID != "ps_2" || len(recs[0].Threads) != 0 || !slices.Equal(recs[0].Credentials, []string{"c3"}) {
		t.Fatalf("ReleaseIdle of the detached session = %+v, want ps_2 with no thread and credentials [c3]", recs)
	}
}

// TestReleaseIdleSkipsOpening: a session still opening is not idle, and
// its idle clock starts when its open completes.
func TestReleaseIdleSkipsOpening(t *testing.T) {
	e := newEnv(t)
	e.idleRelease = time.Minute
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	opening := make(chan string, 1)
	gate := make(chan struct{})
	pid := e.spawn("a", &providertest.Gated{Inner: inner, Opening: opening, OpenGate: gate})
	f := e.root.RequestFuture(pid, &provider.OpenSession{SessionID: "ps_1", Binding: binding("t1", "c1")}, actortest.Timeout)
	<-opening
	e.clock.Advance(time.Hour)
	e.wantReleased("while opening", pid)
	close(gate)
	if res, err := f.Result(); err != nil || res.(*provider.OpenSessionResult).Err() != nil {
		t.Fatalf("OpenSession = %v, %v", res, err)
	}
	e.clock.Advance(59 * time.Second)
	e.wantReleased("59s after the open completed", pid)
	e.clock.Advance(time.Second)
	e.wantReleased("a minute after the open completed", pid, "ps_1")
}

// TestReleaseIdleNever: IdleRelease zero or negative never releases.
func TestReleaseIdleNever(t *testing.T) {
	for _, d := range []time.Duration{0, -1} {
		t.Run(d.String(), func(t *testing.T) {
			e := newEnv(t)
			e.idleRelease = d
			pid := e.spawnInproc("a", nil)
			e.mustOpen(pid, "ps_1", binding("t1", "c1"))
			e.clock.Advance(1000 * time.Hour)
			e.wantReleased("after 1000h", pid)
			if got := e.sessions(pid); len(got) != 1 {
				t.Fatalf("GetSessions = %+v, want ps_1", got)
			}
		})
	}
}

// TestIdleTimer: the instance releases idle sessions on its own timer (it
// ticks in real time, measures with cfg.Now), and re-arms it for sessions
// opened after it went quiet.
func TestIdleTimer(t *testing.T) {
	e := newEnv(t)
	e.idleRelease = 20 * time.Millisecond
	pid := e.spawnInproc("a", nil)

	for i, id := range []string{"ps_1", "ps_2"} {
		e.mustOpen(pid, id, binding("t"+id, "c"+id))
		e.clock.Advance(20 * time.Millisecond)
		evs := e.waitEvents(i + 1)
		if ev := evs[i]; ev.Session.ID != id || ev.Reason != provider.ReasonIdle {
			t.Fatalf("event %d = %s closed (%s), want %s idle", i, ev.Session.ID, ev.Reason, id)
		}
		eventually(t, id+" closed by the driver", e.inproc.Session(id).Closed)
	}
	if got := e.sessions(pid); len(got) != 0 {
		t.Fatalf("GetSessions = %+v, want none", got)
	}
}

// TestSessionEvents: an exclusive session's life as events, in order:
// opened, detached, re-attached with the credential it holds, re-bound
// after a rotation, closed.
func TestSessionEvents(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", nil)
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	actortest.Ask[*provider.DetachThreadResult](t, e.root, pid, &provider.DetachThread{Thread: "t1"})
	re := driver.Binding{Thread: "t1", Instance: "a", CredentialID: "c1"}
	if r := e.acquire(pid, re); r.Err() != nil || r.Outcome != provider.Attached {
		t.Fatalf("re-attach = %+v", r)
	}
	if r := e.rebind(pid, binding("t1", "c2"), "c1"); r.Err() != nil || len(r.Sessions) != 1 {
		t.Fatalf("rebind = %+v", r)
	}
	// A refused attach and a failed open publish nothing.
	if r := e.acquire(pid, binding("t2", "c2")); r.Err() != nil || r.Outcome != provider.NeedsCredential {
		t.Fatalf("acquire for another thread = %+v, want NeedsCredential", r)
	}
	e.inproc.FailNextOpen("a", errors.New("boom"))
	if r := e.open(pid, "ps_2", binding("t2", "c3")); r.Err() == nil {
		t.Fatal("open after FailNextOpen succeeded")
	}
	e.clock.Advance(time.Minute)
	actortest.Ask[*provider.CloseSessionResult](t, e.root, pid, &provider.CloseSession{SessionID: "ps_1", Reason: provider.ReasonReleased})

	want := []provider.Event{
		&provider.SessionOpened{Session: memdb.ProviderSession{
			ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c1"},
			State: memdb.SessionOpen, Opened: actortest.T0,
		}},
		&provider.ThreadDetached{Instance: "a", SessionID: "ps_1", Thread: "t1"},
		&provider.ThreadAttached{Instance: "a", SessionID: "ps_1", Thread: "t1", CredentialID: "c1"},
		&provider.ThreadAttached{Instance: "a", SessionID: "ps_1", Thread: "t1", CredentialID: "c2"},
		&provider.SessionClosed{Session: memdb.ProviderSession{
			ID: "ps_1", Instance: "a", Threads: []string{"t1"}, Credentials: []string{"c2"},
			State: memdb.SessionClosed, Opened: actortest.T0, Closed: actortest.T0.Add(time.Minute), CloseReason: provider.ReasonReleased,
		}, Reason: provider.ReasonReleased},
	}
	if diff := cmp.Diff(want, e.providerEvents(), cmpopts.EquateErrors()); diff != "" {
		t.Errorf("provider events (-want +got):\n%s", diff)
	}
}

// TestSessionEventsMultiThread: an open that joins a multi-thread session
// publishes ThreadAttached, not SessionOpened; a death publishes
// SessionClosed with the driver's error.
func TestSessionEventsMultiThread(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnInproc("a", json.RawMessage(`{"multiThread":true}`))
	e.mustOpen(pid, "ps_1", binding("t1", "c1"))
	e.mustOpen(pid, "ps_x", binding("t2", "c2"))
	boom := errors.New("process exited")
	e.inproc.Session("ps_1").Kill(boom)
	e.waitEvents(1)

	want := []provider.Event{
		&provider.SessionOpened{Session: memdb.ProviderSession{
			ID: "ps_1", Instance: "a", MultiThread: true, Threads: []string{"t1"}, Credentials: []string{"c1"},
			State: memdb.SessionOpen, Opened: actortest.T0,
		}},
		&provider.ThreadAttached{Instance: "a", SessionID: "ps_1", Thread: "t2", CredentialID: "c2"},
		&provider.SessionClosed{Session: memdb.ProviderSession{
			ID: "ps_1", Instance: "a", MultiThread: true, Threads: []string{"t1", "t2"}, Credentials: []string{"c1", "c2"},
			State: memdb.SessionClosed, Opened: actortest.T0, Closed: actortest.T0, CloseReason: provider.ReasonDied,
		}, Reason: provider.ReasonDied, Cause: boom.Error()},
	}
	if diff := cmp.Diff(want, e.providerEvents(), cmpopts.EquateErrors()); diff != "" {
		t.Errorf("provider events (-want +got):\n%s", diff)
	}
}

// diesInOpenDriver opens sessions that report their death before Open
// returns: a process that exits just after the driver's startup check.
type diesInOpenDriver struct{ driver.Driver }

func (d diesInOpenDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err == nil {
		req.Events.Died(errors.New("process exited: exit status 1"))
	}
	return s, err
}

// TestDiedWhileOpening: a session that dies before its open is answered
// fails the open as an open failure, as if the driver's Open had failed:
// the requester never saw a session, so "unknown provider session" would
// tell it nothing. The session is closed and nothing is left.
func TestDiedWhileOpening(t *testing.T) {
	e := newEnv(t)
	inner, err := e.inproc.Factory()("a", nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := e.spawn("a", diesInOpenDriver{inner})
	res := e.open(pid, "ps_1", binding("t1", "c1"))
	if !errors.Is(res.Err(), driver.ErrOpenFailed) {
		t.Errorf("OpenSession of a session that died while opening = %+v, want driver.ErrOpenFailed", res)
	}
	eventually(t, "the driver session is closed", e.inproc.Session("ps_1").Closed)
	if got := e.sessions(pid); len(got) != 0 {
		t.Errorf("GetSessions = %+v, want none", got)
	}
	for _, ev := range e.providerEvents() {
		if c, ok := ev.(*provider.SessionClosed); ok && c.Reason != provider.ReasonDied {
			t.Errorf("SessionClosed of %s, reason %s; want none or reason died", c.Session.ID, c.Reason)
		}
	}
}

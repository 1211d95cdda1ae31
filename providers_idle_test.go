package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/memdb"
)

// providerEvents records the provider events of a runtime. Safe for
// concurrent use.
type providerEvents struct {
	mu  sync.Mutex // guards evs
	evs []provider.Event
}

func subscribeProviderEvents(t *testing.T, rt *mcpruntime.Runtime) *providerEvents {
	t.Helper()
	pe := &providerEvents{}
	unsubscribe := rt.SubscribeProviderEvents(func(e provider.Event) {
		pe.mu.Lock()
		pe.evs = append(pe.evs, e)
		pe.mu.Unlock()
	})
	t.Cleanup(unsubscribe)
	return pe
}

func (pe *providerEvents) all() []provider.Event {
	pe.mu.Lock()
	defer pe.mu.Unlock()
	return slices.Clone(pe.evs)
}

// closed returns the SessionClosed events of session.
func (pe *providerEvents) closed(session string) []*provider.SessionClosed {
	var out []*provider.SessionClosed
	for _, e := range pe.all() {
		if c, ok := e.(*provider.SessionClosed); ok && c.Session.ID == session {
			out = append(out, c)
		}
	}
	return out
}

// waitClosed waits for the SessionClosed event of session and returns it.
func (pe *providerEvents) waitClosed(t *testing.T, session string) *provider.SessionClosed {
	t.Helper()
	waitUntil(t, "SessionClosed of "+session, func() bool { return len(pe.closed(session)) > 0 })
	evs := pe.closed(session)
	if len(evs) != 1 {
		t.Fatalf("%d SessionClosed events of %s, want 1: %v", len(evs), session, evs)
	}
	return evs[0]
}

// idleRuntime is a quiet runtime on a fake clock that releases provider
// sessions after a minute without a turn. Instance timers tick every 15 s
// of real time, longer than any of these tests, so only
// ReleaseIdleProviderSessions releases.
func idleRuntime(t *testing.T) (*mcpruntime.Runtime, *fakeClock) {
	t.Helper()
	clk := newFakeClock()
	return quietRuntime(t, mcpruntime.Config{Now: clk.Now, ProviderIdle: time.Minute}), clk
}

// releaseIdle calls ReleaseIdleProviderSessions and requires it to release
// exactly want.
func releaseIdle(t *testing.T, rt *mcpruntime.Runtime, what string, want ...string) {
	t.Helper()
	got, err := rt.ReleaseIdleProviderSessions(context.Background())
	if err != nil {
		t.Fatalf("%s: ReleaseIdleProviderSessions = %v", what, err)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("%s: ReleaseIdleProviderSessions released %v, want %v", what, got, want)
	}
}

// wantIdleClosed requires that session was released for idleness: its
// record is gone, its driver session closed, one SessionClosed event with
// reason idle and no error.
func wantIdleClosed(t *testing.T, rt *mcpruntime.Runtime, evs *providerEvents, session string) {
	t.Helper()
	ev := evs.waitClosed(t, session)
	if _, err := rt.ProviderSession(session); !errors.Is(err, mcpruntime.ErrUnknownProviderSession) {
		t.Fatalf("session %s after idle release: ProviderSession = %v, want ErrUnknownProviderSession", session, err)
	}
	if ev.Reason != provider.ReasonIdle || ev.Cause != "" || ev.Session.CloseReason != provider.ReasonIdle {
		t.Fatalf("SessionClosed of %s = reason %q, cause %q, record reason %q; want %q, none", session, ev.Reason, ev.Cause, ev.Session.CloseReason, provider.ReasonIdle)
	}
	s := inprocOf(rt).Session(session)
	waitUntil(t, "driver session "+session+" closed", s.Closed)
}

// wantOpen requires that session is still open.
func wantOpen(t *testing.T, rt *mcpruntime.Runtime, evs *providerEvents, what, session string) {
	t.Helper()
	if rec, err := rt.ProviderSession(session); err != nil {
		t.Fatalf("%s: session %s = %+v, %v; want open", what, session, rec, err)
	}
	if evs != nil && len(evs.closed(session)) != 0 {
		t.Fatalf("%s: session %s reported closed", what, session)
	}
	if inprocOf(rt).Session(session).Closed() {
		t.Fatalf("%s: driver session %s closed", what, session)
	}
}

// TestProviderIdleRelease: a session with no turn for ProviderIdle is
// released and its credential revoked by the time
// ReleaseIdleProviderSessions returns; a younger one is not.
func TestProviderIdleRelease(t *testing.T) {
	rt, clk := idleRuntime(t)
	evs := subscribeProviderEvents(t, rt)
	registerInproc(t, rt, "I")
	createThreads(t, rt, "T1", "T2")

	ps1, tok1 := openMinted(t, rt, "T1", "I")
	clk.Advance(30 * time.Second)
	ps2, tok2 := openMinted(t, rt, "T2", "I")

	clk.Advance(29 * time.Second)
	releaseIdle(t, rt, "ps1 idle for 59s")
	wantOpen(t, rt, evs, "59s", ps1.ID)

	clk.Advance(time.Second)
	releaseIdle(t, rt, "ps1 idle for a minute, ps2 for 30s", ps1.ID)
	assertReason(t, rt, "ps1's credential", tok1, mcpruntime.AuthRevoked)
	assertLive(t, rt, "ps2's credential", tok2)
	wantIdleClosed(t, rt, evs, ps1.ID)
	wantOpen(t, rt, evs, "30s", ps2.ID)

	clk.Advance(30 * time.Second)
	releaseIdle(t, rt, "ps2 idle for a minute", ps2.ID)
	assertReason(t, rt, "ps2's credential", tok2, mcpruntime.AuthRevoked)
	wantIdleClosed(t, rt, evs, ps2.ID)
	releaseIdle(t, rt, "nothing left")

	// A released pair opens afresh.
	again, _ := openMinted(t, rt, "T1", "I")
	if again.ID == ps1.ID || again.CredentialID == ps1.CredentialID {
		t.Fatalf("re-open after idle release = %+v, want a new session and credential", again)
	}
}

// TestProviderIdleDeferredByRun: a run of the session's instance in flight
// on its thread defers release however old; a run of another instance
// does not; ending the run restarts the idle clock.
func TestProviderIdleDeferredByRun(t *testing.T) {
	ctx := context.Background()
	rt, clk := idleRuntime(t)
	evs := subscribeProviderEvents(t, rt)
	registerInproc(t, rt, "I", "J")
	createThreads(t, rt, "T")

	psI, tokI := openMinted(t, rt, "T", "I")
	_, err := rt.SwitchProvider(ctx, "T", "J")
	noErr(t, err)
	psJ, tokJ := openMinted(t, rt, "T", "J")
	run, err := rt.StartRun(ctx, "T", "J")
	noErr(t, err)

	clk.Advance(10 * time.Hour)
	releaseIdle(t, rt, "J's run in flight", psI.ID)
	wantIdleClosed(t, rt, evs, psI.ID)
	assertReason(t, rt, "I's credential", tokI, mcpruntime.AuthRevoked)
	wantOpen(t, rt, evs, "J's run in flight", psJ.ID)
	assertLive(t, rt, "J's credential during its run", tokJ)

	noErr(t, rt.EndRun(ctx, "T", run))
	clk.Advance(59 * time.Second)
	releaseIdle(t, rt, "59s after the run ended")
	clk.Advance(time.Second)
	releaseIdle(t, rt, "a minute after the run ended", psJ.ID)
	wantIdleClosed(t, rt, evs, psJ.ID)
	assertReason(t, rt, "J's credential", tokJ, mcpruntime.AuthRevoked)
}

// TestProviderIdleTurnsRestartClock: a turn (StartRun, EndRun, Touch) on
// an attached thread restarts the session's idle clock.
func TestProviderIdleTurnsRestartClock(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		turn func(t *testing.T, rt *mcpruntime.Runtime, clk *fakeClock)
	}{
		{name: "Touch", turn: func(t *testing.T, rt *mcpruntime.Runtime, clk *fakeClock) {
			noErr(t, rt.Touch(ctx, "T"))
		}},
		{name: "run started and ended", turn: func(t *testing.T, rt *mcpruntime.Runtime, clk *fakeClock) {
			// A run started and ended at once: both are turns at this time.
			run, err := rt.StartRun(ctx, "T", "I")
			noErr(t, err)
			noErr(t, rt.EndRun(ctx, "T", run))
		}},
		{name: "EndRun", turn: func(t *testing.T, rt *mcpruntime.Runtime, clk *fakeClock) {
			// The run started long ago (it deferred release while it ran);
			// its end is the last turn.
			run, err := rt.StartRun(ctx, "T", "I")
			noErr(t, err)
			clk.Advance(time.Hour)
			releaseIdle(t, rt, "run in flight")
			noErr(t, rt.EndRun(ctx, "T", run))
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt, clk := idleRuntime(t)
			evs := subscribeProviderEvents(t, rt)
			registerInproc(t, rt, "I")
			createThreads(t, rt, "T")
			ps, tok := openMinted(t, rt, "T", "I")

			clk.Advance(50 * time.Second)
			test.turn(t, rt, clk)
			clk.Advance(50 * time.Second)
			releaseIdle(t, rt, "50s after the turn")
			wantOpen(t, rt, evs, "50s after the turn", ps.ID)
			clk.Advance(10 * time.Second)
			releaseIdle(t, rt, "a minute after the turn", ps.ID)
			wantIdleClosed(t, rt, evs, ps.ID)
			assertReason(t, rt, "credential", tok, mcpruntime.AuthRevoked)
		})
	}
}

// TestProviderIdleDetachedSession: a plain detach revokes nothing, but the
// detached session still idles: a minute after the detach (the thread's
// turns no longer count) it is released and the credential it kept is
// revoked, no other session holding it.
func TestProviderIdleDetachedSession(t *testing.T) {
	ctx := context.Background()
	rt, clk := idleRuntime(t)
	evs := subscribeProviderEvents(t, rt)
	registerInproc(t, rt, "I")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "I")

	clk.Advance(30 * time.Second)
	noErr(t, rt.Detach(ctx, "T"))
	assertLive(t, rt, "credential after detach", tok)
	clk.Advance(59 * time.Second)
	releaseIdle(t, rt, "59s after the detach")
	wantOpen(t, rt, evs, "59s after the detach", ps.ID)

	// A turn of the detached thread does not keep the session.
	noErr(t, rt.Touch(ctx, "T"))
	clk.Advance(time.Second)
	releaseIdle(t, rt, "a minute after the detach", ps.ID)
	wantIdleClosed(t, rt, evs, ps.ID)
	assertReason(t, rt, "credential of the released detached session", tok, mcpruntime.AuthRevoked)
}

// TestProviderIdleSharedSession is SPEC §3's "release revokes the
// credentials the session recorded, unless another live provider session
// still holds them" applied to idleness. A credential belongs to one
// (thread, instance) pair, and a multi-thread instance serves all its
// threads with one session: the open session holding an idle thread's
// credential is the one another thread keeps busy. Idleness is per
// session, never per thread, so while any attached thread has turns the
// idle thread's credential stays live, even after that thread detached
// (the detach kept it); once nobody has a turn the session and every
// credential it held go.
func TestProviderIdleSharedSession(t *testing.T) {
	ctx := context.Background()
	rt, clk := idleRuntime(t)
	evs := subscribeProviderEvents(t, rt)
	registerMulti(t, rt, "M")
	createThreads(t, rt, "T1", "T2", "T3")
	ps1, tok1 := openMinted(t, rt, "T1", "M")
	ps2, tok2 := openMinted(t, rt, "T2", "M")
	if ps2.ID != ps1.ID {
		t.Fatalf("T2's session %s, want the shared %s", ps2.ID, ps1.ID)
	}
	shared := ps1.ID

	// T1 has no turn for an hour; T2 has one every 50 s.
	for range 72 {
		clk.Advance(50 * time.Second)
		noErr(t, rt.Touch(ctx, "T2"))
		releaseIdle(t, rt, "T2 keeps turning")
	}
	wantOpen(t, rt, evs, "T2 keeps turning", shared)
	assertLive(t, rt, "idle T1's credential in the busy shared session", tok1)
	assertLive(t, rt, "T2's credential", tok2)

	// T1 detaches: its credential stays with the session, still busy.
	noErr(t, rt.Detach(ctx, "T1"))
	clk.Advance(50 * time.Second)
	noErr(t, rt.Touch(ctx, "T2"))
	clk.Advance(50 * time.Second)
	releaseIdle(t, rt, "T1 detached, T2 turning")
	assertLive(t, rt, "detached T1's credential", tok1)
	again, err := rt.OpenProviderSession(ctx, "T1", "M")
	noErr(t, err)
	if again.ID != shared || again.CredentialID != ps1.CredentialID || !again.Reused {
		t.Fatalf("T1's re-open = %+v, want the shared session %s with credential %s", again, shared, ps1.CredentialID)
	}

	// A third thread's credential is held by the same session, and the
	// session is released only when none of its threads had a turn for a
	// minute: then every credential it held is revoked.
	ps3, tok3 := openMinted(t, rt, "T3", "M")
	clk.Advance(59 * time.Second)
	releaseIdle(t, rt, "T3 attached 59s ago")
	clk.Advance(time.Second)
	releaseIdle(t, rt, "nobody turned for a minute", shared)
	wantIdleClosed(t, rt, evs, shared)
	for i, tok := range []string{tok1, tok2, tok3} {
		assertReason(t, rt, "credential of T"+string(rune('1'+i)), tok, mcpruntime.AuthRevoked)
	}
	ev := evs.closed(shared)[0]
	if diff := cmp.Diff([]string{ps1.CredentialID, ps2.CredentialID, ps3.CredentialID}, ev.Session.Credentials); diff != "" {
		t.Fatalf("closed session credentials (-want +got):\n%s", diff)
	}
}

// TestProviderIdleNoExpiry: ProviderIdle NoExpiry never releases.
func TestProviderIdleNoExpiry(t *testing.T) {
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, ProviderIdle: mcpruntime.NoExpiry, CredentialWindow: mcpruntime.NoExpiry})
	evs := subscribeProviderEvents(t, rt)
	registerInproc(t, rt, "I")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "I")

	clk.Advance(10000 * time.Hour)
	releaseIdle(t, rt, "NoExpiry")
	wantOpen(t, rt, evs, "NoExpiry", ps.ID)
	assertLive(t, rt, "credential", tok)
}

// TestProviderIdleTimer: on the real clock, the instance's own timer
// releases an idle session, and the runtime revokes its credential, with
// no call to ReleaseIdleProviderSessions.
func TestProviderIdleTimer(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{ProviderIdle: 50 * time.Millisecond})
	evs := subscribeProviderEvents(t, rt)
	registerInproc(t, rt, "I")
	createThreads(t, rt, "T1", "T2")
	ps1, tok1 := openMinted(t, rt, "T1", "I")
	wantIdleClosed(t, rt, evs, ps1.ID)
	waitDead(t, rt, "credential of the idle session", tok1)
	assertReason(t, rt, "credential of the idle session", tok1, mcpruntime.AuthRevoked)

	// The timer keeps working for sessions opened after it went quiet.
	ps2, tok2 := openMinted(t, rt, "T2", "I")
	wantIdleClosed(t, rt, evs, ps2.ID)
	waitDead(t, rt, "credential of the second idle session", tok2)
}

// TestProviderEventsInOrder: one session's lifecycle is reported as
// SessionOpened, ThreadAttached, ThreadDetached, SessionClosed, in order.
func TestProviderEventsInOrder(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now})
	evs := subscribeProviderEvents(t, rt)
	registerMulti(t, rt, "M")
	createThreads(t, rt, "T1", "T2")

	ps1, _ := openMinted(t, rt, "T1", "M")
	ps2, _ := openMinted(t, rt, "T2", "M")
	noErr(t, rt.Detach(ctx, "T2"))
	noErr(t, rt.ReleaseProviderSession(ctx, ps1.ID))

	opened := memdb.ProviderSession{
		ID: ps1.ID, Instance: "M", MultiThread: true, Threads: []string{"T1"},
		Credentials: []string{ps1.CredentialID}, State: memdb.SessionOpen, Opened: clk.Now(),
	}
	closed := memdb.ProviderSession{
		ID: ps1.ID, Instance: "M", MultiThread: true, Threads: []string{"T1"},
		Credentials: []string{ps1.CredentialID, ps2.CredentialID}, State: memdb.SessionClosed,
		Opened: clk.Now(), Closed: clk.Now(), CloseReason: provider.ReasonReleased,
	}
	want := []provider.Event{
		&provider.SessionOpened{Session: opened},
		&provider.ThreadAttached{Instance: "M", SessionID: ps1.ID, Thread: "T2", CredentialID: ps2.CredentialID},
		&provider.ThreadDetached{Instance: "M", SessionID: ps1.ID, Thread: "T2"},
		&provider.SessionClosed{Session: closed, Reason: provider.ReasonReleased},
	}
	waitUntil(t, "four provider events", func() bool { return len(evs.all()) >= len(want) })
	if diff := cmp.Diff(want, evs.all()); diff != "" {
		t.Fatalf("provider events (-want +got):\n%s", diff)
	}
}

// TestProviderDiedWhileOpening: a provider that dies before its open is
// answered (an exec agent exiting just after the startup window) fails
// OpenProviderSession with ErrProviderOpenFailed, as the exec driver's
// exit within the window does, and leaves no live credential or session.
func TestProviderDiedWhileOpening(t *testing.T) {
	ctx := context.Background()
	inproc := &providertest.Inproc{}
	rt := quietRuntime(t, mcpruntime.Config{Drivers: map[string]driver.Factory{
		"dies": func(instance string, raw json.RawMessage) (driver.Driver, error) {
			d, err := inproc.Factory()(instance, raw)
			return diesWhileOpening{d}, err
		},
	}})
	noErr(t, rt.RegisterInstance(ctx, "I", mcpruntime.InstanceSpec{Driver: "dies"}))
	createThreads(t, rt, "T")

	_, err := rt.OpenProviderSession(ctx, "T", "I")
	if !errors.Is(err, mcpruntime.ErrProviderOpenFailed) {
		t.Errorf("OpenProviderSession = %v, want ErrProviderOpenFailed", err)
	}
	waitUntil(t, "no live credential of (T, I)", func() bool { return len(liveCredentials(t, rt, time.Now(), "T", "I")) == 0 })
	if ss := rt.ProviderSessions("I"); len(ss) != 0 {
		t.Errorf("provider sessions of I = %v; want none", ss)
	}
}

// diesWhileOpening reports each session's death before its Open returns.
type diesWhileOpening struct{ driver.Driver }

func (d diesWhileOpening) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err == nil {
		req.Events.Died(errors.New("process exited: exit status 1"))
	}
	return s, err
}

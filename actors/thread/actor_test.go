package thread_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

func TestOpenProviderSessionMints(t *testing.T) {
	e := newEnv(t)
	caps := []string{"thread.read", "thread.post"}
	e.addInproc("a", "", caps...)
	pid := e.spawnThread("T", "")

	res := e.mustOpen(pid, "a")
	if res.Reused || res.Endpoint != endpoint || !slices.Equal(res.Capabilities, caps) {
		t.Errorf("OpenProviderSession = %+v, want minted, endpoint %q, capabilities %v", res, endpoint, caps)
	}
	tok := bearer(t, res.Authorization)
	want := &memdb.Credential{
		ID:           res.CredentialID,
		TokenHash:    token.Hash(tok),
		Kind:         memdb.KindProvider,
		Namespace:    "cred:" + res.CredentialID,
		Thread:       "T",
		Instance:     "a",
		Capabilities: caps,
		Issued:       actortest.T0,
		LastLive:     actortest.T0,
		Expires:      actortest.T0.Add(time.Hour),
		State:        memdb.StateLive,
	}
	if diff := cmp.Diff(want, e.cred(res.CredentialID)); diff != "" {
		t.Errorf("credential (-want +got):\n%s", diff)
	}
	if got := e.thread(pid).Instance; got != "a" {
		t.Errorf("current instance after the first open = %q, want a", got)
	}
	s := e.inproc.Session(res.SessionID)
	if s == nil {
		t.Fatalf("driver has no session %s", res.SessionID)
	}
	wantBindings := []driver.Binding{{
		Thread: "T", Instance: "a", CredentialID: res.CredentialID, Endpoint: endpoint,
		Authorization: res.Authorization, Capabilities: caps,
	}}
	if diff := cmp.Diff(wantBindings, s.Bindings()); diff != "" {
		t.Errorf("driver bindings (-want +got):\n%s", diff)
	}
	rec := e.record(res.SessionID)
	if !slices.Equal(rec.Threads, []string{"T"}) || !slices.Equal(rec.Credentials, []string{res.CredentialID}) {
		t.Errorf("provider session record = %+v, want thread T with the minted credential", rec)
	}
}

func TestOpenProviderSessionReuse(t *testing.T) {
	tests := []struct {
		name    string
		between func(e *env, pid *actor.PID) // between the two opens
		// wantReattach: the driver got a second binding, without a token.
		wantReattach bool
	}{
		{name: "session still attached", between: func(*env, *actor.PID) {}},
		{
			name: "after a plain detach",
			between: func(e *env, pid *actor.PID) {
				if r := actortest.Ask[*thread.DetachResult](e.t, e.root, pid, &thread.Detach{}); r.Err() != nil {
					e.t.Fatalf("Detach = %v", r.Err())
				}
			},
			wantReattach: true,
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			e.addInproc("a", "")
			pid := e.spawnThread("T", "")
			first := e.mustOpen(pid, "a")
			test.between(e, pid)

			again := e.mustOpen(pid, "a")
			want := &thread.OpenProviderSessionResult{
				SessionID: first.SessionID, CredentialID: first.CredentialID, Endpoint: endpoint, Reused: true,
			}
			if diff := cmp.Diff(want, again); diff != "" {
				t.Errorf("second OpenProviderSession (-want +got):\n%s", diff)
			}
			if n := len(e.inproc.Sessions("a")); n != 1 {
				t.Errorf("driver has %d sessions, want 1", n)
			}
			s := e.inproc.Session(first.SessionID)
			if diff := cmp.Diff([]string{first.Authorization}, s.Authorizations()); diff != "" {
				t.Errorf("driver authorizations (-want +got):\n%s", diff)
			}
			if n := len(s.Bindings()); (n == 2) != test.wantReattach {
				t.Errorf("driver got %d bindings, want re-attach %v", n, test.wantReattach)
			}
			if diff := cmp.Diff([]string{"T"}, s.Attached()); diff != "" {
				t.Errorf("attached (-want +got):\n%s", diff)
			}
			if n := len(e.pairCreds("T", "a")); n != 1 {
				t.Errorf("(T, a) has %d credentials, want 1", n)
			}
			if c := e.cred(first.CredentialID); c.State != memdb.StateLive {
				t.Errorf("credential state = %q, want live", c.State)
			}
		})
	}
}

func TestOpenProviderSessionMultiThread(t *testing.T) {
	e := newEnv(t)
	e.addInproc("m", `{"multiThread":true}`)
	t1, t2 := e.spawnThread("T1", ""), e.spawnThread("T2", "")

	r1, r2 := e.mustOpen(t1, "m"), e.mustOpen(t2, "m")
	if r1.SessionID != r2.SessionID {
		t.Errorf("sessions %s and %s, want one session for both threads", r1.SessionID, r2.SessionID)
	}
	if r1.CredentialID == r2.CredentialID || r1.Authorization == "" || r2.Authorization == "" {
		t.Errorf("opens = %+v, %+v; want a credential minted per thread", r1, r2)
	}
	rec := e.record(r1.SessionID)
	if !slices.Equal(rec.Threads, []string{"T1", "T2"}) || !slices.Equal(rec.Credentials, []string{r1.CredentialID, r2.CredentialID}) {
		t.Errorf("record = %+v, want both threads and credentials", rec)
	}
	// T1 leaves and comes back: the session still holds its token.
	if r := actortest.Ask[*thread.DetachResult](t, e.root, t1, &thread.Detach{}); r.Err() != nil {
		t.Fatal(r.Err())
	}
	back := e.mustOpen(t1, "m")
	if !back.Reused || back.Authorization != "" || back.SessionID != r1.SessionID || back.CredentialID != r1.CredentialID {
		t.Errorf("re-open after detach = %+v, want reuse of %s / %s", back, r1.SessionID, r1.CredentialID)
	}
}

func TestOpenProviderSessionConcurrentDuplicates(t *testing.T) {
	e := newEnv(t)
	gate := make(chan struct{})
	e.addInstance("a", &providertest.Gated{Inner: e.inprocDriver("a", ""), OpenGate: gate})
	pid := e.spawnThread("T", "")

	const n = 5
	fs := make([]*actor.Future, n)
	for i := range fs {
		fs[i] = e.root.RequestFuture(pid, &thread.OpenProviderSession{Instance: "a"}, actortest.Timeout)
	}
	e.thread(pid) // every open was taken while the first is held in the driver
	close(gate)

	var sessions, creds []string
	minted := 0
	for i, f := range fs {
		res, err := f.Result()
		if err != nil {
			t.Fatalf("open %d: %v", i, err)
		}
		r := res.(*thread.OpenProviderSessionResult)
		if r.Err() != nil {
			t.Fatalf("open %d = %v", i, r.Err())
		}
		sessions, creds = append(sessions, r.SessionID), append(creds, r.CredentialID)
		if r.Authorization != "" {
			minted++
			if r.Reused {
				t.Errorf("open %d carries a token but says Reused", i)
			}
		}
	}
	if len(slices.Compact(slices.Clone(sessions))) != 1 {
		t.Errorf("sessions %v, want one session", sessions)
	}
	if len(slices.Compact(slices.Clone(creds))) != 1 {
		t.Errorf("credentials %v, want one", creds)
	}
	if minted != 1 {
		t.Errorf("%d answers carry a token, want exactly 1", minted)
	}
	if got := len(e.inproc.Sessions("a")); got != 1 {
		t.Errorf("driver opened %d sessions, want 1", got)
	}
	if got := len(e.inproc.Session(sessions[0]).Authorizations()); got != 1 {
		t.Errorf("driver got %d Authorizations, want 1", got)
	}
	if got := len(e.pairCreds("T", "a")); got != 1 {
		t.Errorf("(T, a) has %d credentials, want 1", got)
	}
}

func TestOpenProviderSessionFailure(t *testing.T) {
	boom := errors.New("no such binary")

	t.Run("minted credential revoked, other instance untouched", func(t *testing.T) {
		e := newEnv(t)
		e.addInproc("a", "")
		e.addInproc("b", "")
		pid := e.spawnThread("T", "")
		rb := e.mustOpen(pid, "b")
		before := e.cred(rb.CredentialID)

		e.inproc.FailNextOpen("a", boom)
		if res := e.open(pid, "a"); !actortest.OpenFailed(res.Err(), boom) {
			t.Fatalf("OpenProviderSession(a) = %+v, want %v", res, boom)
		}
		got := e.pairCreds("T", "a")
		if len(got) != 1 || got[0].State != memdb.StateRevoked || got[0].RevokeReason != credential.ReasonOpenFailed {
			t.Errorf("(T, a) credentials after a failed open = %+v, want one revoked %q", got, credential.ReasonOpenFailed)
		}
		if diff := cmp.Diff(before, e.cred(rb.CredentialID)); diff != "" {
			t.Errorf("(T, b) credential changed (-before +after):\n%s", diff)
		}
		sessions, err := e.store.Read().ProviderSessionsByInstance("a")
		if err != nil || len(sessions) != 0 {
			t.Errorf("provider sessions of a = %+v, %v; want none", sessions, err)
		}
	})

	t.Run("live credential from before survives", func(t *testing.T) {
		e := newEnv(t)
		e.addInproc("a", "")
		pid := e.spawnThread("T", "a")
		prev := e.rotate(pid, "a") // live, held by no session
		before := e.cred(prev.CredentialID)

		e.inproc.FailNextOpen("a", boom)
		if res := e.open(pid, "a"); !actortest.OpenFailed(res.Err(), boom) {
			t.Fatalf("OpenProviderSession(a) = %+v, want %v", res, boom)
		}
		if diff := cmp.Diff(before, e.cred(prev.CredentialID)); diff != "" {
			t.Errorf("credential minted before the failed open changed (-before +after):\n%s", diff)
		}
		for _, c := range e.pairCreds("T", "a") {
			if c.ID != prev.CredentialID && (c.State != memdb.StateRevoked || c.RevokeReason != credential.ReasonOpenFailed) {
				t.Errorf("credential minted by the failed open = %+v, want revoked %q", c, credential.ReasonOpenFailed)
			}
		}
	})

	t.Run("failed re-attach revokes nothing", func(t *testing.T) {
		e := newEnv(t)
		var failAttach atomic.Bool
		e.addInstance("a", &providertest.Gated{Inner: e.inprocDriver("a", ""), FailAttach: &failAttach})
		pid := e.spawnThread("T", "")
		first := e.mustOpen(pid, "a")
		if r := actortest.Ask[*thread.DetachResult](t, e.root, pid, &thread.Detach{}); r.Err() != nil {
			t.Fatal(r.Err())
		}
		before := e.cred(first.CredentialID)

		failAttach.Store(true)
		if res := e.open(pid, "a"); res.Err() == nil {
			t.Fatalf("OpenProviderSession(a) with a failing attach = %+v, want an error", res)
		}
		if diff := cmp.Diff(before, e.cred(first.CredentialID)); diff != "" {
			t.Errorf("credential changed by a failed re-attach (-before +after):\n%s", diff)
		}
		if n := len(e.pairCreds("T", "a")); n != 1 {
			t.Errorf("(T, a) has %d credentials, want 1 (nothing minted)", n)
		}
	})

	t.Run("current instance stays unset", func(t *testing.T) {
		e := newEnv(t)
		e.addInproc("a", "")
		pid := e.spawnThread("T", "")
		e.inproc.FailNextOpen("a", boom)
		if res := e.open(pid, "a"); !actortest.OpenFailed(res.Err(), boom) {
			t.Fatalf("OpenProviderSession(a) = %+v, want %v", res, boom)
		}
		if got := e.thread(pid).Instance; got != "" {
			t.Errorf("current instance after a failed first open = %q, want none (no session was opened)", got)
		}
	})
}

func TestOpenProviderSessionReplacesUnheldCredential(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	prev := e.rotate(pid, "a") // live, but no process holds its token
	e.clock.Advance(time.Minute)

	res := e.mustOpen(pid, "a")
	if res.Reused || res.CredentialID == prev.CredentialID || res.Authorization == "" {
		t.Fatalf("OpenProviderSession = %+v, want a new credential", res)
	}
	old := e.cred(prev.CredentialID)
	if old.State != memdb.StateRevoked || old.RevokeReason != credential.ReasonReplaced {
		t.Errorf("previous credential = %+v, want revoked %q", old, credential.ReasonReplaced)
	}
	if c := e.cred(res.CredentialID); c.State != memdb.StateLive {
		t.Errorf("new credential state = %q, want live", c.State)
	}
}

func TestOpenProviderSessionRefused(t *testing.T) {
	tests := []struct {
		name     string
		instance string
		archive  bool
		wantErr  error
	}{
		{name: "archived thread", instance: "a", archive: true, wantErr: fault.ErrArchivedThread},
		{name: "unknown instance", instance: "nope", wantErr: fault.ErrUnknownInstance},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e := newEnv(t)
			e.addInproc("a", "")
			pid := e.spawnThread("T", "")
			if test.archive {
				if r := actortest.Ask[*thread.ArchiveResult](t, e.root, pid, &thread.Archive{}); r.Err() != nil {
					t.Fatal(r.Err())
				}
			}
			if res := e.open(pid, test.instance); !errors.Is(res.Err(), test.wantErr) {
				t.Errorf("OpenProviderSession(%s) = %+v, want %v", test.instance, res, test.wantErr)
			}
			if n := len(e.creds("T")); n != 0 {
				t.Errorf("%d credentials minted by a refused open, want 0", n)
			}
			if n := len(e.inproc.Sessions("a")); n != 0 {
				t.Errorf("%d driver sessions opened by a refused open, want 0", n)
			}
		})
	}
}

// TestReleaseCredentials: a provider session released by its instance has
// the thread revoke the credentials it alone held, before the instance
// answers; a ReleaseCredentials revokes only the thread's own live
// credentials among those it names (SPEC §3.2 release).
func TestReleaseCredentials(t *testing.T) {
	e := newEnv(t)
	prov := e.addInproc("a", "")
	pid := e.spawnThread("T", "")
	other := e.spawnThread("U", "")
	res := e.mustOpen(pid, "a")
	credU := e.mustOpen(other, "a").CredentialID
	cred := res.CredentialID

	e.clock.Advance(time.Minute)
	closed := actortest.Ask[*provider.CloseSessionResult](t, e.root, prov, &provider.CloseSession{SessionID: res.SessionID, Reason: provider.ReasonReleased})
	if closed.Err() != nil || !slices.Equal(closed.Session.Credentials, []string{cred}) {
		t.Fatalf("CloseSession = %+v, want the record of %s", closed, cred)
	}
	c := e.cred(cred)
	if c.State != memdb.StateRevoked || c.RevokeReason != credential.ReasonReleased || !c.Revoked.Equal(actortest.T0.Add(time.Minute)) {
		t.Errorf("released credential = %+v, want revoked %q at %v", c, credential.ReasonReleased, actortest.T0.Add(time.Minute))
	}

	// Asked directly: another thread's credential is not this thread's to
	// release, an unknown one is skipped, a revoked one stays as it is.
	other2 := e.mustOpen(pid, "a").CredentialID
	release := &provider.ReleaseCredentials{SessionID: "ps_x", Credentials: []string{other2, credU, "cred_unknown", cred}}
	r := actortest.Ask[*provider.CredentialsReleased](t, e.root, pid, release)
	if r.Err() != nil || !slices.Equal(r.Revoked, []string{other2}) {
		t.Errorf("ReleaseCredentials = %+v, want %s revoked", r, other2)
	}
	if c := e.cred(credU); c.State != memdb.StateLive {
		t.Errorf("credential of thread U state = %q, want live", c.State)
	}
	// Releasing again revokes nothing more.
	r = actortest.Ask[*provider.CredentialsReleased](t, e.root, pid, release)
	if r.Err() != nil || len(r.Revoked) != 0 {
		t.Errorf("second ReleaseCredentials = %+v, want nothing revoked", r)
	}
}

func TestSwitchProvider(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	e.addInproc("b", "")
	pid := e.spawnThread("T", "a")
	e.mustOpen(pid, "a")
	e.mustOpen(pid, "b")
	run := e.startRun(pid, "a")
	before := e.creds("T")

	res := actortest.Ask[*thread.SwitchProviderResult](t, e.root, pid, &thread.SwitchProvider{Instance: "b"})
	if diff := cmp.Diff(&thread.SwitchProviderResult{Previous: "a", EndedRun: run}, res); diff != "" {
		t.Errorf("SwitchProvider(b) (-want +got):\n%s", diff)
	}
	th := e.thread(pid)
	if th.Instance != "b" || th.Run != nil {
		t.Errorf("thread after switch = instance %q, run %+v; want b, no run", th.Instance, th.Run)
	}
	if diff := cmp.Diff(before, e.creds("T")); diff != "" {
		t.Errorf("credentials changed by the switch (-before +after):\n%s", diff)
	}

	// A run of the new current instance survives a switch to itself.
	runB := e.startRun(pid, "b")
	res = actortest.Ask[*thread.SwitchProviderResult](t, e.root, pid, &thread.SwitchProvider{Instance: "b"})
	if res.Err() != nil || res.EndedRun != "" || res.Previous != "b" {
		t.Errorf("SwitchProvider(b) again = %+v, want no run ended", res)
	}
	if th := e.thread(pid); th.Run == nil || th.Run.ID != runB {
		t.Errorf("run after a switch to the same instance = %+v, want %s", th.Run, runB)
	}

	// An unknown instance changes nothing.
	res = actortest.Ask[*thread.SwitchProviderResult](t, e.root, pid, &thread.SwitchProvider{Instance: "nope"})
	if !errors.Is(res.Err(), fault.ErrUnknownInstance) {
		t.Errorf("SwitchProvider(nope) = %v, want ErrUnknownInstance", res.Err())
	}
	if th := e.thread(pid); th.Instance != "b" || th.Run == nil {
		t.Errorf("thread after a refused switch = %+v, want b with its run", th)
	}
}

func TestRotate(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	e.addInproc("b", "")
	pid := e.spawnThread("T", "a")
	ra := e.mustOpen(pid, "a")
	rb := e.mustOpen(pid, "b")
	beforeB := e.cred(rb.CredentialID)
	e.clock.Advance(time.Minute)

	res := e.rotate(pid, "a")
	if res.CredentialID == ra.CredentialID {
		t.Fatalf("Rotate returned the old credential %s", res.CredentialID)
	}
	tok := bearer(t, res.Authorization)
	if c := e.cred(res.CredentialID); c.TokenHash != token.Hash(tok) || c.State != memdb.StateLive || c.Instance != "a" {
		t.Errorf("rotated credential = %+v, want live, for a, hashing the returned token", c)
	}
	if old := e.cred(ra.CredentialID); old.State != memdb.StateRevoked || old.RevokeReason != credential.ReasonRotated {
		t.Errorf("previous credential = %+v, want revoked %q", old, credential.ReasonRotated)
	}
	if diff := cmp.Diff(beforeB, e.cred(rb.CredentialID)); diff != "" {
		t.Errorf("(T, b) credential changed by rotating a (-before +after):\n%s", diff)
	}

	// The session serving (T, a) was re-bound with the new token.
	s := e.inproc.Session(ra.SessionID)
	if diff := cmp.Diff([]string{ra.Authorization, res.Authorization}, s.Authorizations()); diff != "" {
		t.Errorf("driver authorizations (-want +got):\n%s", diff)
	}
	bs := s.Bindings()
	if last := bs[len(bs)-1]; last.CredentialID != res.CredentialID || last.Thread != "T" {
		t.Errorf("last binding = %+v, want T with %s", last, res.CredentialID)
	}
	if rec := e.record(ra.SessionID); !slices.Equal(rec.Credentials, []string{res.CredentialID}) || !slices.Equal(rec.Threads, []string{"T"}) {
		t.Errorf("record after rotate = %+v, want only the new credential", rec)
	}
	if sb := e.inproc.Session(rb.SessionID); len(sb.Bindings()) != 1 {
		t.Errorf("b's session got %d bindings, want 1 (untouched)", len(sb.Bindings()))
	}
	// The session keeps serving the pair, now with the new credential.
	again := e.mustOpen(pid, "a")
	if !again.Reused || again.SessionID != ra.SessionID || again.CredentialID != res.CredentialID {
		t.Errorf("open after rotate = %+v, want reuse of %s with %s", again, ra.SessionID, res.CredentialID)
	}

	if r := actortest.Ask[*thread.RotateResult](t, e.root, pid, &thread.Rotate{Instance: "nope"}); !errors.Is(r.Err(), fault.ErrUnknownInstance) {
		t.Errorf("Rotate(nope) = %v, want ErrUnknownInstance", r.Err())
	}
}

func TestStartRunEndRun(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	e.addInproc("b", "")
	pid := e.spawnThread("T", "")
	var runs []string // run ids, in order

	steps := []struct {
		name    string
		msg     thread.Message
		wantErr error
		wantRun bool // the thread has an active run afterwards
	}{
		{name: "no current instance", msg: &thread.StartRun{Instance: "a"}, wantErr: fault.ErrNotCurrentInstance},
		{name: "switch to a", msg: &thread.SwitchProvider{Instance: "a"}},
		{name: "not the current instance", msg: &thread.StartRun{Instance: "b"}, wantErr: fault.ErrNotCurrentInstance},
		{name: "start", msg: &thread.StartRun{Instance: "a"}, wantRun: true},
		{name: "start while active", msg: &thread.StartRun{Instance: "a"}, wantErr: fault.ErrRunActive, wantRun: true},
		{name: "end another run", msg: &thread.EndRun{RunID: "run_other"}, wantErr: fault.ErrNoRun, wantRun: true},
		{name: "end it by id", msg: &thread.EndRun{RunID: "$last"}},
		{name: "end with none active", msg: &thread.EndRun{}, wantErr: fault.ErrNoRun},
		{name: "start again", msg: &thread.StartRun{Instance: "a"}, wantRun: true},
		{name: "end whichever", msg: &thread.EndRun{}},
	}
	for _, step := range steps {
		if m, ok := step.msg.(*thread.EndRun); ok && m.RunID == "$last" {
			m.RunID = runs[len(runs)-1]
		}
		res, err := e.root.RequestFuture(pid, step.msg, actortest.Timeout).Result()
		if err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		if got := errOf(res); !errors.Is(got, step.wantErr) {
			t.Fatalf("%s: %T = %v, want %v", step.name, step.msg, got, step.wantErr)
		}
		switch r := res.(type) {
		case *thread.StartRunResult:
			if r.Err() == nil {
				if !strings.HasPrefix(r.RunID, "run_") || slices.Contains(runs, r.RunID) {
					t.Errorf("%s: run id %q, want a fresh run_ id", step.name, r.RunID)
				}
				runs = append(runs, r.RunID)
			}
		case *thread.EndRunResult:
			if r.Err() == nil && r.RunID != runs[len(runs)-1] {
				t.Errorf("%s: ended %q, want %q", step.name, r.RunID, runs[len(runs)-1])
			}
		}
		th := e.thread(pid)
		if (th.Run != nil) != step.wantRun {
			t.Errorf("%s: run = %+v, want active %v", step.name, th.Run, step.wantRun)
		}
		if th.Run != nil && (th.Run.ID != runs[len(runs)-1] || th.Run.Instance != "a" || !th.Run.Started.Equal(actortest.T0)) {
			t.Errorf("%s: run = %+v, want %s of a", step.name, th.Run, runs[len(runs)-1])
		}
	}
}

func TestTouchAndExpiry(t *testing.T) {
	e := newEnv(t) // window 1h
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	first := e.mustOpen(pid, "a")
	check := func(when string, lastLive, expires time.Time) {
		t.Helper()
		c := e.cred(first.CredentialID)
		if !c.LastLive.Equal(lastLive) || !c.Expires.Equal(expires) {
			t.Errorf("%s: credential last live %v, expires %v; want %v, %v", when, c.LastLive, c.Expires, lastLive, expires)
		}
	}
	check("after mint", actortest.T0, actortest.T0.Add(time.Hour))

	e.clock.Advance(40 * time.Minute)
	if r := actortest.Ask[*thread.TouchResult](t, e.root, pid, &thread.Touch{}); r.Err() != nil || r.Refreshed != 1 {
		t.Errorf("Touch = %+v, want 1 refreshed", r)
	}
	check("after touch", actortest.T0.Add(40*time.Minute), actortest.T0.Add(100*time.Minute))

	e.clock.Advance(40 * time.Minute) // still live: 80m < 100m
	run := e.startRun(pid, "a")
	check("after a run start", actortest.T0.Add(80*time.Minute), actortest.T0.Add(140*time.Minute))

	e.clock.Advance(61 * time.Minute) // 141m: past the window
	if c := e.cred(first.CredentialID); c.LiveAt(e.clock.Now()) {
		t.Fatalf("credential %+v still live past its window", c)
	}
	if r := actortest.Ask[*thread.TouchResult](t, e.root, pid, &thread.Touch{}); r.Err() != nil || r.Refreshed != 0 {
		t.Errorf("Touch after expiry = %+v, want nothing refreshed", r)
	}
	check("after touching an expired credential", actortest.T0.Add(80*time.Minute), actortest.T0.Add(140*time.Minute))

	caller := principal.Principal{Kind: memdb.KindProvider, CredentialID: first.CredentialID, Namespace: "cred:" + first.CredentialID, Thread: "T", Instance: "a"}
	r := actortest.Ask[*thread.MutateResult](t, e.root, pid, &thread.Mutate{Caller: caller, Effect: &thread.AppendMessage{Text: "late"}})
	if !errors.Is(r.Err(), fault.ErrNotLive) {
		t.Errorf("Mutate with an expired credential during run %s = %v, want ErrNotLive", run, r.Err())
	}

	// An expired credential is not reused: the next open mints.
	again := e.mustOpen(pid, "a")
	if again.Reused || again.CredentialID == first.CredentialID || again.Authorization == "" {
		t.Errorf("open after expiry = %+v, want a new credential", again)
	}
	if old := e.cred(first.CredentialID); old.State != memdb.StateRevoked || old.RevokeReason != credential.ReasonExpired {
		t.Errorf("expired credential = %+v, want revoked %q", old, credential.ReasonExpired)
	}
	if c := e.cred(again.CredentialID); !c.Expires.Equal(e.clock.Now().Add(time.Hour)) {
		t.Errorf("new credential expires %v, want %v", c.Expires, e.clock.Now().Add(time.Hour))
	}
}

func TestNoExpiryWindow(t *testing.T) {
	e := newEnv(t, func(c *thread.Config) { c.Window = 0 })
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	res := e.mustOpen(pid, "a")
	e.clock.Advance(10 * 365 * 24 * time.Hour)
	c := e.cred(res.CredentialID)
	if !c.Expires.IsZero() || !c.LiveAt(e.clock.Now()) {
		t.Errorf("credential with no window = %+v, want no expiry and live", c)
	}
	if r := actortest.Ask[*thread.TouchResult](t, e.root, pid, &thread.Touch{}); r.Err() != nil || r.Refreshed != 1 {
		t.Errorf("Touch = %+v, want 1 refreshed", r)
	}
	if c := e.cred(res.CredentialID); !c.Expires.IsZero() || !c.LastLive.Equal(e.clock.Now()) {
		t.Errorf("touched credential = %+v, want no expiry, last live now", c)
	}
}

func TestMutate(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	e.addInproc("b", "")
	pid := e.spawnThread("T", "a")
	other := e.spawnThread("T2", "")
	ra, rb := e.mustOpen(pid, "a"), e.mustOpen(pid, "b")
	e.startRun(pid, "a")

	clientCred := func(id, access string) *memdb.Credential {
		return &memdb.Credential{
			ID: id, TokenHash: token.Hash(id), Kind: memdb.KindClient, Namespace: "client:g_" + id,
			Client: "g_" + id, Access: access, Issued: actortest.T0, LastLive: actortest.T0, State: memdb.StateLive,
		}
	}
	e.write(func(w *memdb.Writer) error {
		revoked := &memdb.Credential{
			ID: "cred_revoked", TokenHash: token.Hash("revoked"), Kind: memdb.KindProvider, Namespace: "cred:cred_revoked",
			Thread: "T", Instance: "a", Issued: actortest.T0, State: memdb.StateRevoked, RevokeReason: credential.ReasonRotated, Revoked: actortest.T0,
		}
		for _, c := range []*memdb.Credential{clientCred("ro", memdb.AccessReadOnly), clientCred("rw", memdb.AccessReadWrite), revoked} {
			if err := w.PutCredential(c); err != nil {
				return err
			}
		}
		return nil
	})
	providerCaller := func(cred, instance string) principal.Principal {
		return principal.Principal{Kind: memdb.KindProvider, CredentialID: cred, Namespace: "cred:" + cred, Thread: "T", Instance: instance}
	}
	clientCaller := func(id, access string) principal.Principal {
		return principal.Principal{Kind: memdb.KindClient, CredentialID: id, Namespace: "client:g_" + id, Access: access}
	}
	live := providerCaller(ra.CredentialID, "a")

	tests := []struct {
		name    string
		target  *actor.PID
		caller  principal.Principal
		text    string
		wantErr error
	}{
		{name: "live caller on its own thread", target: pid, caller: live, text: "hello"},
		{name: "live caller on another thread", target: other, caller: live, text: "over there"},
		{name: "caller of another instance", target: pid, caller: providerCaller(rb.CredentialID, "b"), text: "x", wantErr: fault.ErrNotLive},
		{name: "caller claiming the run's instance", target: pid, caller: providerCaller(rb.CredentialID, "a"), text: "x", wantErr: fault.ErrNotLive},
		{name: "read-only client", target: pid, caller: clientCaller("ro", memdb.AccessReadOnly), text: "x", wantErr: fault.ErrReadOnly},
		{name: "read-only client claiming read-write", target: pid, caller: clientCaller("ro", memdb.AccessReadWrite), text: "x", wantErr: fault.ErrReadOnly},
		{name: "read-write client", target: pid, caller: clientCaller("rw", memdb.AccessReadWrite), text: "from a client"},
		{name: "unknown credential", target: pid, caller: providerCaller("cred_nope", "a"), text: "x", wantErr: fault.ErrNotLive},
		{name: "revoked credential", target: pid, caller: providerCaller("cred_revoked", "a"), text: "x", wantErr: fault.ErrNotLive},
		{name: "empty text", target: pid, caller: live, text: "", wantErr: fault.ErrInvalidMessage},
		{name: "invalid UTF-8", target: pid, caller: live, text: "\xff\xfe", wantErr: fault.ErrInvalidMessage},
		{name: "oversized text", target: pid, caller: live, text: strings.Repeat("x", thread.MaxMessageBytes+1), wantErr: fault.ErrInvalidMessage},
		{name: "largest text", target: pid, caller: live, text: strings.Repeat("x", thread.MaxMessageBytes)},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			before := e.thread(test.target)
			e.clock.Advance(time.Second)
			res := actortest.Ask[*thread.MutateResult](t, e.root, test.target, &thread.Mutate{Caller: test.caller, Effect: &thread.AppendMessage{Text: test.text}})
			if !errors.Is(res.Err(), test.wantErr) {
				t.Fatalf("Mutate(%s) = %v, want %v", test.name, res.Err(), test.wantErr)
			}
			after := e.thread(test.target)
			if test.wantErr != nil {
				if diff := cmp.Diff(before, after); diff != "" {
					t.Errorf("refused mutation changed the thread (-before +after):\n%s", diff)
				}
				return
			}
			want := memdb.Message{Seq: before.NextSeq, Text: test.text, Author: test.caller.Namespace, Instance: test.caller.Instance, At: e.clock.Now()}
			if diff := cmp.Diff(want, res.Value); diff != "" {
				t.Errorf("stored message (-want +got):\n%s", diff)
			}
			if after.NextSeq != before.NextSeq+1 || len(after.Messages) == 0 || after.Messages[len(after.Messages)-1].Seq != want.Seq {
				t.Errorf("thread after mutation: next seq %d, messages %d; want %d and the new message last", after.NextSeq, len(after.Messages), before.NextSeq+1)
			}
		})
	}

	post := func(target *actor.PID, c principal.Principal) error {
		t.Helper()
		return actortest.Ask[*thread.MutateResult](t, e.root, target, &thread.Mutate{Caller: c, Effect: &thread.AppendMessage{Text: "x"}}).Err()
	}
	t.Run("caller without an active run", func(t *testing.T) {
		if r := actortest.Ask[*thread.EndRunResult](t, e.root, pid, &thread.EndRun{}); r.Err() != nil {
			t.Fatal(r.Err())
		}
		if err := post(pid, live); !errors.Is(err, fault.ErrNotLive) {
			t.Errorf("Mutate after the run ended = %v, want ErrNotLive", err)
		}
		if err := post(other, live); !errors.Is(err, fault.ErrNotLive) {
			t.Errorf("Mutate on another thread after the run ended = %v, want ErrNotLive", err)
		}
	})
	t.Run("caller after a switch away", func(t *testing.T) {
		e.startRun(pid, "a")
		if r := actortest.Ask[*thread.SwitchProviderResult](t, e.root, pid, &thread.SwitchProvider{Instance: "b"}); r.Err() != nil {
			t.Fatal(r.Err())
		}
		if err := post(pid, live); !errors.Is(err, fault.ErrNotLive) {
			t.Errorf("Mutate by a after switching to b = %v, want ErrNotLive", err)
		}
		e.startRun(pid, "b")
		if err := post(pid, providerCaller(rb.CredentialID, "b")); err != nil {
			t.Errorf("Mutate by b owning the run = %v, want nil", err)
		}
	})
	t.Run("archived target", func(t *testing.T) {
		if r := actortest.Ask[*thread.ArchiveResult](t, e.root, other, &thread.Archive{}); r.Err() != nil {
			t.Fatal(r.Err())
		}
		if err := post(other, providerCaller(rb.CredentialID, "b")); !errors.Is(err, fault.ErrArchivedThread) {
			t.Errorf("Mutate on an archived thread = %v, want ErrArchived", err)
		}
	})
}

func TestMutateMessageLogBounded(t *testing.T) {
	e := newEnv(t, func(c *thread.Config) { c.MessageLog = 3 })
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	res := e.mustOpen(pid, "a")
	e.startRun(pid, "a")
	caller := principal.Principal{Kind: memdb.KindProvider, CredentialID: res.CredentialID, Namespace: "cred:" + res.CredentialID, Thread: "T", Instance: "a"}

	for i := range 5 {
		r := actortest.Ask[*thread.MutateResult](t, e.root, pid, &thread.Mutate{Caller: caller, Effect: &thread.AppendMessage{Text: fmt.Sprint("m", i)}})
		if r.Err() != nil {
			t.Fatalf("post %d = %v", i, r.Err())
		}
		if m := r.Value.(memdb.Message); m.Seq != uint64(i) {
			t.Errorf("post %d: seq %d, want %d", i, m.Seq, i)
		}
	}
	th := e.thread(pid)
	var got []string
	for _, m := range th.Messages {
		got = append(got, fmt.Sprint(m.Seq, ":", m.Text))
	}
	if diff := cmp.Diff([]string{"2:m2", "3:m3", "4:m4"}, got); diff != "" {
		t.Errorf("message log (-want +got):\n%s", diff)
	}
	if th.NextSeq != 5 {
		t.Errorf("next seq = %d, want 5", th.NextSeq)
	}
}

func TestDetach(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	pid := e.spawnThread("T", "")
	if r := actortest.Ask[*thread.DetachResult](t, e.root, pid, &thread.Detach{}); r.Err() != nil || len(r.Sessions) != 0 {
		t.Errorf("Detach with no sessions = %+v, want none", r)
	}
	res := e.mustOpen(pid, "a")
	before := e.cred(res.CredentialID)

	r := actortest.Ask[*thread.DetachResult](t, e.root, pid, &thread.Detach{})
	if r.Err() != nil || !slices.Equal(r.Sessions, []string{res.SessionID}) {
		t.Errorf("Detach = %+v, want [%s]", r, res.SessionID)
	}
	if diff := cmp.Diff(before, e.cred(res.CredentialID)); diff != "" {
		t.Errorf("credential changed by a plain detach (-before +after):\n%s", diff)
	}
	rec := e.record(res.SessionID)
	if len(rec.Threads) != 0 || !slices.Equal(rec.Credentials, []string{res.CredentialID}) {
		t.Errorf("record after detach = %+v, want no threads, the credential kept", rec)
	}
	s := e.inproc.Session(res.SessionID)
	eventually(t, "the driver detached T", func() bool { return !slices.Contains(s.Attached(), "T") })
	if s.Closed() {
		t.Error("a plain detach closed the provider session")
	}
}

func TestArchive(t *testing.T) {
	e := newEnv(t)
	for _, id := range []string{"a", "b", "c"} {
		e.addInproc(id, "")
	}
	pid := e.spawnThread("T", "a")
	ra, rb := e.mustOpen(pid, "a"), e.mustOpen(pid, "b")
	e.rotate(pid, "c") // a credential whose session is gone (never was)
	e.startRun(pid, "a")
	e.clock.Advance(time.Minute)

	r := actortest.Ask[*thread.ArchiveResult](t, e.root, pid, &thread.Archive{})
	if r.Err() != nil || r.Revoked != 3 {
		t.Errorf("Archive = %+v, want 3 revoked", r)
	}
	for _, c := range e.creds("T") {
		if c.State != memdb.StateRevoked || c.RevokeReason != credential.ReasonArchived {
			t.Errorf("credential of (T, %s) after archive = %s %q, want revoked %q", c.Instance, c.State, c.RevokeReason, credential.ReasonArchived)
		}
	}
	th := e.thread(pid)
	if th.Status != memdb.ThreadArchived || th.Run != nil {
		t.Errorf("thread after archive = status %q, run %+v; want archived, no run", th.Status, th.Run)
	}
	for _, sid := range []string{ra.SessionID, rb.SessionID} {
		if rec := e.record(sid); slices.Contains(rec.Threads, "T") {
			t.Errorf("session %s still serves T after archive", sid)
		}
	}

	// Archived: readable, not changeable.
	refused := []thread.Message{
		&thread.OpenProviderSession{Instance: "a"},
		&thread.SwitchProvider{Instance: "b"},
		&thread.Rotate{Instance: "a"},
		&thread.StartRun{Instance: "a"},
		&thread.EndRun{},
		&thread.Touch{},
		&thread.Mutate{Caller: principal.Principal{CredentialID: ra.CredentialID}, Effect: &thread.AppendMessage{Text: "x"}},
	}
	for _, msg := range refused {
		res, err := e.root.RequestFuture(pid, msg, actortest.Timeout).Result()
		if err != nil {
			t.Fatalf("%T: %v", msg, err)
		}
		if got := errOf(res); !errors.Is(got, fault.ErrArchivedThread) {
			t.Errorf("%T on an archived thread = %v, want ErrArchived", msg, got)
		}
	}
	if n := len(e.creds("T")); n != 3 {
		t.Errorf("archived thread has %d credentials, want the 3 revoked ones", n)
	}
}

func TestRevokeAll(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	e.addInproc("b", "")
	pid := e.spawnThread("T", "a")
	e.mustOpen(pid, "a")
	e.mustOpen(pid, "b")

	r := actortest.Ask[*thread.RevokeAllResult](t, e.root, pid, &thread.RevokeAll{Reason: credential.ReasonShutdown})
	if r.Err() != nil || r.Revoked != 2 {
		t.Errorf("RevokeAll = %+v, want 2 revoked", r)
	}
	for _, c := range e.creds("T") {
		if c.State != memdb.StateRevoked || c.RevokeReason != credential.ReasonShutdown {
			t.Errorf("credential of (T, %s) = %s %q, want revoked %q", c.Instance, c.State, c.RevokeReason, credential.ReasonShutdown)
		}
	}
	if th := e.thread(pid); th.Status != memdb.ThreadActive {
		t.Errorf("thread status after RevokeAll = %q, want active", th.Status)
	}
	r = actortest.Ask[*thread.RevokeAllResult](t, e.root, pid, &thread.RevokeAll{Reason: credential.ReasonShutdown})
	if r.Err() != nil || r.Revoked != 0 {
		t.Errorf("second RevokeAll = %+v, want nothing revoked", r)
	}
}

func TestPruneRevokedCredentials(t *testing.T) {
	e := newEnv(t, func(c *thread.Config) { c.RevokedKept = 2 })
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	var ids []string
	for i := range 5 {
		ids = append(ids, e.rotate(pid, "a").CredentialID)
		e.clock.Advance(time.Minute)
		// ids[:i] were revoked in that order: the two most recent are kept,
		// with the live one.
		var got []string
		for _, c := range e.creds("T") {
			got = append(got, c.ID)
		}
		want := slices.Clone(ids[max(0, i-2):])
		slices.Sort(want)
		slices.Sort(got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("credential rows after rotation %d (-want +got):\n%s", i+1, diff)
		}
	}
	if c := e.cred(ids[4]); c.State != memdb.StateLive {
		t.Errorf("newest credential state = %q, want live", c.State)
	}
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	res := e.mustOpen(pid, "a")
	e.rotate(pid, "a")
	e.startRun(pid, "a")

	r := actortest.Ask[*thread.DeleteResult](t, e.root, pid, &thread.Delete{})
	if r.Err() != nil || r.Revoked != 1 {
		t.Errorf("Delete = %+v, want 1 live credential revoked", r)
	}
	rd := e.store.Read()
	if _, err := rd.Thread("T"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("Thread(T) after delete = %v, want ErrNotFound", err)
	}
	if n := len(e.creds("T")); n != 0 {
		t.Errorf("%d credential rows left after delete, want 0", n)
	}
	if rec := e.record(res.SessionID); slices.Contains(rec.Threads, "T") {
		t.Errorf("session %s still serves T after delete", res.SessionID)
	}

	// The actor stops; its name is free again and a new thread T starts
	// from nothing.
	eventually(t, "thread/T stopped", func() bool {
		_, ok := e.sys.ProcessRegistry.GetLocal("thread/T")
		return !ok
	})
	if _, err := e.root.RequestFuture(pid, &thread.GetThread{}, actortest.Timeout).Result(); !errors.Is(err, actor.ErrDeadLetter) {
		t.Errorf("GetThread to the deleted actor: %v, want ErrDeadLetter", err)
	}
	again := e.spawnThread("T", "")
	th := e.thread(again)
	if th.Status != memdb.ThreadActive || th.Instance != "" || th.Run != nil || th.NextSeq != 0 {
		t.Errorf("re-created thread = %+v, want a fresh active thread", th)
	}
}

// holdingProvider stands in for a provider instance actor: it holds the
// answers to DetachThread until it gets releaseDetach.
type holdingProvider struct {
	got  chan struct{}
	held []*actor.PID
}

type releaseDetach struct{}

func (h *holdingProvider) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *provider.DetachThread:
		h.held = append(h.held, ctx.Sender())
		h.got <- struct{}{}
	case *releaseDetach:
		for _, p := range h.held {
			ctx.Send(p, &provider.DetachThreadResult{})
		}
		h.held = nil
	}
}

// TestDeleteAnswersNotFoundWhileFinishing: between Delete and its answer
// (while the thread is being detached from its provider sessions), every
// message is answered with ErrUnknownThread.
func TestDeleteAnswersNotFoundWhileFinishing(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	hold := &holdingProvider{got: make(chan struct{}, 1)}
	fake, err := e.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return hold }), names.Instance("held"))
	if err != nil {
		t.Fatal(err)
	}
	actortest.StopAtEnd(e.t, e.root, fake)
	pid := e.spawnThread("T", "a")
	e.mustOpen(pid, "a")
	// A registered instance: the thread asks every one to detach it.
	e.write(func(w *memdb.Writer) error {
		return w.PutInstance(&memdb.Instance{ID: "held", Driver: driver.InprocKind, Created: actortest.T0})
	})

	fDelete := e.root.RequestFuture(pid, &thread.Delete{}, actortest.Timeout)
	select {
	case <-hold.got:
	case <-time.After(actortest.Timeout):
		t.Fatal("Delete never asked the held provider to detach the thread")
	}
	for _, msg := range everyMessage() {
		res, err := e.root.RequestFuture(pid, msg, actortest.Timeout).Result()
		if err != nil {
			t.Errorf("%T while deleting: %v", msg, err)
			continue
		}
		if got := errOf(res); !errors.Is(got, fault.ErrUnknownThread) {
			t.Errorf("%T while deleting = %v, want ErrUnknownThread", msg, got)
		}
	}
	e.root.Send(fake, &releaseDetach{})
	res, err := fDelete.Result()
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if r := res.(*thread.DeleteResult); r.Err() != nil || r.Revoked != 1 {
		t.Errorf("Delete = %+v, want 1 revoked", r)
	}
}

// TestDeleteAnswersQueuedMessages: messages already queued behind a Delete
// get an answer (ErrUnknownThread), not silence until the caller's timeout.
func TestDeleteAnswersQueuedMessages(t *testing.T) {
	e := newEnv(t)
	pid := e.spawnThread("T", "")

	sendSystem(t, e.sys, pid, &actor.SuspendMailbox{})
	fDelete := e.root.RequestFuture(pid, &thread.Delete{}, actortest.Timeout)
	queued := []thread.Message{&thread.GetThread{}, &thread.Touch{}}
	fs := make([]*actor.Future, len(queued))
	for i, msg := range queued {
		fs[i] = e.root.RequestFuture(pid, msg, actortest.Timeout)
	}
	sendSystem(t, e.sys, pid, &actor.ResumeMailbox{})

	if res, err := fDelete.Result(); err != nil || errOf(res) != nil {
		t.Fatalf("Delete = %v, %v", res, err)
	}
	for i, f := range fs {
		res, err := f.Result()
		if err != nil {
			t.Errorf("%T queued behind Delete: %v, want a reply carrying ErrUnknownThread", queued[i], err)
			continue
		}
		if got := errOf(res); !errors.Is(got, fault.ErrUnknownThread) {
			t.Errorf("%T queued behind Delete = %v, want ErrUnknownThread", queued[i], got)
		}
	}
}

// staleOnceLog is a memdb.Log whose first commit finds a row changed (as
// another node's write would make it) and whose later commits apply.
type staleOnceLog struct {
	store   *memdb.Store
	commits int
}

func (l *staleOnceLog) Commit(tx *memdb.Tx) error {
	l.commits++
	if l.commits == 1 {
		return memdb.ErrStale
	}
	return l.store.Apply(func(w *memdb.Writer) error {
		for _, wr := range tx.Writes {
			if wr.After == nil {
				if err := w.Delete(wr.Table, wr.ID); err != nil {
					return err
				}
				continue
			}
			if err := w.Put(wr.Table, wr.After); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestMutateRetriesStale: on several nodes a mutation's read of its
// caller may be stale (another node wrote the row); the mutation is tried
// again on the fresh replica instead of failing, and applies once.
func TestMutateRetriesStale(t *testing.T) {
	e := newEnv(t)
	e.addInproc("a", "")
	pid := e.spawnThread("T", "a")
	ra := e.mustOpen(pid, "a")
	e.startRun(pid, "a")
	log := &staleOnceLog{store: e.store}
	e.store.SetLog(log)
	caller := principal.Principal{Kind: memdb.KindProvider, CredentialID: ra.CredentialID, Namespace: "cred:" + ra.CredentialID, Thread: "T", Instance: "a"}
	r := actortest.Ask[*thread.MutateResult](t, e.root, pid, &thread.Mutate{Caller: caller, Effect: &thread.AppendMessage{Text: "once"}})
	if err := r.Err(); err != nil {
		t.Fatalf("Mutate after a stale first commit = %v, want it applied on the retry", err)
	}
	if log.commits != 2 {
		t.Errorf("commits = %d, want 2 (the stale one and the retry)", log.commits)
	}
	th, err := e.store.Read().Thread("T")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(th.Messages); n != 1 || th.Messages[0].Text != "once" {
		t.Errorf("messages = %+v, want the one message once", th.Messages)
	}
}

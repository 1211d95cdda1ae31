package proptest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/internal/actortest"
)

// The lifecycle machine drives every lifecycle operation of the public API
// (SPEC §3) against the model in model_test.go. After every action it checks
// SPEC §6 invariant 1 (every token authenticates exactly when the model says
// it is live, as the principal the model expects) and that the runtime's
// threads agree with the model's; around the actions it checks the frame
// conditions of invariants 4 and 5 directly on the runtime, without the
// model: which tokens an action may change, and that after archive or delete
// none of the thread's tokens authenticates.

// Set-up of every iteration.
const (
	testEndpoint  = "http://127.0.0.1:7331/mcp"
	testWindow    = time.Hour
	testClientTTL = 2 * time.Hour
	// testProviderIdle: provider sessions with no turn for this long are
	// released. The instances' own timers tick once a real minute at this
	// setting, far beyond a check's life; the machine sweeps after each
	// clock step instead, which is what a timer would do at that moment.
	testProviderIdle = 30 * time.Minute
	unknownInstance  = "ix" // never registered
	unknownSession   = "ps_00000000000000000000000000000000"
	unknownClient    = "cl_00000000000000000000000000000000"
	unknownRun       = "run_00000000000000000000000000000000"
	// waitTimeout bounds the wait for the asynchronous effect of a driver
	// death. It is a deadline for a poll, not a threshold on speed.
	waitTimeout = time.Minute
)

var (
	testStart    = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	threadPool   = []string{"t0", "t1", "t2"}
	instancePool = []string{"i0", "i1", "i2"}
	// testInstances are registered in every iteration; i2 is multi-thread;
	// the sessions of i1 and i2 take prompts, as a real agent's do.
	testInstances = []struct {
		id     string
		multi  bool
		turns  bool
		config string
		caps   []string
	}{
		{"i0", false, false, "", []string{"thread.read", "thread.post"}},
		{"i1", false, true, `{"multiThread":false,"turns":true}`, []string{"thread.read"}},
		{"i2", true, true, `{"multiThread":true,"turns":true}`, nil},
	}
	clockSteps = []time.Duration{time.Minute, 20 * time.Minute, 61 * time.Minute, 3 * time.Hour, time.Hour, 59 * time.Minute, 10 * time.Minute}
)

// errInjected is the driver failure FailNextOpen injects.
var errInjected = errors.New("injected driver failure")

// lifecycleMachine is one runtime and its model.
type lifecycleMachine struct {
	ctx    context.Context
	rt     *mcpruntime.Runtime
	inproc *providertest.Inproc // the runtime's in-process driver
	clock  *actortest.Clock
	m      *model
	texts  int // counter for message texts
	// closes counts provider-session close events (SubscribeProviderEvents).
	closes atomic.Int64
	// subs are the resource subscriptions accepted so far, and resources
	// whether the machine's resources are registered
	// (resources_prop_test.go).
	subs      []modelSub
	resources bool
	// turns are the agents' turns the runtime started (StartTurn), by run
	// id: which session has it, and whether the agent ended it.
	turns map[string]*machineTurn
	// cfg is what the runtime was made with, for a restart's New
	// (restart_prop_test.go); unsubscribe ends the close counting on the
	// current runtime; durable is the state file's side, nil in memory.
	cfg         mcpruntime.Config
	unsubscribe func()
	durable     *durableState
	// restored are the credentials the current runtime restored from its
	// state file: its journal never saw them minted (SPEC §3.7a).
	restored map[string]bool
}

// machineTurn is one turn a driver session was given.
type machineTurn struct {
	thread, session string
	ended           bool // the agent reported its end (AgentEndsTurn)
}

// subscribeCounting subscribes to the runtime's provider events and counts
// the SessionClosed ones in n.
func subscribeCounting(subscribe func(func(provider.Event)) func(), n *atomic.Int64) (unsubscribe func()) {
	return subscribe(func(e provider.Event) {
		if _, ok := e.(*provider.SessionClosed); ok {
			n.Add(1)
		}
	})
}

func newLifecycleMachine(t *rapid.T) *lifecycleMachine { return newLifecycleMachineOn(t, "") }

// newLifecycleMachineOn is newLifecycleMachine on the state file path, in
// memory when "".
func newLifecycleMachineOn(t *rapid.T, stateFile string) *lifecycleMachine {
	clock := actortest.NewClock(testStart)
	in := &providertest.Inproc{}
	cfg := mcpruntime.Config{
		Drivers:          map[string]driver.Factory{driver.InprocKind: in.Factory()},
		Endpoint:         testEndpoint,
		CredentialWindow: testWindow,
		ClientTokenTTL:   testClientTTL,
		ProviderIdle:     testProviderIdle,
		RevokedKept:      1 << 20, // no pruning: a revoked token keeps its reason
		Journal:          1 << 20, // every record of an iteration kept, for checkJournal
		Now:              clock.Now,
		Logger:           slog.New(slog.DiscardHandler),
		StateFile:        stateFile,
	}
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	s := &lifecycleMachine{
		ctx:    context.Background(),
		rt:     rt,
		inproc: in,
		clock:  clock,
		m:      newModel(testStart, testWindow, testClientTTL, testProviderIdle, testEndpoint),
		turns:  map[string]*machineTurn{},
		cfg:    cfg,
	}
	t.Cleanup(func() { _ = s.rt.Close() }) // the runtime of the moment: a restart replaces it
	// Subscribed after the runtime's own subscriber, which turns a death
	// into the release of the session's credentials: when this one counts
	// an event, that release has been sent to the thread actors.
	s.unsubscribe = subscribeCounting(rt.SubscribeProviderEvents, &s.closes)
	t.Cleanup(func() { s.unsubscribe() })
	for _, inst := range testInstances {
		if err := rt.RegisterInstance(s.ctx, inst.id, instanceSpec(inst.caps, inst.config)); err != nil {
			t.Fatalf("RegisterInstance(%q): %v", inst.id, err)
		}
		s.m.instances[inst.id] = modelInstance{caps: inst.caps, multi: inst.multi, turns: inst.turns}
	}
	return s
}

// instanceSpec is the spec a test instance is registered with.
func instanceSpec(caps []string, config string) mcpruntime.InstanceSpec {
	spec := mcpruntime.InstanceSpec{Driver: "inproc", Capabilities: caps}
	if config != "" {
		spec.Config = json.RawMessage(config)
	}
	return spec
}

// extraWeight gives the actions that build state extra keys in the action
// map, so that the other actions mostly act on something. rapid draws an
// action by its index among the sorted keys and favours the first keys; the
// extra keys start with "+" so that they sort first, and the actions that
// end a thread's life (Archive, DeleteThread, AdvanceClock) are not favoured.
var extraWeight = map[string]int{
	"CreateThread":           1,
	"OpenProviderSession":    3,
	"Post":                   2,
	"ReleaseProviderSession": 1,
	"Rotate":                 1,
	"StartRun":               2,
	"StartTurn":              2,
	"AgentEndsTurn":          1,
}

// lifecycleProp is the property: any sequence of actions keeps the runtime
// and the model in agreement, and Close revokes everything.
func lifecycleProp(t *rapid.T) {
	s := newLifecycleMachine(t)
	t.Repeat(lifecycleActions(s))
	s.closeAndCheck(t)
}

// lifecycleActions are s's actions, weighted by extraWeight.
func lifecycleActions(s *lifecycleMachine) map[string]func(*rapid.T) {
	actions := rapid.StateMachineActions(s)
	for name, extra := range extraWeight {
		for i := 1; i <= extra; i++ {
			alias := "+" + name
			if i > 1 {
				alias += fmt.Sprintf("#%d", i)
			}
			actions[alias] = actions[name]
		}
	}
	return actions
}

// TestLifecycleMachine runs the lifecycle state machine.
func TestLifecycleMachine(t *testing.T) {
	rapid.Check(t, lifecycleProp)
}

// FuzzLifecycleMachine runs the lifecycle state machine on fuzzer input.
func FuzzLifecycleMachine(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(lifecycleProp))
}

// ---- generators ----

func genThreadID() *rapid.Generator[string] { return rapid.SampledFrom(threadPool) }

// genInstanceID is mostly a registered instance, sometimes an unknown one.
func genInstanceID() *rapid.Generator[string] {
	return rapid.Custom(func(t *rapid.T) string {
		if n := rapid.IntRange(0, 9).Draw(t, "n"); n < 9 {
			return instancePool[n%len(instancePool)]
		}
		return unknownInstance
	})
}

// genThread draws a thread id: mostly an active thread, else any id of the
// pool (which may be archived, deleted or never created).
func (s *lifecycleMachine) genThread(t *rapid.T) string {
	var active []string
	for _, id := range s.m.threadIDs() {
		if !s.m.threads[id].archived {
			active = append(active, id)
		}
	}
	if len(active) > 0 && rapid.IntRange(0, 3).Draw(t, "active") > 0 {
		return pick(t, "thread", active)
	}
	return genThreadID().Draw(t, "thread")
}

// pick draws one element of a non-empty list by index, so that shrinking
// moves towards the oldest.
func pick[E any](t *rapid.T, label string, list []E) E {
	return list[rapid.IntRange(0, len(list)-1).Draw(t, label)]
}

// ---- checks ----

// wantErr fails unless got matches want (nil: no error).
func wantErr(t *rapid.T, call string, got, want error) {
	t.Helper()
	switch {
	case want == nil && got != nil:
		t.Fatalf("%s = %v, want success", call, got)
	case want != nil && !errors.Is(got, want):
		t.Fatalf("%s = %v, want %v", call, got, want)
	}
}

func bearerToken(t *rapid.T, call, authz string) string {
	t.Helper()
	tok, ok := strings.CutPrefix(authz, "Bearer ")
	if !ok || tok == "" {
		t.Fatalf("%s: Authorization %q is not a bearer value", call, authz)
	}
	return tok
}

// liveness says, for every token the model knows, whether the runtime
// authenticates it now. It does not consult the model's prediction.
func (s *lifecycleMachine) liveness() map[string]bool {
	out := make(map[string]bool, len(s.m.creds))
	for _, c := range s.m.creds {
		_, err := s.rt.Authenticate(c.token)
		out[c.token] = err == nil
	}
	return out
}

// frame checks that an action changed the liveness of no token outside
// mayChange (SPEC §6 invariant 4 and the "revoke nothing" rows of §3).
func (s *lifecycleMachine) frame(t *rapid.T, call string, before map[string]bool, mayChange func(*modelCred) bool) {
	t.Helper()
	after := s.liveness()
	for _, c := range s.m.creds {
		was, ok := before[c.token]
		if !ok || (mayChange != nil && mayChange(c)) {
			continue
		}
		if was != after[c.token] {
			t.Fatalf("%s changed the liveness of %s (%s) from %v to %v", call, c.id, c.describe(), was, after[c.token])
		}
	}
}

func (c *modelCred) describe() string {
	if c.kind == kindProvider {
		return fmt.Sprintf("provider credential of (%s, %s)", c.thread, c.instance)
	}
	return fmt.Sprintf("token of client %s", c.client)
}

func pairOf(thread, instance string) func(*modelCred) bool {
	return func(c *modelCred) bool {
		return c.kind == kindProvider && c.thread == thread && c.instance == instance
	}
}

func threadOf(thread string) func(*modelCred) bool {
	return func(c *modelCred) bool { return c.kind == kindProvider && c.thread == thread }
}

func instanceOf(instance string) func(*modelCred) bool {
	return func(c *modelCred) bool { return c.kind == kindProvider && c.instance == instance }
}

func clientOf(client string) func(*modelCred) bool {
	return func(c *modelCred) bool { return c.kind == kindClient && c.client == client }
}

// noneOfThreadLive checks SPEC §6 invariant 5 on the runtime: after archive
// or delete of thread, none of its tokens authenticates.
func (s *lifecycleMachine) noneOfThreadLive(t *rapid.T, call, thread string) {
	t.Helper()
	for _, c := range s.m.creds {
		if c.kind != kindProvider || c.thread != thread {
			continue
		}
		if p, err := s.rt.Authenticate(c.token); err == nil {
			t.Fatalf("after %s, %s (%s) still authenticates as %+v", call, c.id, c.describe(), p)
		}
	}
}

var cmpOpts = cmp.Options{cmpopts.EquateEmpty()}

// Check is the invariant: SPEC §6 invariant 1 and model agreement.
func (s *lifecycleMachine) Check(t *rapid.T) {
	// Every token ever minted authenticates exactly when the model says it
	// is live, as the principal the model expects; a dead one fails with the
	// reason the model expects.
	for _, c := range s.m.creds {
		got, err := s.rt.Authenticate(c.token)
		want := s.m.authFailure(c)
		if want == "" {
			if err != nil {
				t.Fatalf("Authenticate(%s: %s) = %v, want live", c.id, c.describe(), err)
			}
			if diff := cmp.Diff(s.m.principal(c), got, cmpOpts); diff != "" {
				t.Fatalf("Authenticate(%s: %s) principal mismatch (-want +got):\n%s", c.id, c.describe(), diff)
			}
			continue
		}
		var ae *mcpruntime.AuthError
		if !errors.Is(err, mcpruntime.ErrUnauthenticated) || !errors.As(err, &ae) {
			t.Fatalf("Authenticate(%s: %s) = %+v, %v; want an AuthError (%s)", c.id, c.describe(), got, err, want)
		}
		if ae.Reason != want {
			t.Fatalf("Authenticate(%s: %s) reason = %q, want %q", c.id, c.describe(), ae.Reason, want)
		}
	}
	// Two different live principals never share a namespace (SPEC §2): a
	// provider credential's is its own, a client grant's is the grant's.
	owners := map[string]string{}
	for _, c := range s.m.creds {
		p, err := s.rt.Authenticate(c.token)
		if err != nil {
			continue
		}
		owner := "credential " + p.CredentialID
		if p.Kind == kindClient {
			owner = "client " + p.Client
		}
		if prev, ok := owners[p.Namespace]; ok && prev != owner {
			t.Fatalf("namespace %s is shared by %s and %s", p.Namespace, prev, owner)
		}
		owners[p.Namespace] = owner
	}
	// Threads: status, current instance, active run, messages.
	for _, id := range threadPool {
		got, err := s.rt.Thread(s.ctx, id)
		if s.m.threads[id] == nil {
			if !errors.Is(err, mcpruntime.ErrUnknownThread) {
				t.Fatalf("Thread(%s) = %+v, %v; want ErrUnknownThread", id, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Thread(%s) = %v, want success", id, err)
		}
		if diff := cmp.Diff(s.m.thread(id), got, cmpOpts); diff != "" {
			t.Fatalf("Thread(%s) mismatch (-want +got):\n%s", id, diff)
		}
	}
	all, err := s.rt.Threads(s.ctx)
	if err != nil {
		t.Fatalf("Threads = %v", err)
	}
	var ids []string
	for _, th := range all {
		ids = append(ids, th.ID)
	}
	if diff := cmp.Diff(s.m.threadIDs(), ids, cmpOpts); diff != "" {
		t.Fatalf("Threads ids mismatch (-want +got):\n%s", diff)
	}
	s.checkSubscriptions(t)
	s.checkJournal(t)
	// A session the model holds open was never closed in the driver.
	for _, ps := range s.m.sessions {
		if ps.open {
			if d := s.inproc.Session(ps.id); d == nil || d.Closed() {
				t.Fatalf("provider session %s of %s is open in the model, driver session %v", ps.id, ps.instance, d)
			}
		}
	}
}

// checkJournal checks the journal's credential records against the model
// (SPEC §3.7a): every provider credential the current runtime minted has
// exactly one credential.minted; one the model says is revoked has exactly
// one credential.revoked, after its mint; one the model says is live and
// not expired has none; none is revoked twice.
func (s *lifecycleMachine) checkJournal(t *rapid.T) {
	page, err := s.rt.Records(0, 1<<20)
	if err != nil {
		t.Fatalf("Records: %v", err)
	}
	minted, revoked := map[string]uint64{}, map[string]uint64{}
	for _, rec := range page.Records {
		switch rec.Kind {
		case mcpruntime.RecordCredentialMinted:
			if minted[rec.Credential] != 0 {
				t.Fatalf("credential %s minted twice in the journal (records %d, %d)", rec.Credential, minted[rec.Credential], rec.ID)
			}
			minted[rec.Credential] = rec.ID
		case mcpruntime.RecordCredentialRevoked:
			if revoked[rec.Credential] != 0 {
				t.Fatalf("credential %s revoked twice in the journal (records %d, %d)", rec.Credential, revoked[rec.Credential], rec.ID)
			}
			revoked[rec.Credential] = rec.ID
		}
	}
	for _, c := range s.m.creds {
		if c.kind != kindProvider || s.restored[c.id] {
			continue
		}
		if minted[c.id] == 0 {
			t.Fatalf("credential %s (%s): no credential.minted in the journal", c.id, c.describe())
		}
		switch {
		case c.state == credRevoked && revoked[c.id] == 0:
			t.Fatalf("credential %s (%s) is revoked, but the journal has no credential.revoked", c.id, c.describe())
		case revoked[c.id] != 0 && revoked[c.id] < minted[c.id]:
			t.Fatalf("credential %s: revoked (record %d) before minted (record %d)", c.id, revoked[c.id], minted[c.id])
		case s.m.live(c) && revoked[c.id] != 0:
			t.Fatalf("credential %s (%s) is live, but the journal says it was revoked (record %d)", c.id, c.describe(), revoked[c.id])
		}
	}
}

// closeAndCheck closes the runtime: afterwards no token authenticates and
// every method returns ErrClosed (SPEC §3 "stop all / shutdown").
func (s *lifecycleMachine) closeAndCheck(t *rapid.T) {
	if err := s.rt.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range s.m.creds {
		if p, err := s.rt.Authenticate(c.token); err == nil {
			t.Fatalf("after Close, %s (%s) authenticates as %+v", c.id, c.describe(), p)
		}
	}
	if _, err := s.rt.CreateThread(s.ctx, "t0", mcpruntime.ThreadOptions{}); !errors.Is(err, mcpruntime.ErrClosed) {
		t.Fatalf("CreateThread after Close = %v, want ErrClosed", err)
	}
}

// ---- actions ----

// CreateThread creates a pool thread, sometimes with an initial instance;
// the id may exist or have been deleted.
func (s *lifecycleMachine) CreateThread(t *rapid.T) {
	id := genThreadID().Draw(t, "thread")
	var free []string
	for _, id := range threadPool {
		if s.m.threads[id] == nil {
			free = append(free, id)
		}
	}
	if len(free) > 0 && rapid.IntRange(0, 3).Draw(t, "free") > 0 {
		id = pick(t, "freeThread", free)
	}
	inst := rapid.SampledFrom([]string{"", "", "i0", "i1", "i2", unknownInstance}).Draw(t, "instance")
	call := fmt.Sprintf("CreateThread(%s, %q)", id, inst)
	before := s.liveness()
	want := s.m.createThread(id, inst)
	got, err := s.rt.CreateThread(s.ctx, id, mcpruntime.ThreadOptions{Instance: inst})
	wantErr(t, call, err, want)
	if err == nil {
		if diff := cmp.Diff(s.m.thread(id), got, cmpOpts); diff != "" {
			t.Fatalf("%s mismatch (-want +got):\n%s", call, diff)
		}
	}
	s.frame(t, call, before, nil)
}

// OpenProviderSession opens (or reuses) the provider session of a pair.
func (s *lifecycleMachine) OpenProviderSession(t *rapid.T) {
	th := s.genThread(t)
	inst := genInstanceID().Draw(t, "instance")
	call := fmt.Sprintf("OpenProviderSession(%s, %s)", th, inst)
	before := s.liveness()
	out := s.m.predictOpen(th, inst)
	ps, err := s.rt.OpenProviderSession(s.ctx, th, inst)
	wantErr(t, call, err, out.err)
	if out.failed {
		// Nothing the caller can see was minted, and nothing else changed.
		s.m.applyOpenFailure(inst)
		s.frame(t, call, before, nil)
		return
	}
	if err != nil {
		s.frame(t, call, before, nil)
		return
	}
	if ps.Endpoint != testEndpoint {
		t.Fatalf("%s: Endpoint = %q, want %q", call, ps.Endpoint, testEndpoint)
	}
	if diff := cmp.Diff(s.m.instances[inst].caps, ps.Capabilities, cmpOpts); diff != "" {
		t.Fatalf("%s: Capabilities (-want +got):\n%s", call, diff)
	}
	var tok string
	switch {
	case out.reused:
		if ps.ID != out.session.id || ps.CredentialID != out.cred.id || !ps.Reused || ps.Authorization != "" {
			t.Fatalf("%s = %+v, want reuse of session %s with credential %s and no Authorization", call, ps, out.session.id, out.cred.id)
		}
	default:
		if ps.Reused || s.m.credByID[ps.CredentialID] != nil || ps.CredentialID == "" {
			t.Fatalf("%s = %+v, want a newly minted credential", call, ps)
		}
		tok = bearerToken(t, call, ps.Authorization)
		if out.attach && ps.ID != out.session.id {
			t.Fatalf("%s: session %s, want the open multi-thread session %s", call, ps.ID, out.session.id)
		}
		if !out.attach && s.m.sessByID[ps.ID] != nil {
			t.Fatalf("%s: session %s, want a new session", call, ps.ID)
		}
		// The driver got the credential's config with the token (SPEC §3).
		d := s.inproc.Session(ps.ID)
		if d == nil {
			t.Fatalf("%s: the driver has no session %s", call, ps.ID)
		}
		found := false
		for _, b := range d.Bindings() {
			if b.Thread == th && b.Instance == inst && b.CredentialID == ps.CredentialID &&
				b.Authorization == ps.Authorization && b.Endpoint == testEndpoint {
				found = true
			}
		}
		if !found {
			t.Fatalf("%s: driver session %s has no binding for %s with the minted Authorization: %+v", call, ps.ID, ps.CredentialID, d.Bindings())
		}
	}
	s.m.applyOpen(th, inst, out, ps.ID, ps.CredentialID, tok)
	s.frame(t, call, before, pairOf(th, inst))
}

// FailNextOpen makes the driver fail the next session open of an instance
// (SPEC §3 "open fails").
func (s *lifecycleMachine) FailNextOpen(t *rapid.T) {
	inst := rapid.SampledFrom(instancePool).Draw(t, "instance")
	s.inproc.FailNextOpen(inst, errInjected)
	s.m.failNext[inst] = true
}

// ReleaseProviderSession releases a session the runtime returned (maybe
// released or dead already) or one that never existed.
func (s *lifecycleMachine) ReleaseProviderSession(t *rapid.T) {
	id := unknownSession
	if len(s.m.sessions) > 0 && rapid.IntRange(0, 7).Draw(t, "unknown") > 0 {
		id = pick(t, "session", s.m.sessions).id
	}
	call := fmt.Sprintf("ReleaseProviderSession(%s)", id)
	var mayChange func(*modelCred) bool
	if ps := s.m.sessByID[id]; ps != nil {
		mayChange = instanceOf(ps.instance)
	}
	before := s.liveness()
	want := s.m.release(id)
	err := s.rt.ReleaseProviderSession(s.ctx, id)
	wantErr(t, call, err, want)
	if err == nil {
		// Release answers once the driver session is closed.
		if d := s.inproc.Session(id); d == nil || !d.Closed() {
			t.Fatalf("%s returned, driver session %v not closed", call, d)
		}
	}
	s.frame(t, call, before, mayChange)
}

// KillProviderSession makes the driver report a session dead, as a crashed
// process would, and waits until the runtime has handled it.
func (s *lifecycleMachine) KillProviderSession(t *rapid.T) {
	if len(s.m.sessions) == 0 {
		t.Skip("no provider session yet")
	}
	ps := pick(t, "session", s.m.sessions)
	if s.durable.before(ps.id) {
		t.Skip("a session of a runtime before a restart: its events reach no one")
	}
	call := fmt.Sprintf("Kill(%s of %s)", ps.id, ps.instance)
	d := s.inproc.Session(ps.id)
	if d == nil {
		t.Fatalf("%s: the driver has no session %s", call, ps.id)
	}
	wasOpen := ps.open
	before := s.liveness()
	closes := s.closes.Load()
	s.m.kill(ps.id)
	d.Kill(nil)
	if wasOpen {
		// Wait for the death's close event, then for the driver's Close: the
		// runtime revokes a closing session's credentials first and calls
		// Close once they no longer authenticate. Then round-trip
		// through every thread actor, so that every earlier message of
		// theirs was handled.
		deadline := time.Now().Add(waitTimeout)
		for s.closes.Load() == closes || !d.Closed() {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no provider-session close event, or no driver Close, after %v", call, waitTimeout)
			}
			time.Sleep(time.Millisecond)
		}
		s.barrier(t, call)
	}
	s.frame(t, call, before, instanceOf(ps.instance))
}

// barrier round-trips through every existing thread's actor with a
// mutation from a principal that does not exist, which must be refused.
func (s *lifecycleMachine) barrier(t *rapid.T, call string) {
	t.Helper()
	for _, id := range s.m.threadIDs() {
		want := mcpruntime.ErrNotLive
		if s.m.threads[id].archived {
			want = mcpruntime.ErrArchivedThread
		}
		_, err := s.rt.Post(s.ctx, mcpruntime.Principal{}, id, "barrier")
		wantErr(t, fmt.Sprintf("%s: barrier Post(nobody, %s)", call, id), err, want)
	}
}

// SwitchProvider switches a thread's current instance.
func (s *lifecycleMachine) SwitchProvider(t *rapid.T) {
	th := s.genThread(t)
	inst := genInstanceID().Draw(t, "instance")
	call := fmt.Sprintf("SwitchProvider(%s, %s)", th, inst)
	before := s.liveness()
	prev, ended, want := s.m.switchProvider(th, inst)
	res, err := s.rt.SwitchProvider(s.ctx, th, inst)
	wantErr(t, call, err, want)
	if err == nil && (res.Previous != prev || res.EndedRun != ended) {
		t.Fatalf("%s = %+v, want Previous %q EndedRun %q", call, res, prev, ended)
	}
	// A switch ends the run but lets the switched-away agent finish its
	// turn: it interrupts nothing (SPEC §3.7).
	if turn := s.turns[ended]; turn != nil && slices.Contains(s.inproc.Session(turn.session).Interrupts(), ended) {
		t.Fatalf("%s interrupted the turn %s of session %s", call, ended, turn.session)
	}
	s.frame(t, call, before, nil)
}

// Rotate rotates a pair's credential.
func (s *lifecycleMachine) Rotate(t *rapid.T) {
	th := s.genThread(t)
	inst := genInstanceID().Draw(t, "instance")
	call := fmt.Sprintf("Rotate(%s, %s)", th, inst)
	before := s.liveness()
	want := s.m.predictRotate(th, inst)
	cred, err := s.rt.Rotate(s.ctx, th, inst)
	wantErr(t, call, err, want)
	if err != nil {
		s.frame(t, call, before, nil)
		return
	}
	if cred.ID == "" || s.m.credByID[cred.ID] != nil {
		t.Fatalf("%s = %+v, want a new credential", call, cred)
	}
	tok := bearerToken(t, call, cred.Authorization)
	s.m.applyRotate(th, inst, cred.ID, tok)
	// A session serving the pair was re-bound: its driver got the new token.
	for _, ps := range s.m.sessions {
		if ps.open && slices.Contains(ps.creds, cred.ID) {
			got := s.inproc.Session(ps.id).Authorizations()
			if len(got) == 0 || got[len(got)-1] != cred.Authorization {
				t.Fatalf("%s: driver session %s was not re-bound to the new credential; its Authorizations end with %q", call, ps.id, got[max(0, len(got)-1):])
			}
		}
	}
	s.frame(t, call, before, pairOf(th, inst))
}

// StartRun starts a run, mostly for the current instance.
func (s *lifecycleMachine) StartRun(t *rapid.T) {
	th := s.genThread(t)
	inst := genInstanceID().Draw(t, "instance")
	if mt := s.m.threads[th]; mt != nil && mt.instance != "" && rapid.IntRange(0, 3).Draw(t, "current") > 0 {
		inst = mt.instance
	}
	call := fmt.Sprintf("StartRun(%s, %s)", th, inst)
	before := s.liveness()
	want := s.m.predictStartRun(th, inst)
	runID, err := s.rt.StartRun(s.ctx, th, inst)
	wantErr(t, call, err, want)
	if err == nil {
		if runID == "" || slices.Contains(s.m.runs, runID) {
			t.Fatalf("%s = %q, want a new run id", call, runID)
		}
		s.m.applyStartRun(th, inst, runID)
	}
	s.frame(t, call, before, nil)
}

// EndRun ends the active run, by id, by "", or names a stale or unknown run.
func (s *lifecycleMachine) EndRun(t *rapid.T) {
	th := s.genThread(t)
	runID := ""
	switch rapid.IntRange(0, 3).Draw(t, "which") {
	case 1:
		if mt := s.m.threads[th]; mt != nil {
			runID = mt.runID
		}
	case 2:
		if len(s.m.runs) > 0 {
			runID = pick(t, "run", s.m.runs)
		}
	case 3:
		runID = unknownRun
	}
	call := fmt.Sprintf("EndRun(%s, %q)", th, runID)
	before := s.liveness()
	var active string // the run EndRun ends, if it does
	if mt := s.m.threads[th]; mt != nil {
		active = mt.runID
	}
	want := s.m.endRun(th, runID)
	wantErr(t, call, s.rt.EndRun(s.ctx, th, runID), want)
	// Ending a run that is an agent's turn interrupts the turn, before
	// EndRun returns (SPEC §3.7); a run that is no turn interrupts nothing.
	if turn := s.turns[active]; want == nil && turn != nil {
		if ps := s.m.sessByID[turn.session]; ps.open && !slices.Contains(s.inproc.Session(turn.session).Interrupts(), active) {
			t.Fatalf("%s ended the turn %s, its session %s was not interrupted", call, active, turn.session)
		}
	}
	s.frame(t, call, before, nil)
}

// StartTurn starts a run whose input is the agent's turn (SPEC §3.7),
// mostly on the thread's current instance.
func (s *lifecycleMachine) StartTurn(t *rapid.T) {
	th := s.genThread(t)
	inst := genInstanceID().Draw(t, "instance")
	if mt := s.m.threads[th]; mt != nil && mt.instance != "" && rapid.IntRange(0, 3).Draw(t, "current") > 0 {
		inst = mt.instance
	}
	input := rapid.SampledFrom([]string{"post a summary", "read the thread", ""}).Draw(t, "input")
	call := fmt.Sprintf("StartTurn(%s, %s, %q)", th, inst, input)
	before := s.liveness()
	want, starts := s.m.predictStartTurn(th, inst, input)
	ps := s.m.attachedSession(th, inst)
	runID, err := s.rt.StartTurn(s.ctx, th, inst, input)
	wantErr(t, call, err, want)
	switch {
	case err == nil:
		if runID == "" || slices.Contains(s.m.runs, runID) {
			t.Fatalf("%s = %q, want a new run id", call, runID)
		}
		got := s.inproc.Session(ps.id).Turns()
		if len(got) == 0 || got[len(got)-1] != (driver.Turn{Thread: th, ID: runID, Input: input}) {
			t.Fatalf("%s: session %s was given the turns %+v, want the last one run %s of %s with the input", call, ps.id, got, runID, th)
		}
		s.m.applyStartRun(th, inst, runID)
		s.turns[runID] = &machineTurn{thread: th, session: ps.id}
	case starts:
		s.m.applyRefusedTurn(th)
	}
	s.frame(t, call, before, nil)
}

// AgentEndsTurn makes an agent report the end of a turn it was given, as
// a real one does when its answer is complete: the turn's run ends, unless
// it is no longer the thread's (ended by the host, or overtaken by a
// switch, whose agent goes on to finish its turn), or the session is
// closed (its events are no longer heard).
func (s *lifecycleMachine) AgentEndsTurn(t *rapid.T) {
	var open []string
	for id, turn := range s.turns {
		if !turn.ended {
			open = append(open, id)
		}
	}
	if len(open) == 0 {
		t.Skip("no turn in progress")
	}
	slices.Sort(open)
	runID := pick(t, "turn", open)
	turn := s.turns[runID]
	turn.ended = true
	outcome := rapid.SampledFrom([]string{driver.TurnCompleted, driver.TurnFailed}).Draw(t, "outcome")
	call := fmt.Sprintf("AgentEndsTurn(%s of %s, %s)", runID, turn.thread, outcome)
	before := s.liveness()
	mt := s.m.threads[turn.thread]
	ends := mt != nil && mt.runID == runID && s.m.sessByID[turn.session].open
	s.inproc.Session(turn.session).End(turn.thread, runID, outcome)
	if ends {
		// The runtime ends the run on a goroutine of its own once it heard
		// the end; poll for it.
		deadline := time.Now().Add(waitTimeout)
		for {
			got, err := s.rt.Thread(s.ctx, turn.thread)
			if err != nil {
				t.Fatalf("%s: Thread(%s) = %v", call, turn.thread, err)
			}
			if got.Run == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the run %+v still active after %v", call, got.Run, waitTimeout)
			}
			time.Sleep(time.Millisecond)
		}
		if err := s.m.endRun(turn.thread, runID); err != nil {
			t.Fatalf("%s: model endRun: %v", call, err)
		}
	}
	s.frame(t, call, before, nil)
}

// Touch refreshes a thread's credentials.
func (s *lifecycleMachine) Touch(t *rapid.T) {
	th := s.genThread(t)
	call := fmt.Sprintf("Touch(%s)", th)
	before := s.liveness()
	want := s.m.touch(th)
	wantErr(t, call, s.rt.Touch(s.ctx, th), want)
	s.frame(t, call, before, nil)
}

// Detach is a plain handoff: it revokes nothing.
func (s *lifecycleMachine) Detach(t *rapid.T) {
	th := s.genThread(t)
	call := fmt.Sprintf("Detach(%s)", th)
	before := s.liveness()
	want := s.m.detach(th)
	wantErr(t, call, s.rt.Detach(s.ctx, th), want)
	s.frame(t, call, before, nil)
}

// Archive archives a thread.
func (s *lifecycleMachine) Archive(t *rapid.T) {
	th := genThreadID().Draw(t, "thread")
	call := fmt.Sprintf("Archive(%s)", th)
	before := s.liveness()
	want := s.m.archive(th)
	err := s.rt.Archive(s.ctx, th)
	wantErr(t, call, err, want)
	if err == nil {
		s.noneOfThreadLive(t, call, th)
	}
	s.frame(t, call, before, threadOf(th))
}

// DeleteThread deletes a thread; its id can be created again.
func (s *lifecycleMachine) DeleteThread(t *rapid.T) {
	th := genThreadID().Draw(t, "thread")
	var archived []string
	for _, id := range s.m.threadIDs() {
		if s.m.threads[id].archived {
			archived = append(archived, id)
		}
	}
	if len(archived) > 0 && rapid.Bool().Draw(t, "archived") {
		th = pick(t, "archivedThread", archived)
	}
	call := fmt.Sprintf("DeleteThread(%s)", th)
	before := s.liveness()
	want := s.m.deleteThread(th)
	err := s.rt.DeleteThread(s.ctx, th)
	wantErr(t, call, err, want)
	if err == nil {
		s.noneOfThreadLive(t, call, th)
	}
	s.frame(t, call, before, threadOf(th))
}

// clientCredID learns the credential id of a fresh client token, which must
// authenticate.
func (s *lifecycleMachine) clientCredID(t *rapid.T, call, tok string) string {
	t.Helper()
	p, err := s.rt.Authenticate(tok)
	if err != nil {
		t.Fatalf("%s: the fresh token does not authenticate: %v", call, err)
	}
	if p.CredentialID == "" || s.m.credByID[p.CredentialID] != nil {
		t.Fatalf("%s: the fresh token authenticates as %+v, want a new credential", call, p)
	}
	return p.CredentialID
}

// IssueClient creates a client grant, sometimes with a bad access level.
func (s *lifecycleMachine) IssueClient(t *rapid.T) {
	access := rapid.SampledFrom([]string{readOnly, readWrite, readOnly, readWrite, "admin"}).Draw(t, "access")
	call := fmt.Sprintf("IssueClient(%q)", access)
	before := s.liveness()
	want := s.m.predictIssueClient(access)
	ct, err := s.rt.IssueClient(s.ctx, fmt.Sprintf("client %d", len(s.m.clients)), access)
	wantErr(t, call, err, want)
	if err == nil {
		if ct.ClientID == "" || s.m.clientByID[ct.ClientID] != nil || ct.Token == "" {
			t.Fatalf("%s = %+v, want a new grant and token", call, ct)
		}
		s.m.applyIssueClient(ct.ClientID, access, ct.Token, s.clientCredID(t, call, ct.Token))
	}
	s.frame(t, call, before, nil)
}

// pickClient draws a grant ever issued (maybe revoked) or an unknown id.
func (s *lifecycleMachine) pickClient(t *rapid.T) string {
	if len(s.m.clients) > 0 && rapid.IntRange(0, 7).Draw(t, "unknown") > 0 {
		return pick(t, "client", s.m.clients).id
	}
	return unknownClient
}

// RefreshClient issues a new token for a grant, maybe revoking the others.
func (s *lifecycleMachine) RefreshClient(t *rapid.T) {
	id := s.pickClient(t)
	revokePrevious := rapid.Bool().Draw(t, "revokePrevious")
	call := fmt.Sprintf("RefreshClient(%s, %v)", id, revokePrevious)
	before := s.liveness()
	want := s.m.predictRefreshClient(id)
	tok, err := s.rt.RefreshClient(s.ctx, id, revokePrevious)
	wantErr(t, call, err, want)
	if err == nil {
		s.m.applyRefreshClient(id, revokePrevious, tok, s.clientCredID(t, call, tok))
	}
	s.frame(t, call, before, clientOf(id))
}

// RevokeClient revokes a grant.
func (s *lifecycleMachine) RevokeClient(t *rapid.T) {
	id := s.pickClient(t)
	call := fmt.Sprintf("RevokeClient(%s)", id)
	before := s.liveness()
	want := s.m.revokeClient(id)
	wantErr(t, call, s.rt.RevokeClient(s.ctx, id), want)
	s.frame(t, call, before, clientOf(id))
}

// Post posts as the principal of a token ever minted, live or not, to its
// own thread ("") or a pool thread.
func (s *lifecycleMachine) Post(t *rapid.T) {
	if len(s.m.creds) == 0 {
		t.Skip("no token yet")
	}
	// Mostly a caller the model says may mutate, else a live one, else any.
	c := pick(t, "caller", s.m.creds)
	var live, mutators []*modelCred
	for _, c := range s.m.creds {
		if s.m.live(c) {
			live = append(live, c)
			if s.m.mayMutate(c) {
				mutators = append(mutators, c)
			}
		}
	}
	switch which := rapid.IntRange(0, 3).Draw(t, "which"); {
	case which >= 2 && len(mutators) > 0:
		c = pick(t, "mutator", mutators)
	case which >= 1 && len(live) > 0:
		c = pick(t, "liveCaller", live)
	}
	target := ""
	if rapid.IntRange(0, 2).Draw(t, "explicit") == 0 {
		target = s.genThread(t)
	}
	s.texts++
	text := fmt.Sprintf("message %d", s.texts)
	if rapid.IntRange(0, 9).Draw(t, "empty") == 0 {
		text = ""
	}
	call := fmt.Sprintf("Post(%s: %s, %q, %q)", c.id, c.describe(), target, text)
	before := s.liveness()
	want, wantE := s.m.post(c, target, text)
	got, err := s.rt.Post(s.ctx, s.m.principal(c), target, text)
	wantErr(t, call, err, wantE)
	if err == nil {
		if diff := cmp.Diff(want.public(), got, cmpOpts); diff != "" {
			t.Fatalf("%s message mismatch (-want +got):\n%s", call, diff)
		}
	}
	s.frame(t, call, before, nil)
}

// AdvanceClock moves time on, sometimes past the liveness window. Tokens
// can only die of it. Then the idle provider sessions are released, as the
// instances' timers would do at that moment (SPEC §3 "release / close a
// provider session": each one's credentials are revoked unless another open
// session holds them).
func (s *lifecycleMachine) AdvanceClock(t *rapid.T) {
	s.advance(t, rapid.SampledFrom(clockSteps).Draw(t, "by"))
}

// advance is AdvanceClock by d.
func (s *lifecycleMachine) advance(t *rapid.T, d time.Duration) {
	before := s.liveness()
	s.clock.Advance(d)
	s.m.now = s.m.now.Add(d)
	after := s.liveness()
	for _, c := range s.m.creds {
		if !before[c.token] && after[c.token] {
			t.Fatalf("AdvanceClock(%v) revived %s (%s)", d, c.id, c.describe())
		}
	}
	call := fmt.Sprintf("ReleaseIdleProviderSessions after AdvanceClock(%v)", d)
	want := s.m.releaseIdle()
	got, err := s.rt.ReleaseIdleProviderSessions(s.ctx)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if diff := cmp.Diff(want, got, cmpOpts); diff != "" {
		t.Fatalf("%s: released sessions (-want +got):\n%s", call, diff)
	}
	for _, id := range got {
		if d := s.inproc.Session(id); d == nil || !d.Closed() {
			t.Fatalf("%s: released %s, but its driver session is not closed", call, id)
		}
	}
	// Only the credentials the released sessions held may have died.
	held := map[string]bool{}
	for _, id := range got {
		for _, c := range s.m.sessByID[id].creds {
			held[c] = true
		}
	}
	s.frame(t, call, after, func(c *modelCred) bool { return c.kind == kindProvider && held[c.id] })
}

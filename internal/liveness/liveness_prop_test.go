package liveness_test

import (
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/liveness"
	"github.com/agenthost/mcpruntime/memdb"
)

// The monitor machine drives random sequences of credential writes
// (issue, refresh, revoke, delete), watches, stops and clock advances
// against a model of plain maps: after every action each watcher has been
// called once if its key has been dead at some point while it watched, and
// never otherwise; the monitor keeps a key for every key with a watcher
// left and no other, and no more timer entries than keys.

// modelCred is what the model knows of one credential.
type modelCred struct {
	namespace string
	expires   time.Time // zero: never
	gone      bool      // revoked or deleted
}

// modelWatch is one watch: its key, its calls and whether it has stopped.
type modelWatch struct {
	namespace bool // else a credential
	name      string
	calls     *counter
	stop      func()
	stopped   bool
	fired     bool // the model's verdict: its key has been dead while it watched
}

type monitorMachine struct {
	store   *memdb.Store
	clock   *actortest.Clock
	mon     *liveness.Monitor
	creds   map[string]*modelCred
	ids     []string // every credential issued, in issue order
	spaces  []string // every namespace issued into, in issue order
	watches []*modelWatch
	next    int // the id counter, so that shrinking keeps ids stable
}

func newMonitorMachine(t *rapid.T) *monitorMachine {
	store, err := memdb.New()
	if err != nil {
		t.Fatalf("memdb.New: %v", err)
	}
	clock := actortest.NewClock(t0)
	mon := liveness.New(store, clock.Now)
	t.Cleanup(mon.Close)
	s := &monitorMachine{store: store, clock: clock, mon: mon, creds: map[string]*modelCred{}}
	for _, g := range propGrants {
		s.spaces = append(s.spaces, "client:"+g)
	}
	return s
}

// Client grants the machine issues tokens of; the namespace of a grant with
// no token yet is unknown, so watching it is a dead-at-watch case too.
var propGrants = []string{"g1", "g2", "g3"}

func (s *monitorMachine) live(c *modelCred) bool {
	return c != nil && !c.gone && (c.expires.IsZero() || s.clock.Now().Before(c.expires))
}

func (s *monitorMachine) keyLive(w *modelWatch) bool {
	if !w.namespace {
		return s.live(s.creds[w.name])
	}
	for _, c := range s.creds {
		if c.namespace == w.name && s.live(c) {
			return true
		}
	}
	return false
}

// genExpiry is never, or 1 to 120 minutes from now.
func (s *monitorMachine) genExpiry(t *rapid.T) time.Time {
	m := rapid.IntRange(0, 120).Draw(t, "minutes")
	if m == 0 {
		return time.Time{}
	}
	return s.clock.Now().Add(time.Duration(m) * time.Minute)
}

// liveCred draws a credential the model holds live, or skips.
func (s *monitorMachine) liveCred(t *rapid.T) (string, *modelCred) {
	var live []string
	for _, id := range s.ids {
		if s.live(s.creds[id]) {
			live = append(live, id)
		}
	}
	if len(live) == 0 {
		t.Skip("no live credential")
	}
	id := rapid.SampledFrom(live).Draw(t, "credential")
	return id, s.creds[id]
}

func (s *monitorMachine) write(t *rapid.T, call string, f func(*memdb.Writer) error) {
	if err := s.store.Write(f); err != nil {
		t.Fatalf("%s: %v", call, err)
	}
}

// Issue stores a new provider credential or a token of a client grant.
func (s *monitorMachine) Issue(t *rapid.T) {
	s.next++
	id := fmt.Sprintf("c%d", s.next)
	expires := s.genExpiry(t)
	var c *memdb.Credential
	if grant := rapid.IntRange(-1, len(propGrants)-1).Draw(t, "grant"); grant < 0 {
		c = provider(id, expires)
	} else {
		c = client(id, propGrants[grant], expires)
	}
	s.write(t, "issue "+id, func(w *memdb.Writer) error { return w.PutCredential(c) })
	s.creds[id] = &modelCred{namespace: c.Namespace, expires: expires}
	s.ids = append(s.ids, id)
	if c.Kind == memdb.KindProvider {
		s.spaces = append(s.spaces, c.Namespace)
	}
	s.settle()
}

// Refresh moves a live credential's expiry, earlier or later (a turn start
// slides it; the heap must also follow one that comes closer).
func (s *monitorMachine) Refresh(t *rapid.T) {
	id, mc := s.liveCred(t)
	expires := s.genExpiry(t)
	s.write(t, "refresh "+id, func(w *memdb.Writer) error {
		c, err := w.Credential(id)
		if err != nil {
			return err
		}
		cc := *c
		cc.Expires = expires
		return w.PutCredential(&cc)
	})
	mc.expires = expires
	s.settle()
}

// Revoke revokes a live credential.
func (s *monitorMachine) Revoke(t *rapid.T) {
	id, mc := s.liveCred(t)
	s.write(t, "revoke "+id, func(w *memdb.Writer) error {
		c, err := w.Credential(id)
		if err != nil {
			return err
		}
		cc := *c
		cc.State, cc.Revoked = memdb.StateRevoked, s.clock.Now()
		return w.PutCredential(&cc)
	})
	mc.gone = true
	s.settle()
}

// Delete removes a credential that is still stored, live or not.
func (s *monitorMachine) Delete(t *rapid.T) {
	var stored []string
	for _, id := range s.ids {
		if _, ok := s.creds[id]; ok {
			stored = append(stored, id)
		}
	}
	if len(stored) == 0 {
		t.Skip("no stored credential")
	}
	id := rapid.SampledFrom(stored).Draw(t, "credential")
	s.write(t, "delete "+id, func(w *memdb.Writer) error { return w.DeleteCredential(id) })
	delete(s.creds, id)
	s.settle()
}

// Watch watches a credential or a namespace: a known one mostly, at times
// an unknown one.
func (s *monitorMachine) Watch(t *rapid.T) {
	w := &modelWatch{namespace: rapid.Bool().Draw(t, "namespace"), calls: new(counter)}
	names := s.ids
	if w.namespace {
		names = s.spaces
	}
	names = append(names[:len(names):len(names)], "unknown")
	w.name = rapid.SampledFrom(names).Draw(t, "key")
	if w.namespace {
		w.stop = s.mon.WatchNamespace(w.name, w.calls.fn())
	} else {
		w.stop = s.mon.WatchCredential(w.name, w.calls.fn())
	}
	s.watches = append(s.watches, w)
	s.settle()
}

// Stop stops a watch (again, at times).
func (s *monitorMachine) Stop(t *rapid.T) {
	if len(s.watches) == 0 {
		t.Skip("no watch")
	}
	w := rapid.SampledFrom(s.watches).Draw(t, "watch")
	w.stop()
	w.stopped = true
}

// Advance moves the clock on by 1 to 90 minutes and runs what the
// monitor's timer runs when it fires.
func (s *monitorMachine) Advance(t *rapid.T) {
	s.clock.Advance(time.Duration(rapid.IntRange(1, 90).Draw(t, "minutes")) * time.Minute)
	liveness.Expire(s.mon)
	s.settle()
}

// settle gives the model's verdict after an action: a watch whose key is
// dead now must have been called. The monitor calls watchers before the
// write, the watch or the timer's run that found them dead returns.
func (s *monitorMachine) settle() {
	for _, w := range s.watches {
		if !w.stopped && !w.fired && !s.keyLive(w) {
			w.fired = true
		}
	}
}

// Check compares the monitor with the model after every action.
func (s *monitorMachine) Check(t *rapid.T) {
	watched := map[string]bool{}
	for i, w := range s.watches {
		want := int32(0)
		if w.fired {
			want = 1
		}
		if got := w.calls.n.Load(); got != want {
			t.Fatalf("watch %d of %s (stopped %v): %d calls, want %d", i, w.name, w.stopped, got, want)
		}
		if !w.stopped && !w.fired {
			watched[fmt.Sprintf("%v/%s", w.namespace, w.name)] = true
		}
	}
	keys, due := liveness.Entries(s.mon)
	if keys != len(watched) {
		t.Fatalf("monitor holds %d keys, want %d (the keys with a watch left)", keys, len(watched))
	}
	if due > keys {
		t.Fatalf("monitor holds %d timer entries for %d keys", due, keys)
	}
	if err := liveness.CheckHeap(s.mon); err != nil {
		t.Fatal(err)
	}
}

// propWeight gives the actions that build state extra keys in the action
// map: rapid favours the first of the sorted keys, and these start with "+"
// so that they sort first.
var propWeight = map[string]int{"Issue": 2, "Refresh": 2, "Watch": 3}

func monitorProp(t *rapid.T) {
	s := newMonitorMachine(t)
	actions := rapid.StateMachineActions(s)
	for name, extra := range propWeight {
		for i := range extra {
			actions[fmt.Sprintf("+%s#%d", name, i)] = actions[name]
		}
	}
	t.Repeat(actions)
}

// TestMonitorMachine runs the monitor state machine.
func TestMonitorMachine(t *testing.T) {
	rapid.Check(t, monitorProp)
}

// FuzzMonitorMachine runs the monitor state machine on fuzzer input.
func FuzzMonitorMachine(f *testing.F) {
	f.Fuzz(rapid.MakeFuzz(monitorProp))
}

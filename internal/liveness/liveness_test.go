package liveness_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/liveness"
	"github.com/agenthost/mcpruntime/memdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

type env struct {
	t     *testing.T
	store *memdb.Store
	clock *actortest.Clock
	mon   *liveness.Monitor
}

func newEnv(t *testing.T) *env {
	t.Helper()
	store, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	c := actortest.NewClock(t0)
	mon := liveness.New(store, c.Now)
	t.Cleanup(mon.Close)
	return &env{t: t, store: store, clock: c, mon: mon}
}

func (e *env) put(creds ...*memdb.Credential) {
	e.t.Helper()
	if err := e.store.Write(func(w *memdb.Writer) error {
		for _, c := range creds {
			if err := w.PutCredential(c); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		e.t.Fatalf("put: %v", err)
	}
}

func (e *env) revoke(id string) {
	e.t.Helper()
	if err := e.store.Write(func(w *memdb.Writer) error {
		c, err := w.Credential(id)
		if err != nil {
			return err
		}
		c.State, c.Revoked = memdb.StateRevoked, e.clock.Now()
		return w.PutCredential(c)
	}); err != nil {
		e.t.Fatalf("revoke %s: %v", id, err)
	}
}

func provider(id string, expires time.Time) *memdb.Credential {
	return &memdb.Credential{ID: id, TokenHash: "h-" + id, Kind: memdb.KindProvider, Namespace: "cred:" + id,
		Thread: "t", Instance: "i", Issued: t0, Expires: expires, State: memdb.StateLive}
}

func client(id, grant string, expires time.Time) *memdb.Credential {
	return &memdb.Credential{ID: id, TokenHash: "h-" + id, Kind: memdb.KindClient, Namespace: "client:" + grant,
		Client: grant, Access: memdb.AccessReadOnly, Issued: t0, Expires: expires, State: memdb.StateLive}
}

// counter counts calls of its func.
type counter struct{ n atomic.Int32 }

func (c *counter) fn() func() { return func() { c.n.Add(1) } }

// eventually polls cond for up to a minute; the deadline only detects a
// hang.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestRevocationFiresInTheWrite(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", time.Time{}), provider("b", time.Time{}))
	var a, b, nsA counter
	e.mon.WatchCredential("a", a.fn())
	e.mon.WatchCredential("b", b.fn())
	e.mon.WatchNamespace("cred:a", nsA.fn())
	if a.n.Load()+b.n.Load()+nsA.n.Load() != 0 {
		t.Fatal("a watcher of a live credential was called")
	}
	e.revoke("a")
	// Synchronous: called before the revoking write returned.
	if a.n.Load() != 1 || nsA.n.Load() != 1 {
		t.Fatalf("after revoking a: credential watcher %d, namespace watcher %d calls; want 1 and 1", a.n.Load(), nsA.n.Load())
	}
	if b.n.Load() != 0 {
		t.Fatalf("revoking a called b's watcher")
	}
	e.revoke("b")
	e.put(provider("c", time.Time{})) // unrelated write
	if a.n.Load() != 1 || b.n.Load() != 1 {
		t.Fatalf("calls a=%d b=%d, want 1 each (at most once)", a.n.Load(), b.n.Load())
	}
}

func TestDeletionFires(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", time.Time{}))
	var a counter
	e.mon.WatchCredential("a", a.fn())
	if err := e.store.Write(func(w *memdb.Writer) error { return w.DeleteCredential("a") }); err != nil {
		t.Fatal(err)
	}
	if a.n.Load() != 1 {
		t.Fatalf("deleting the credential: %d calls, want 1", a.n.Load())
	}
}

func TestDeadAtWatchTime(t *testing.T) {
	e := newEnv(t)
	e.put(provider("gone", t0.Add(-time.Second)))
	for _, w := range []struct {
		name  string
		watch func(func()) func()
	}{
		{"unknown credential", func(f func()) func() { return e.mon.WatchCredential("nope", f) }},
		{"unknown namespace", func(f func()) func() { return e.mon.WatchNamespace("client:nope", f) }},
		{"expired credential", func(f func()) func() { return e.mon.WatchCredential("gone", f) }},
		{"expired namespace", func(f func()) func() { return e.mon.WatchNamespace("cred:gone", f) }},
	} {
		var c counter
		w.watch(c.fn())
		if c.n.Load() != 1 {
			t.Errorf("%s: %d calls before the watch returned, want 1", w.name, c.n.Load())
		}
	}
}

func TestClientNamespaceLivesWhileAnyTokenDoes(t *testing.T) {
	e := newEnv(t)
	e.put(client("x1", "g", time.Time{}), client("x2", "g", time.Time{}), client("y1", "h", time.Time{}))
	var g counter
	e.mon.WatchNamespace("client:g", g.fn())
	e.revoke("x1")
	if g.n.Load() != 0 {
		t.Fatal("namespace reported dead with a live token left")
	}
	e.revoke("y1") // another grant
	if g.n.Load() != 0 {
		t.Fatal("another grant's revocation reported this namespace dead")
	}
	e.revoke("x2")
	if g.n.Load() != 1 {
		t.Fatalf("last token revoked: %d calls, want 1", g.n.Load())
	}
}

func TestStop(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", time.Time{}))
	var stopped, kept counter
	stop := e.mon.WatchCredential("a", stopped.fn())
	e.mon.WatchCredential("a", kept.fn())
	stop()
	stop() // idempotent
	e.revoke("a")
	if stopped.n.Load() != 0 || kept.n.Load() != 1 {
		t.Fatalf("stopped watcher %d calls (want 0), other %d (want 1)", stopped.n.Load(), kept.n.Load())
	}
}

// Expiry needs no write: the monitor's timer runs on the real clock here,
// with expiries a few tens of milliseconds away.
func newRealEnv(t *testing.T) *env {
	t.Helper()
	store, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	mon := liveness.New(store, time.Now)
	t.Cleanup(mon.Close)
	return &env{t: t, store: store, clock: actortest.NewClock(t0), mon: mon}
}

func TestExpiry(t *testing.T) {
	e := newRealEnv(t)
	now := time.Now()
	e.put(provider("a", now.Add(30*time.Millisecond)), client("x1", "g", now.Add(30*time.Millisecond)), client("x2", "g", now.Add(300*time.Millisecond)))
	var a, nsA, g counter
	e.mon.WatchCredential("a", a.fn())
	e.mon.WatchNamespace("cred:a", nsA.fn())
	e.mon.WatchNamespace("client:g", g.fn())
	eventually(t, "watchers of a credential that expired", func() bool { return a.n.Load() == 1 && nsA.n.Load() == 1 })
	if g.n.Load() != 0 && time.Now().Before(now.Add(300*time.Millisecond)) {
		t.Fatal("client namespace reported dead while its second token lives")
	}
	eventually(t, "watcher of a namespace whose last token expired", func() bool { return g.n.Load() == 1 })
	if time.Now().Before(now.Add(300 * time.Millisecond)) {
		t.Fatal("client namespace reported dead before its last token expired")
	}
}

// TestRefreshPostponesExpiry: a write that slides an expiry reschedules
// it. The clock is fake, so the old expiry cannot pass before the refresh
// (on the real clock a busy machine let it); Expire does what the timer
// does when it fires.
func TestRefreshPostponesExpiry(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", t0.Add(30*time.Millisecond)))
	var a counter
	e.mon.WatchCredential("a", a.fn())
	// A turn start slides the expiry (a write) before the first one comes.
	e.put(provider("a", t0.Add(300*time.Millisecond)))
	e.clock.Advance(30 * time.Millisecond) // the old expiry
	liveness.Expire(e.mon)
	if a.n.Load() != 0 {
		t.Fatal("a refreshed credential was reported dead at its old expiry")
	}
	e.clock.Advance(270*time.Millisecond - time.Nanosecond)
	liveness.Expire(e.mon)
	if a.n.Load() != 0 {
		t.Fatal("a refreshed credential was reported dead before its new expiry")
	}
	e.clock.Advance(time.Nanosecond) // the new expiry
	liveness.Expire(e.mon)
	// The monitor's own timer may have taken the expiry a moment earlier;
	// then it, not Expire, calls the watcher.
	eventually(t, "watcher at the new expiry", func() bool { return a.n.Load() == 1 })
}

func TestCloseSilencesWatchers(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", time.Time{}), provider("b", t0.Add(time.Minute)))
	var a, b counter
	e.mon.WatchCredential("a", a.fn())
	e.mon.WatchCredential("b", b.fn())
	e.mon.Close()
	e.revoke("a")
	e.clock.Advance(time.Hour)
	liveness.Expire(e.mon) // what the timer would do, had Close not stopped it
	if a.n.Load()+b.n.Load() != 0 {
		t.Fatalf("after Close: %d and %d calls, want none", a.n.Load(), b.n.Load())
	}
	var late counter
	e.mon.WatchCredential("nope", late.fn())
	if late.n.Load() != 0 {
		t.Fatal("a watch after Close was called")
	}
}

// TestConcurrentWatchAndRevoke races watches against revocations: every
// watcher of a revoked credential is called exactly once, whichever comes
// first.
func TestConcurrentWatchAndRevoke(t *testing.T) {
	e := newEnv(t)
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "c" + string(rune('a'+i%26)) + string(rune('a'+i/26))
		e.put(provider(ids[i], time.Time{}))
	}
	counters := make([]counter, n)
	var wg sync.WaitGroup
	for i := range ids {
		wg.Add(2)
		go func() { defer wg.Done(); e.mon.WatchCredential(ids[i], counters[i].fn()) }()
		go func() { defer wg.Done(); e.revoke(ids[i]) }()
	}
	wg.Wait()
	for i := range counters {
		if got := counters[i].n.Load(); got != 1 {
			t.Errorf("watcher of %s: %d calls, want 1", ids[i], got)
		}
	}
}

// TestManyWatchersOneKey: every watcher of one namespace is called once.
func TestManyWatchersOneKey(t *testing.T) {
	e := newEnv(t)
	e.put(client("x", "g", time.Time{}))
	cs := make([]counter, 1000)
	for i := range cs {
		e.mon.WatchNamespace("client:g", cs[i].fn())
	}
	e.revoke("x")
	for i := range cs {
		if cs[i].n.Load() != 1 {
			t.Fatalf("watcher %d: %d calls, want 1", i, cs[i].n.Load())
		}
	}
}

// TestEndedWatchesLeaveNoEntry churns watches as sessions do (initialize →
// DELETE: a watch of the owner namespace, then its stop) with expiries a day
// away: once they have stopped, the monitor holds as many keys and timer
// entries as before the churn: no cycle leaves a heap entry until its
// expiry.
func TestEndedWatchesLeaveNoEntry(t *testing.T) {
	e := newEnv(t)
	far := t0.Add(24 * time.Hour)
	var kept counter
	e.put(provider("kept", t0.Add(time.Hour)), provider("a", far), client("x", "g", far))
	e.mon.WatchNamespace("cred:kept", kept.fn())
	baseKeys, baseDue := liveness.Entries(e.mon)
	if baseKeys != 1 || baseDue != 1 {
		t.Fatalf("one watched key with an expiry: %d keys, %d timer entries; want 1 and 1", baseKeys, baseDue)
	}
	const cycles = 10_000
	for i := range cycles {
		switch i % 3 {
		case 0: // a provider's session, its owner namespace
			e.mon.WatchNamespace("cred:a", func() {})()
		case 1: // a client's session and a stream on it, stopped in either order
			stopNS := e.mon.WatchNamespace("client:g", func() {})
			stopCred := e.mon.WatchCredential("x", func() {})
			stopNS()
			stopCred()
		case 2: // distinct credentials, each watched once
			id := fmt.Sprintf("c%d", i)
			e.put(provider(id, far.Add(time.Duration(i)*time.Second)))
			e.mon.WatchCredential(id, func() {})()
		}
	}
	if keys, due := liveness.Entries(e.mon); keys != baseKeys || due != baseDue {
		t.Fatalf("after %d watch/stop cycles: %d keys, %d timer entries; want %d and %d", cycles, keys, due, baseKeys, baseDue)
	}
	if kept.n.Load() != 0 {
		t.Fatal("the kept watcher was called with its credential live")
	}
}

// TestExpiryFiresAmongRemovedEntries: watches whose expiries interleave
// with those of stopped watches still fire, in expiry order, from the
// monitor's own timer, and only they do; afterwards the monitor is empty.
// The clock is fake: the timer wakes on real time, a few milliseconds
// apart, and finds due only what the fake clock has passed.
func TestExpiryFiresAmongRemovedEntries(t *testing.T) {
	e := newEnv(t)
	const n = 200
	kept := make([]counter, n)
	stopped := make([]counter, n)
	for i := range n {
		// Kept and stopped expiries alternate, 1 ms apart, from 20 ms on;
		// every tenth stopped one is a day away.
		at := t0.Add(20*time.Millisecond + time.Duration(2*i)*time.Millisecond)
		other := at.Add(time.Millisecond)
		if i%10 == 0 {
			other = t0.Add(24 * time.Hour)
		}
		e.put(provider(fmt.Sprintf("k%d", i), at), provider(fmt.Sprintf("s%d", i), other))
	}
	stops := make([]func(), n)
	for i := range n {
		e.mon.WatchCredential(fmt.Sprintf("k%d", i), kept[i].fn())
		stops[i] = e.mon.WatchCredential(fmt.Sprintf("s%d", i), stopped[i].fn())
	}
	// Stopped out of heap order: odd ones first, then even ones.
	for i := 1; i < n; i += 2 {
		stops[i]()
	}
	for i := 0; i < n; i += 2 {
		stops[i]()
	}
	if keys, due := liveness.Entries(e.mon); keys != n || due != n {
		t.Fatalf("after stopping %d of %d watches: %d keys, %d timer entries; want %d and %d", n, 2*n, keys, due, n, n)
	}
	fired := func(upTo int) func() bool {
		return func() bool {
			for i := range upTo {
				if kept[i].n.Load() != 1 {
					return false
				}
			}
			return true
		}
	}
	// The first half of the kept expiries passes.
	e.clock.Advance(20*time.Millisecond + (n-1)*time.Millisecond)
	eventually(t, "the kept watchers whose expiry passed called", fired(n/2))
	for i := n / 2; i < n; i++ {
		if kept[i].n.Load() != 0 {
			t.Fatalf("kept watcher k%d called before its expiry", i)
		}
	}
	e.clock.Advance(time.Hour)
	eventually(t, "every kept watcher called", fired(n))
	for i := range stopped {
		if stopped[i].n.Load() != 0 {
			t.Fatalf("stopped watcher s%d was called", i)
		}
	}
	if keys, due := liveness.Entries(e.mon); keys != 0 || due != 0 {
		t.Fatalf("after every watch fired or stopped: %d keys, %d timer entries; want none", keys, due)
	}
}

// TestEndCredentialWatches: every credential watcher is called once, its
// watch forgotten (its expiry too); namespace watchers are not called and
// still see their namespace die; a credential watched afresh afterwards
// is watched as usual.
func TestEndCredentialWatches(t *testing.T) {
	e := newEnv(t)
	e.put(provider("a", t0.Add(time.Hour)), provider("b", time.Time{}))
	var credA, credA2, credB, ns counter
	e.mon.WatchCredential("a", credA.fn())
	e.mon.WatchCredential("a", credA2.fn())
	e.mon.WatchCredential("b", credB.fn())
	e.mon.WatchNamespace("cred:b", ns.fn())

	e.mon.EndCredentialWatches()
	if credA.n.Load() != 1 || credA2.n.Load() != 1 || credB.n.Load() != 1 || ns.n.Load() != 0 {
		t.Fatalf("after EndCredentialWatches: credential watchers called %d, %d, %d times, namespace %d; want 1, 1, 1, 0",
			credA.n.Load(), credA2.n.Load(), credB.n.Load(), ns.n.Load())
	}
	if keys, scheduled := liveness.Entries(e.mon); keys != 1 || scheduled != 0 {
		t.Fatalf("Entries() = %d keys, %d scheduled; want 1 (the namespace), 0 (a's expiry forgotten)", keys, scheduled)
	}
	if err := liveness.CheckHeap(e.mon); err != nil {
		t.Fatal(err)
	}

	var again counter
	e.mon.WatchCredential("b", again.fn())
	e.revoke("b")
	if again.n.Load() != 1 || ns.n.Load() != 1 || credB.n.Load() != 1 {
		t.Fatalf("b revoked: new watcher %d, namespace %d, ended watcher %d calls; want 1, 1, 1", again.n.Load(), ns.n.Load(), credB.n.Load())
	}
}

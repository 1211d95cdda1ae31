package session

import (
	"errors"
	"sync"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
)

// TestTableCommitAfterCloseAll: a session reserved before CloseAll and
// committed after it is one CloseAll did not return, so Commit says so —
// its caller must end it — while one committed before is returned by
// CloseAll as usual.
func TestTableCommitAfterCloseAll(t *testing.T) {
	tb := NewTable(10, 10, StreamLimits{Events: 256, Bytes: 1 << 20})
	owner := Owner{Namespace: "cred:c1", Credential: "c1"}
	early, _, err := tb.Reserve("mcps_early", owner, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if !tb.Commit(early, actor.NewPID("local", "early")) {
		t.Fatal("Commit before CloseAll = false, want true")
	}
	late, _, err := tb.Reserve("mcps_late", owner, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	closed := tb.CloseAll()
	if len(closed) != 1 || closed[0] != early {
		t.Fatalf("CloseAll = %v, want only the committed session", closed)
	}
	if tb.Commit(late, actor.NewPID("local", "late")) {
		t.Error("Commit after CloseAll = true, want false: CloseAll did not return it")
	}
	if _, _, err := tb.Reserve("mcps_after", owner, actortest.T0); !errors.Is(err, ErrClosing) {
		t.Errorf("Reserve after CloseAll = %v, want ErrClosing", err)
	}
	// The late session is live until its actor ends it, like the others.
	tb.Release(late)
	tb.Release(early)
	if n := tb.Count(); n != 0 {
		t.Errorf("Count() = %d after both ended, want 0", n)
	}
}

// TestEntryLazyStreamsAndAsks: a session that never streamed nor asked
// holds no Streams and no Asks (an idle session pays a pointer each, SPEC
// §5b.16); the first use makes them, with the Table's limits, and every
// later or concurrent use gets the same ones; a notification to a session
// that never streamed makes nothing.
func TestEntryLazyStreamsAndAsks(t *testing.T) {
	tb := NewTable(10, 10, StreamLimits{Events: 3, Bytes: 1 << 10})
	e, _, err := tb.Reserve("s1", Owner{Namespace: "ns"}, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if sent, _ := e.Notify([]byte(`{}`), ""); sent || e.streams.Load() != nil || e.asks.Load() != nil {
		t.Fatalf("a fresh entry: Notify sent %v, streams %p, asks %p; want nothing made", sent, e.streams.Load(), e.asks.Load())
	}
	got := make([]*Streams, 8)
	asks := make([]*Asks, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() { got[i], asks[i] = e.Streams(), e.Asks() })
	}
	wg.Wait()
	for i := range got {
		if got[i] != got[0] || asks[i] != asks[0] || got[i] == nil || asks[i] == nil {
			t.Fatalf("concurrent first uses made different Streams or Asks: %p %p vs %p %p", got[i], asks[i], got[0], asks[0])
		}
	}
	if got[0].limits != &tb.streams {
		t.Fatalf("the Streams made at first use have limits %p, want the Table's %p", got[0].limits, &tb.streams)
	}
}

// TestEntryCloseShared: a session that ends refuses every stream and ask
// afterwards, whether it had its own Streams and Asks (closed) or never
// used them (the closed shared ones, nothing made for it).
func TestEntryCloseShared(t *testing.T) {
	for _, used := range []bool{false, true} {
		tb := NewTable(10, 10, StreamLimits{Events: 256, Bytes: 1 << 20})
		e, _, err := tb.Reserve("mcps_x", Owner{Namespace: "cred:c1", Credential: "c1"}, actortest.T0)
		if err != nil {
			t.Fatal(err)
		}
		var own *Streams
		if used {
			own = e.Streams()
			if _, err := own.Open(true); err != nil {
				t.Fatalf("used=%v: Open before the end = %v", used, err)
			}
			e.Asks()
		}
		e.closeShared()
		if _, err := e.Streams().Open(true); !errors.Is(err, ErrClosed) {
			t.Errorf("used=%v: Streams().Open after the end = %v, want ErrClosed", used, err)
		}
		if _, err := e.Asks().Begin(1); !errors.Is(err, ErrClosed) {
			t.Errorf("used=%v: Asks().Begin after the end = %v, want ErrClosed", used, err)
		}
		if used && e.Streams() != own {
			t.Errorf("used=%v: Streams() after the end is not the session's own", used)
		}
		if !used && (e.Streams() != closedStreams || e.Asks() != closedAsks) {
			t.Errorf("used=%v: an unused session's Streams and Asks are not the shared closed ones", used)
		}
		if n := e.Streams().Len(); n != 0 {
			t.Errorf("used=%v: %d streams kept after the end, want 0", used, n)
		}
	}
}

package session

import (
	"errors"
	"fmt"
	"testing"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
)

// TestTableSubscriptions: a session holds at most max URIs (again counts
// once), Subscribers finds it by URI, and the session's end — Release or
// eviction — takes its subscriptions out of the index; an ended session
// subscribes nothing.
func TestTableSubscriptions(t *testing.T) {
	tb := NewTable(10, 1, StreamLimits{Events: 4, Bytes: 1 << 10})
	owner := Owner{Namespace: "cred:c1", Credential: "c1"}
	e, _, err := tb.Reserve("mcps_1", owner, actortest.T0)
	if err != nil {
		t.Fatal(err)
	}
	if err := tb.Subscribe(e, "u1", 2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe before Commit = %v, want ErrClosed", err)
	}
	tb.Commit(e, actor.NewPID("local", "s1"))
	for _, uri := range []string{"u1", "u1", "u2"} {
		if err := tb.Subscribe(e, uri, 2); err != nil {
			t.Fatalf("Subscribe(%s) = %v", uri, err)
		}
	}
	if err := tb.Subscribe(e, "u3", 2); !errors.Is(err, ErrTooManySubscriptions) {
		t.Fatalf("Subscribe past max = %v, want ErrTooManySubscriptions", err)
	}
	if got := tb.Subscribers("u1"); len(got) != 1 || got[0] != e {
		t.Fatalf("Subscribers(u1) = %v, want the session", got)
	}
	tb.Unsubscribe(e, "u1")
	tb.Unsubscribe(e, "never")
	if got := tb.Subscribers("u1"); got != nil {
		t.Fatalf("Subscribers(u1) after Unsubscribe = %v, want none", got)
	}
	// A second session of the full namespace evicts the idle first.
	e2, evicted, err := tb.Reserve("mcps_2", owner, actortest.T0)
	if err != nil || evicted != e {
		t.Fatalf("Reserve = %v, evicted %v; want the first evicted", err, evicted)
	}
	if n := tb.SubscribedURIs(); n != 0 {
		t.Fatalf("the index holds %d URIs after the eviction, want 0", n)
	}
	tb.Commit(e2, actor.NewPID("local", "s2"))
	noErr(t, tb.Subscribe(e2, "u1", 2))
	tb.Release(e2)
	if n, subs := tb.SubscribedURIs(), tb.Subscribers("u1"); n != 0 || subs != nil {
		t.Fatalf("after Release the index holds %d URIs, u1 has %v; want none", n, subs)
	}
	if err := tb.Subscribe(e2, "u1", 2); !errors.Is(err, ErrClosed) {
		t.Fatalf("Subscribe after Release = %v, want ErrClosed", err)
	}
}

// TestStreamsNotifyBounded (attack): notifications to a reader that does
// not keep up stay within the session's bounds; each one that pushed out
// an undelivered one is counted, and Notify reports the count.
func TestStreamsNotifyBounded(t *testing.T) {
	ss := newStreams(4, 1<<20)
	s, _ := ss.Open(true)
	s.Attach()
	var last uint64
	for i := range 100 {
		sent, dropped := ss.Notify([]byte(fmt.Sprintf("n%d", i)), "")
		if !sent {
			t.Fatalf("Notify %d not sent", i)
		}
		if dropped != 0 {
			last = dropped
		}
	}
	events, _, dropped := ss.Kept()
	if events != 4 || dropped != 96 || last != 96 {
		t.Fatalf("kept %d, dropped %d (Notify told %d); want 4, 96, 96", events, dropped, last)
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

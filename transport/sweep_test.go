package transport_test

import (
	"log/slog"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// TestIdleSweepBeforeAnyRequest: the idle sweep's timer may fire before
// anything else touches a new endpoint — on a busy machine the caller of
// New is the one delayed, not the timer — and must find the session
// session table made. New armed the timer before it made the table, a data
// race the race detector reported on a loaded run (TestHTTPStatusIdleTimeout).
// Here nothing touches the endpoint until two sweeps have run, so the
// detector sees the sweep's read unordered after New's write, every time.
func TestIdleSweepBeforeAnyRequest(t *testing.T) {
	store, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	discard := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard }))
	defer sys.Shutdown()
	// With no session, only the sweep reads the clock once New returned.
	ticks := make(chan struct{}, 16)
	now := func() time.Time {
		select {
		case ticks <- struct{}{}:
		default:
		}
		return time.Now()
	}
	srv := transport.New(nil, store, sys, transport.Options{IdleTimeout: time.Millisecond, Logger: discard}, transport.Host{Now: now})
	defer srv.Close()
	for len(ticks) > 0 { // clock reads of New itself, if any
		<-ticks
	}
	// The second sweep is armed after the first one read the table.
	for i := range 2 {
		select {
		case <-ticks:
		case <-time.After(time.Minute): // detects a hang only
			t.Fatalf("idle sweep %d did not run", i+1)
		}
	}
}

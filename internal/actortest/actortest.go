// Package actortest holds what the tests of the actor packages, the
// liveness monitor, the module root and the property suite share: an actor
// system and a store that end with the test, a fake clock, a typed request
// helper, and a poll for effects that are asynchronous by design. It is
// imported by tests only.
package actortest

import (
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// Timeout bounds every request a test makes to an actor, and every wait of
// Eventually. It is never a threshold a correct implementation could
// exceed, however busy the machine: it only turns a hang into a failure.
const Timeout = 30 * time.Second

// T0 is the time the tests' fake clocks start at.
var T0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// NewSystem returns an actor system that logs nothing and is shut down when
// the test ends, after the cleanups registered later (which stop its
// actors) have run.
func NewSystem(t testing.TB) *actor.ActorSystem {
	t.Helper()
	discard := slog.New(slog.DiscardHandler)
	sys := actor.NewActorSystem(
		actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger { return discard }),
		actor.WithDeadLetterThrottleInterval(100*time.Millisecond),
		actor.WithDeadLetterRequestLogging(false),
	)
	t.Cleanup(sys.Shutdown)
	return sys
}

// NewStore returns an empty store.
func NewStore(t testing.TB) *memdb.Store {
	t.Helper()
	store, err := memdb.New()
	if err != nil {
		t.Fatalf("memdb.New() = %v", err)
	}
	return store
}

// StopAtEnd stops pid when the test ends and waits until it stopped.
// Cleanups run last-registered first, so actors stop in the reverse order
// of their spawning, before what the test set up earlier (the system's
// shutdown last).
func StopAtEnd(t testing.TB, root *actor.RootContext, pid *actor.PID) {
	t.Helper()
	t.Cleanup(func() {
		if err := root.StopFuture(pid).Wait(); err != nil {
			t.Errorf("stop %s: %v", pid.Id, err)
		}
	})
}

// Clock is a fake clock that only moves when told to. Safe for concurrent use.
type Clock struct {
	mu  sync.Mutex // guards now
	now time.Time
}

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// Ask sends msg to pid and returns its reply as an R, failing the test on a
// timeout or a reply of another type.
func Ask[R any](t testing.TB, root *actor.RootContext, pid *actor.PID, msg any) R {
	t.Helper()
	res, err := root.RequestFuture(pid, msg, Timeout).Result()
	if err != nil {
		t.Fatalf("request %T to %s: %v", msg, pid.Id, err)
	}
	r, ok := res.(R)
	if !ok {
		t.Fatalf("request %T to %s: reply %T, want %T", msg, pid.Id, res, *new(R))
	}
	return r
}

// Eventually polls cond until it holds, for at most Timeout. It is only for
// effects that are asynchronous by design (driver calls, deaths, timers),
// where no message can serve as a barrier.
func Eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// Futures counts the futures of sys still waiting for an answer: requests
// in flight, whoever made them.
func Futures(sys *actor.ActorSystem) int {
	n := 0
	for _, bucket := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, id := range bucket.Keys() {
			if strings.HasPrefix(id, "future") {
				n++
			}
		}
	}
	return n
}

// OpenFailed reports whether err is the failure of a provider session's
// open caused by the driver's error cause: it matches
// fault.ErrProviderOpenFailed and says what cause said. (A reply crosses a
// mailbox as plain data, so the driver's error arrives as its text.)
func OpenFailed(err, cause error) bool {
	return errors.Is(err, fault.ErrProviderOpenFailed) && strings.Contains(err.Error(), cause.Error())
}

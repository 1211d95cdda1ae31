// Package actortest holds what the tests of the actor packages, the
// liveness monitor and the property suite share: a fake clock and a typed
// request helper. It is imported by tests only.
package actortest

import (
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Timeout bounds every request a test makes to an actor. It only detects a
// hang: a correct actor answers long before it, however busy the machine.
const Timeout = 30 * time.Second

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
func Ask[R any](t *testing.T, root *actor.RootContext, pid *actor.PID, msg any) R {
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

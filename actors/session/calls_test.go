package session

import (
	"errors"
	"testing"
)

func TestOwnerOwns(t *testing.T) {
	tests := []struct {
		name      string
		owner     Owner
		namespace string
		want      bool
	}{
		{"same provider credential", Owner{Namespace: "cred:a"}, "cred:a", true},
		{"rotated credential is another principal", Owner{Namespace: "cred:a"}, "cred:b", false},
		{"client grant keeps its sessions", Owner{Namespace: "client:x"}, "client:x", true},
		{"client vs provider", Owner{Namespace: "client:x"}, "cred:x", false},
		{"empty owner owns nothing", Owner{}, "", false},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := test.owner.Owns(test.namespace); got != test.want {
				t.Errorf("Owner{%q}.Owns(%q) = %v, want %v", test.owner.Namespace, test.namespace, got, test.want)
			}
		})
	}
}

// cancelCounter counts the calls of its cancel func and keeps the last
// cause.
type cancelCounter struct {
	n     int
	cause error
}

func (c *cancelCounter) cancel(cause error) { c.n, c.cause = c.n+1, cause }

func TestCalls(t *testing.T) {
	var a Calls
	var c1, c2 cancelCounter
	if err := a.BeginCall("1", c1.cancel); err != nil {
		t.Fatalf("BeginCall(1) = %v", err)
	}
	if err := a.BeginCall("1", c2.cancel); !errors.Is(err, ErrDuplicateRequest) {
		t.Fatalf("BeginCall(1) again = %v, want ErrDuplicateRequest", err)
	}
	if err := a.BeginCall(`"1"`, c2.cancel); err != nil {
		t.Fatalf(`BeginCall("1") (a string id, not the number) = %v`, err)
	}
	if got := a.InFlight(); got != 2 {
		t.Fatalf("InFlight = %d, want 2", got)
	}
	a.CancelCall("nope") // unknown: ignored
	a.CancelCall("1")
	if c1.n != 1 || c2.n != 0 || c1.cause != ErrCancelled {
		t.Fatalf("cancels after CancelCall(1): %d (%v), %d; want 1 (ErrCancelled), 0", c1.n, c1.cause, c2.n)
	}
	a.EndCall("1")
	if err := a.BeginCall("1", c1.cancel); err != nil {
		t.Fatalf("BeginCall(1) after EndCall = %v (an id may be reused once finished)", err)
	}
	a.close()
	if c1.n != 2 || c2.n != 1 || c1.cause != ErrClosed || c2.cause != ErrClosed {
		t.Fatalf("after close, cancels %d (%v), %d (%v); want every call in flight cancelled with ErrClosed", c1.n, c1.cause, c2.n, c2.cause)
	}
	if got := a.InFlight(); got != 0 {
		t.Fatalf("InFlight after close = %d", got)
	}
	if err := a.BeginCall("2", c1.cancel); !errors.Is(err, ErrClosed) {
		t.Fatalf("BeginCall after close = %v, want ErrClosed", err)
	}
}

// TestCallsInitialized: notifications/initialized is recorded on the
// shared state, not by the actor: unset until marked, then set.
func TestCallsInitialized(t *testing.T) {
	var c Calls
	if c.Initialized() {
		t.Fatalf("Initialized() of a new session = true, want false")
	}
	c.MarkInitialized()
	c.MarkInitialized() // a second notification changes nothing
	if !c.Initialized() {
		t.Errorf("Initialized() after MarkInitialized = false, want true")
	}
}

package providertest

import (
	"slices"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Events is a driver.Events that records every report, for tests that
// drive a driver directly. The zero value is ready to use.
type Events struct {
	mu       sync.Mutex // guards the fields below
	died     []error
	statuses []driver.Status
	events   []driver.Event
	turns    []driver.TurnEnd
	changed  chan struct{} // closed and replaced at every report
}

// Died implements driver.Events.
func (e *Events) Died(err error) { e.record(func() { e.died = append(e.died, err) }) }

// Status implements driver.Events.
func (e *Events) Status(s driver.Status) { e.record(func() { e.statuses = append(e.statuses, s) }) }

// Event implements driver.Events.
func (e *Events) Event(ev driver.Event) {
	ev.Data = slices.Clone(ev.Data)
	e.record(func() { e.events = append(e.events, ev) })
}

// TurnEnded implements driver.Events.
func (e *Events) TurnEnded(t driver.TurnEnd) { e.record(func() { e.turns = append(e.turns, t) }) }

func (e *Events) record(f func()) {
	e.mu.Lock()
	defer e.mu.Unlock()
	f()
	if e.changed != nil {
		close(e.changed)
		e.changed = nil
	}
}

// Deaths returns the errors of the Died calls, in order.
func (e *Events) Deaths() []error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.died)
}

// Statuses returns the Status reports, in order.
func (e *Events) Statuses() []driver.Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.statuses)
}

// Events returns the Event reports, in order.
func (e *Events) Events() []driver.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.events)
}

// TurnsEnded returns the TurnEnded reports, in order.
func (e *Events) TurnsEnded() []driver.TurnEnd {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.turns)
}

// Wait calls cond (under no lock) after every report until it holds or
// timeout passed; it reports whether cond held.
func (e *Events) Wait(timeout time.Duration, cond func(*Events) bool) bool {
	end := time.NewTimer(timeout)
	defer end.Stop()
	for {
		e.mu.Lock()
		if e.changed == nil {
			e.changed = make(chan struct{})
		}
		ch := e.changed
		e.mu.Unlock()
		if cond(e) {
			return true
		}
		select {
		case <-ch:
		case <-end.C:
			return cond(e)
		}
	}
}

// TurnEnd waits up to timeout for the end of turn and returns it.
func (e *Events) TurnEnd(turn string, timeout time.Duration) (driver.TurnEnd, bool) {
	var out driver.TurnEnd
	ok := e.Wait(timeout, func(e *Events) bool {
		for _, t := range e.TurnsEnded() {
			if t.Turn == turn {
				out = t
				return true
			}
		}
		return false
	})
	return out, ok
}

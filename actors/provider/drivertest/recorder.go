package drivertest

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// Opened is one session the driver was asked to open.
type Opened struct {
	Session driver.Session // nil if the open failed
	// Events records what the session reported; the runtime gets every
	// report too, first.
	Events *providertest.Events
}

// recorder wraps the driver factory: it keeps each session the driver
// opens and records its events (besides handing them on to the runtime),
// so a test can drive the session's turns directly.
type recorder struct {
	inner driver.Factory

	mu     sync.Mutex // guards opened and each Opened's Session
	opened map[string]*Opened
}

func (r *recorder) factory(instance string, raw json.RawMessage) (driver.Driver, error) {
	d, err := r.inner(instance, raw)
	if err != nil {
		return nil, err
	}
	return &recDriver{Driver: d, r: r}, nil
}

func (r *recorder) get(t *testing.T, session string) *Opened {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	o := r.opened[session]
	if o == nil || o.Session == nil {
		t.Fatalf("the driver opened no session %s", session)
	}
	return o
}

type recDriver struct {
	driver.Driver
	r *recorder
}

func (d *recDriver) CloseBudget() time.Duration {
	return d.Driver.(driver.CloseBudgeter).CloseBudget()
}

func (d *recDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	o := &Opened{Events: &providertest.Events{}}
	d.r.mu.Lock()
	d.r.opened[req.SessionID] = o
	d.r.mu.Unlock()
	req.Events = tee{req.Events, o.Events}
	s, err := d.Driver.Open(ctx, req)
	if err == nil {
		d.r.mu.Lock()
		o.Session = s
		d.r.mu.Unlock()
	}
	return s, err
}

// tee hands every report to both.
type tee struct{ a, b driver.Events }

func (t tee) Died(err error)              { t.a.Died(err); t.b.Died(err) }
func (t tee) Status(s driver.Status)      { t.a.Status(s); t.b.Status(s) }
func (t tee) Event(e driver.Event)        { t.a.Event(e); t.b.Event(e) }
func (t tee) TurnEnded(te driver.TurnEnd) { t.a.TurnEnded(te); t.b.TurnEnded(te) }

// TurnEnds returns the ends reported for turn id, in order.
func TurnEnds(ev *providertest.Events, turn string) []driver.TurnEnd {
	var out []driver.TurnEnd
	for _, t := range ev.TurnsEnded() {
		if t.Turn == turn {
			out = append(out, t)
		}
	}
	return out
}

// HasStatus reports whether a Status of state was reported.
func HasStatus(ev *providertest.Events, state string) bool {
	for _, s := range ev.Statuses() {
		if s.State == state {
			return true
		}
	}
	return false
}

// Kinds returns the kinds of the events of turn, in order.
func Kinds(ev *providertest.Events, turn string) []string {
	var out []string
	for _, e := range ev.Events() {
		if e.Turn == turn {
			out = append(out, e.Kind)
		}
	}
	return out
}

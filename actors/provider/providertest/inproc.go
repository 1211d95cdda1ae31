// Package providertest holds the provider drivers of the tests: Inproc,
// the in-process driver with the knobs a test needs — read what a session
// was given, make it die, make the next Open fail — and Gated, a wrapper of
// any driver that holds its Open, Attach or Close where a test needs a race
// to happen. Tests register them through the runtime's Config.Drivers
// (under driver.InprocKind, in place of the plain built-in one) or give
// them to a provider actor directly. It is imported by tests only.
package providertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Inproc is the in-process driver as a test double: a session is a record
// of what the runtime gave it, nothing more, and the tests read what a
// session was given, make it die, or make the next Open fail. One Inproc
// serves any number of instances.
type Inproc struct {
	mu       sync.Mutex // guards the fields below
	sessions []*InprocSession
	failNext map[string]error // instance → error for its next Open
}

// Factory returns the driver.Factory to register under
// driver.InprocKind.
func (d *Inproc) Factory() driver.Factory {
	return func(instance string, raw json.RawMessage) (driver.Driver, error) {
		var cfg struct {
			driver.InprocConfig
			// Turns makes the instance's sessions take prompts
			// (driver.Turner), as a real agent's do; see InprocSession.End.
			Turns bool `json:"turns"`
		}
		if len(raw) > 0 && string(raw) != "null" {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				return nil, fmt.Errorf("inproc config: %w", err)
			}
		}
		return &inprocDriver{parent: d, multi: cfg.MultiThread, turns: cfg.Turns}, nil
	}
}

// FailNextOpen makes the next Open of instance return err. For testing.
func (d *Inproc) FailNextOpen(instance string, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failNext == nil {
		d.failNext = map[string]error{}
	}
	d.failNext[instance] = err
}

// Sessions returns the sessions opened for instance, oldest first,
// including closed ones.
func (d *Inproc) Sessions(instance string) []*InprocSession {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*InprocSession
	for _, s := range d.sessions {
		if s.Instance == instance {
			out = append(out, s)
		}
	}
	return out
}

// Session returns the session with id, or nil.
func (d *Inproc) Session(id string) *InprocSession {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, s := range d.sessions {
		if s.ID == id {
			return s
		}
	}
	return nil
}

type inprocDriver struct {
	parent *Inproc
	multi  bool
	turns  bool
}

func (d *inprocDriver) MultiThread() bool { return d.multi }

func (d *inprocDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p := d.parent
	p.mu.Lock()
	defer p.mu.Unlock()
	if err, ok := p.failNext[req.Instance]; ok {
		delete(p.failNext, req.Instance)
		return nil, err
	}
	s := &InprocSession{
		ID:       req.SessionID,
		Instance: req.Instance,
		events:   req.Events,
		attached: map[string]bool{req.Binding.Thread: true},
		bindings: []driver.Binding{req.Binding.Clone()},
	}
	p.sessions = append(p.sessions, s)
	if d.turns {
		return turnSession{s}, nil
	}
	return s, nil
}

// turnSession is an InprocSession that takes prompts: the session of an
// instance whose config says "turns": true.
type turnSession struct{ *InprocSession }

// StartTurn implements driver.Turner: the turn is recorded (Turns) and
// runs until the test ends it (End) or the runtime interrupts it.
func (s turnSession) StartTurn(ctx context.Context, t driver.Turn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("inproc: session closed")
	}
	s.turns = append(s.turns, t)
	return nil
}

// Interrupt implements driver.Turner: the interrupt is recorded
// (Interrupts) and the turn ends, interrupted.
func (s turnSession) Interrupt(ctx context.Context, thread, turn string) error {
	s.mu.Lock()
	s.interrupts = append(s.interrupts, turn)
	s.mu.Unlock()
	s.End(thread, turn, driver.TurnInterrupted)
	return nil
}

// Turns returns the turns the session was given, in order (a session of
// an instance with "turns": true).
func (s *InprocSession) Turns() []driver.Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.turns)
}

// Interrupts returns the ids of the turns the runtime asked the session
// to stop, in order.
func (s *InprocSession) Interrupts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.interrupts)
}

// End reports the end of the thread's turn with outcome, as an agent
// whose turn is over would.
func (s *InprocSession) End(thread, turn, outcome string) {
	s.events.TurnEnded(driver.TurnEnd{Thread: thread, Turn: turn, Outcome: outcome})
}

// InprocSession is one session of the in-process driver.
type InprocSession struct {
	ID       string
	Instance string
	events   driver.Events

	mu       sync.Mutex       // guards the fields below
	bindings []driver.Binding // every binding given, in order
	attached map[string]bool
	closed   bool
	// turns and interrupts: what a session that takes prompts was given.
	turns      []driver.Turn
	interrupts []string
}

// Bindings returns every binding the session was given (Open's, then each
// Attach's), in order.
func (s *InprocSession) Bindings() []driver.Binding {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]driver.Binding, len(s.bindings))
	for i, b := range s.bindings {
		out[i] = b.Clone()
	}
	return out
}

// Authorizations returns the non-empty Authorization values the session was
// given, in order: the tokens its process would hold.
func (s *InprocSession) Authorizations() []string {
	var out []string
	for _, b := range s.Bindings() {
		if b.Authorization != "" {
			out = append(out, b.Authorization)
		}
	}
	return out
}

// Attached returns the threads currently attached, sorted.
func (s *InprocSession) Attached() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for t := range s.attached {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// Closed reports whether Close was called.
func (s *InprocSession) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Kill makes the session die on its own, as a crashed process would.
func (s *InprocSession) Kill(err error) {
	if err == nil {
		err = errors.New("killed")
	}
	s.events.Died(err)
}

func (s *InprocSession) Attach(ctx context.Context, b driver.Binding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("inproc: session closed")
	}
	s.bindings = append(s.bindings, b.Clone())
	s.attached[b.Thread] = true
	return nil
}

func (s *InprocSession) Detach(ctx context.Context, thread string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.attached, thread)
	return nil
}

func (s *InprocSession) Close(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	clear(s.attached)
	return nil
}

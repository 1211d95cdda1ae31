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
		var cfg driver.InprocConfig
		if len(raw) > 0 && string(raw) != "null" {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&cfg); err != nil {
				return nil, fmt.Errorf("inproc config: %w", err)
			}
		}
		return &inprocDriver{parent: d, multi: cfg.MultiThread}, nil
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
	return s, nil
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

package providertest

import (
	"context"
	"errors"
	"sync/atomic"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Gated wraps a driver so that a test can hold its calls where a race
// happens: Open reports each session id on Opening (if set), then waits
// for OpenGate (if set); a session's Attach fails while FailAttach is set;
// its Close waits for CloseGate (if set); Attaching (if set) is called
// with every binding before the inner Attach. Every wait gives up when its
// context is done. The zero value of each knob is off.
type Gated struct {
	Inner      driver.Driver
	Opening    chan<- string   // buffered by the test; receives every Open's session id
	OpenGate   <-chan struct{} // Open waits until it is closed
	CloseGate  <-chan struct{} // Close waits until it is closed
	FailAttach *atomic.Bool    // Attach fails while it holds true
	Attaching  func(driver.Binding)
}

// ErrAttachRefused is what Attach returns while FailAttach is set.
var ErrAttachRefused = errors.New("attach refused")

// MultiThread is the inner driver's.
func (d *Gated) MultiThread() bool { return d.Inner.MultiThread() }

// Open reports, waits for OpenGate, then opens with the inner driver.
func (d *Gated) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	if d.Opening != nil {
		d.Opening <- req.SessionID
	}
	if err := wait(ctx, d.OpenGate); err != nil {
		return nil, err
	}
	s, err := d.Inner.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &gatedSession{Session: s, d: d}, nil
}

type gatedSession struct {
	driver.Session
	d *Gated
}

func (s *gatedSession) Attach(ctx context.Context, b driver.Binding) error {
	if s.d.FailAttach != nil && s.d.FailAttach.Load() {
		return ErrAttachRefused
	}
	if s.d.Attaching != nil {
		s.d.Attaching(b)
	}
	return s.Session.Attach(ctx, b)
}

func (s *gatedSession) Close(ctx context.Context) error {
	if err := wait(ctx, s.d.CloseGate); err != nil {
		return err
	}
	return s.Session.Close(ctx)
}

// wait waits until gate is closed (at once when it is nil) or ctx is done.
func wait(ctx context.Context, gate <-chan struct{}) error {
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// gateDriver's sessions open when openGate closes and close when
// closeGate closes (or their context ends); opening and closing receive a
// value as each Open and Close begins.
type gateDriver struct {
	opening, closing    chan struct{}
	openGate, closeGate chan struct{}
}

func newGateDriver() *gateDriver {
	return &gateDriver{
		opening: make(chan struct{}, 8), closing: make(chan struct{}, 8),
		openGate: make(chan struct{}), closeGate: make(chan struct{}),
	}
}

func (d *gateDriver) factory() driver.Factory {
	return func(string, json.RawMessage) (driver.Driver, error) { return d, nil }
}

func (d *gateDriver) MultiThread() bool { return false }

func (d *gateDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	d.opening <- struct{}{}
	select {
	case <-d.openGate:
		return gateSession{d}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

type gateSession struct{ d *gateDriver }

func (gateSession) Attach(context.Context, driver.Binding) error { return nil }
func (gateSession) Detach(context.Context, string) error         { return nil }

func (s gateSession) Close(ctx context.Context) error {
	s.d.closing <- struct{}{}
	select {
	case <-s.d.closeGate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// receive waits for a value on c, failing the test if none comes.
func receive(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(10 * time.Second): // detects a hang only
		t.Fatalf("%s: nothing happened", what)
	}
}

// TestOpenArchivedMidwayStopsAtItsDeadline: an open whose thread is
// archived while the driver opens has its session aborted; the abort waits
// for the driver, but never past the open's deadline — once the caller has
// given up, nothing of the open waits on its behalf. The budgets are an hour each,
// so only the deadline can end the waits.
func TestOpenArchivedMidwayStopsAtItsDeadline(t *testing.T) {
	d := newGateDriver()
	rt := newRuntime(t, mcpruntime.Config{
		OpenTimeout: time.Hour, ActorTimeout: time.Hour,
		Drivers: map[string]driver.Factory{"gate": d.factory()},
		Logger:  slog.New(slog.DiscardHandler),
	})
	t.Cleanup(func() { close(d.closeGate) }) // before the runtime closes
	bg := context.Background()
	noErr(t, rt.RegisterInstance(bg, "G", mcpruntime.InstanceSpec{Driver: "gate"}))
	createThreads(t, rt, "T")

	ctx, cancel := context.WithTimeout(bg, 3*time.Second)
	defer cancel()
	opened := make(chan error, 1)
	go func() {
		_, err := rt.OpenProviderSession(ctx, "T", "G")
		opened <- err
	}()
	receive(t, "the driver's Open", d.opening)
	noErr(t, rt.Archive(bg, "T"))
	close(d.openGate)
	receive(t, "the abort's Close", d.closing)

	if err := <-opened; !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, mcpruntime.ErrArchivedThread) {
		t.Fatalf("OpenProviderSession = %v, want the deadline or ErrArchivedThread", err)
	}
	waitUntil(t, "no request of the open is still waiting", func() bool { return mcpruntime.Futures(rt) == 0 })
}

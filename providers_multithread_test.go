package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// gatedDriver is a multi-thread driver whose Attach of one thread waits for
// the test to open the gate.
type gatedDriver struct {
	driver.Driver
	thread  string
	reached chan struct{}
	gate    chan struct{}
}

type gatedSession struct {
	driver.Session
	d *gatedDriver
}

func (d *gatedDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	return &gatedSession{Session: s, d: d}, nil
}

func (s *gatedSession) Attach(ctx context.Context, b driver.Binding) error {
	if b.Thread == s.d.thread {
		close(s.d.reached)
		select {
		case <-s.d.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return s.Session.Attach(ctx, b)
}

// TestArchiveDuringMultiThreadAttachKeepsSharedSession: archiving a thread
// while its open is being attached to a multi-thread session that serves
// another thread detaches the archived thread only; the shared session and
// the other thread's credential stay.
func TestArchiveDuringMultiThreadAttachKeepsSharedSession(t *testing.T) {
	ctx := context.Background()
	inproc := &providertest.Inproc{}
	gd := &gatedDriver{thread: "T2", reached: make(chan struct{}), gate: make(chan struct{})}
	rt := quietRuntime(t, mcpruntime.Config{Drivers: map[string]driver.Factory{
		"gated": func(instance string, _ json.RawMessage) (driver.Driver, error) {
			d, err := inproc.Factory()(instance, json.RawMessage(`{"multiThread":true}`))
			if err != nil {
				return nil, err
			}
			gd.Driver = d
			return gd, nil
		},
	}})
	noErr(t, rt.RegisterInstance(ctx, "M", mcpruntime.InstanceSpec{Driver: "gated"}))
	createThreads(t, rt, "T1", "T2")
	ps1, tok1 := openMinted(t, rt, "T1", "M")

	done := make(chan error, 1)
	go func() {
		_, err := rt.OpenProviderSession(ctx, "T2", "M")
		done <- err
	}()
	<-gd.reached
	noErr(t, rt.Archive(ctx, "T2"))
	close(gd.gate)
	if err := <-done; !errors.Is(err, mcpruntime.ErrArchivedThread) {
		t.Fatalf("open of the archived thread = %v, want ErrArchivedThread", err)
	}

	assertLive(t, rt, "T1's credential", tok1)
	s := inproc.Session(ps1.ID)
	waitUntil(t, "T2 detached from the shared session", func() bool {
		att := s.Attached()
		return len(att) == 1 && att[0] == "T1"
	})
	if s.Closed() {
		t.Fatalf("the shared session %s was closed", ps1.ID)
	}
	again, err := rt.OpenProviderSession(ctx, "T1", "M")
	noErr(t, err)
	if again.ID != ps1.ID || !again.Reused {
		t.Fatalf("T1's re-open = %+v, want its live session %s", again, ps1.ID)
	}
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestOpenRacingReleaseOfThePair: an open of (T, I) racing the release of
// the pair's session succeeds either way round — it returns that session
// (open first) or a new one with a new credential (release first) — and
// never fails because the session it meant to re-attach ended under it.
// Found by the concurrent machine (make prop).
func TestOpenRacingReleaseOfThePair(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	for i := range 100 {
		ps, err := rt.OpenProviderSession(ctx, "T", "A")
		noErr(t, err)
		// Detach so the open has to re-attach the holder, the racy path.
		noErr(t, rt.Detach(ctx, "T"))
		var wg sync.WaitGroup
		var openErr, relErr error
		var got mcpruntime.ProviderSession
		wg.Add(2)
		go func() { defer wg.Done(); got, openErr = rt.OpenProviderSession(ctx, "T", "A") }()
		go func() { defer wg.Done(); relErr = rt.ReleaseProviderSession(ctx, ps.ID) }()
		wg.Wait()
		noErr(t, relErr)
		if openErr != nil {
			t.Fatalf("round %d: open racing release = %v, want success", i, openErr)
		}
		if got.ID == ps.ID {
			// Open first: the release then closed it; nothing live is left.
			continue
		}
		if got.Authorization == "" {
			t.Fatalf("round %d: open after release = %+v, want a new credential", i, got)
		}
		assertLive(t, rt, "credential of the new session", bearer(t, got.Authorization))
		noErr(t, rt.ReleaseProviderSession(ctx, got.ID))
	}
}

// openGatedDriver holds every Open at gate after signalling opening.
type openGatedDriver struct {
	driver.Driver
	opening chan struct{}
	gate    chan struct{}
}

func (d *openGatedDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	d.opening <- struct{}{}
	select {
	case <-d.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return d.Driver.Open(ctx, req)
}

// TestOpenRacingArchiveLeavesNothing: a thread archived while its provider
// session opens gets ErrArchivedThread from the open, and by then the new
// session is closed, driver included — not closing in the background.
// Found by the concurrent machine.
func TestOpenRacingArchiveLeavesNothing(t *testing.T) {
	ctx := context.Background()
	inproc := &providertest.Inproc{}
	gated := &openGatedDriver{opening: make(chan struct{}, 1), gate: make(chan struct{})}
	rt := quietRuntime(t, mcpruntime.Config{Drivers: map[string]driver.Factory{
		"gated": func(instance string, config json.RawMessage) (driver.Driver, error) {
			d, err := inproc.Factory()(instance, config)
			gated.Driver = d
			return gated, err
		},
	}})
	noErr(t, rt.RegisterInstance(ctx, "G", mcpruntime.InstanceSpec{Driver: "gated"}))
	createThreads(t, rt, "T")
	var openErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, openErr = rt.OpenProviderSession(ctx, "T", "G")
	}()
	<-gated.opening
	noErr(t, rt.Archive(ctx, "T"))
	close(gated.gate)
	<-done
	if !errors.Is(openErr, mcpruntime.ErrArchivedThread) {
		t.Fatalf("open racing archive = %v, want ErrArchivedThread", openErr)
	}
	if open := rt.ProviderSessions(""); len(open) != 0 {
		t.Fatalf("after the open failed, open provider sessions %v, want none", open)
	}
	for _, s := range inproc.Sessions("G") {
		if !s.Closed() {
			t.Fatalf("driver session %s still open after the open failed", s.ID)
		}
	}
}

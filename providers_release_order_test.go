package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// closeProbe is a driver, registered as "probe", over the in-process test
// double: the Close of each of its sessions asks, as its first instruction,
// whether the token the session was opened with still authenticates.
type closeProbe struct {
	in *providertest.Inproc

	mu  sync.Mutex // guards the fields below
	rt  *mcpruntime.Runtime
	saw map[string]closeSaw // session id → what its Close saw
}

// closeSaw is what a session's Close saw of its token as it began: the
// runtime's answer (Authenticate) and the store's alone
// (StoredAuthenticate), nil where the token authenticated.
type closeSaw struct {
	auth, stored error
}

func (p *closeProbe) factory() driver.Factory {
	inner := p.in.Factory()
	return func(instance string, raw json.RawMessage) (driver.Driver, error) {
		d, err := inner(instance, raw)
		if err != nil {
			return nil, err
		}
		return &probeDriver{Driver: d, p: p}, nil
	}
}

type probeDriver struct {
	driver.Driver
	p *closeProbe
}

func (d *probeDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	s, err := d.Driver.Open(ctx, req)
	if err != nil {
		return nil, err
	}
	tok, _ := strings.CutPrefix(req.Binding.Authorization, "Bearer ")
	return &probeSession{Session: s, id: req.SessionID, tok: tok, p: d.p}, nil
}

type probeSession struct {
	driver.Session
	id, tok string
	p       *closeProbe
}

func (s *probeSession) Close(ctx context.Context) error {
	s.p.mu.Lock()
	rt := s.p.rt
	_, auth := rt.Authenticate(s.tok)
	s.p.saw[s.id] = closeSaw{auth: auth, stored: mcpruntime.StoredAuthenticate(rt, s.tok)}
	s.p.mu.Unlock()
	return s.Session.Close(ctx)
}

// seen returns what the Close of session id saw, and whether it ran.
func (p *closeProbe) seen(id string) (closeSaw, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	s, ok := p.saw[id]
	return s, ok
}

// TestReleaseRefusedAtClose: however a provider session ends — released
// by the host, released as idle, dead, or closed by the runtime's
// shutdown — its token is already refused when the driver's Close begins
// (SPEC §3.6: revocation first, so an agent given its grace can do nothing
// more with its token). The order is observed, not inferred from a later
// moment: the thread's actor is held, so the revocation cannot complete,
// and once every goroutine of the test's bubble is blocked
// (synctest.Wait) the driver's Close must not have begun; the thread
// resumes, and the Close that follows must see the token refused, by the
// runtime and by the store alone.
func TestReleaseRefusedAtClose(t *testing.T) {
	tests := []struct {
		name string
		// end starts the session's end and returns what waits for it (nil:
		// nothing does, as for a death).
		end func(t *testing.T, rt *mcpruntime.Runtime, p *closeProbe, clk *fakeClock, id string) <-chan error
	}{
		{name: "released", end: func(t *testing.T, rt *mcpruntime.Runtime, _ *closeProbe, _ *fakeClock, id string) <-chan error {
			done := make(chan error, 1)
			go func() { done <- rt.ReleaseProviderSession(context.Background(), id) }()
			return done
		}},
		{name: "idle", end: func(t *testing.T, rt *mcpruntime.Runtime, _ *closeProbe, clk *fakeClock, id string) <-chan error {
			clk.Advance(2 * time.Minute)
			done := make(chan error, 1)
			go func() {
				ids, err := rt.ReleaseIdleProviderSessions(context.Background())
				if err == nil && (len(ids) != 1 || ids[0] != id) {
					err = errors.New("released " + strings.Join(ids, ",") + ", want " + id)
				}
				done <- err
			}()
			return done
		}},
		{name: "died", end: func(t *testing.T, _ *mcpruntime.Runtime, p *closeProbe, _ *fakeClock, id string) <-chan error {
			p.in.Session(id).Kill(errors.New("exit status 1"))
			return nil
		}},
		{name: "shutdown", end: func(t *testing.T, rt *mcpruntime.Runtime, _ *closeProbe, _ *fakeClock, _ string) <-chan error {
			done := make(chan error, 1)
			go func() { done <- rt.Close() }()
			return done
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				drainDeadLetterThrottle(t)
				p := &closeProbe{in: &providertest.Inproc{}, saw: map[string]closeSaw{}}
				clk := newFakeClock()
				rt := quietRuntime(t, mcpruntime.Config{
					Now:          clk.Now,
					ProviderIdle: time.Minute,
					Drivers:      map[string]driver.Factory{"probe": p.factory()},
				})
				p.mu.Lock()
				p.rt = rt
				p.mu.Unlock()
				noErr(t, rt.RegisterInstance(context.Background(), "I", mcpruntime.InstanceSpec{Driver: "probe"}))
				createThreads(t, rt, "T")
				ps, tok := openMinted(t, rt, "T", "I")
				assertLive(t, rt, "before the end", tok)

				resume := mcpruntime.HoldThread(t, rt, "T")
				t.Cleanup(resume) // before the runtime's Close, should the test stop early
				done := test.end(t, rt, p, clk, ps.ID)
				synctest.Wait() // everything that can run without the thread has run
				if saw, ok := p.seen(ps.ID); ok {
					t.Fatalf("the driver's Close began before thread T answered the revocation; it saw Authenticate = %v, the store's = %v", saw.auth, saw.stored)
				}
				select {
				case err := <-done:
					t.Fatalf("the end returned (%v) before the revocation was answered", err)
				default:
				}

				resume()
				if done != nil {
					noErr(t, <-done)
				}
				synctest.Wait()
				saw, ok := p.seen(ps.ID)
				if !ok {
					t.Fatal("the driver's Close did not run")
				}
				if !errors.Is(saw.auth, mcpruntime.ErrUnauthenticated) || !errors.Is(saw.stored, mcpruntime.ErrUnauthenticated) {
					t.Errorf("as the driver's Close began: Authenticate = %v, the store's = %v; want both ErrUnauthenticated", saw.auth, saw.stored)
				}
			})
		})
	}
}

// drainDeadLetterThrottle lets the bubble's clock run on once the test's
// other cleanups (the runtime's Close among them) are done: protoactor's
// dead-letter throttle waits out its interval on a goroutine of its own,
// and the bubble ends only once every goroutine in it has. Registered
// first, it runs last.
func drainDeadLetterThrottle(t *testing.T) {
	t.Cleanup(func() { time.Sleep(time.Second) })
}

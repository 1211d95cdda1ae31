package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestInvalidIDs: every id a caller names is 1 to 128 characters without
// '/' or spaces, and not dots alone (".", ".." would be path segments of
// the admin API); anything else is ErrInvalidID and changes nothing.
func TestInvalidIDs(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	ids := []struct{ name, id string }{
		{"empty", ""},
		{"129 characters", strings.Repeat("x", 129)},
		{"slash", "a/b"},
		{"space", "a b"},
		{"newline", "a\nb"},
		{"dot", "."},
		{"dot-dot", ".."},
		{"dots", "..."},
	}
	ops := []struct {
		name string
		call func(id string) error
	}{
		{"CreateThread", func(id string) error { _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); return err }},
		{"RegisterInstance", func(id string) error {
			return rt.RegisterInstance(ctx, id, mcpruntime.InstanceSpec{Driver: driver.InprocKind})
		}},
		{"OpenProviderSession thread", func(id string) error { _, err := rt.OpenProviderSession(ctx, id, "A"); return err }},
		{"OpenProviderSession instance", func(id string) error { _, err := rt.OpenProviderSession(ctx, "T", id); return err }},
		{"SwitchProvider", func(id string) error { _, err := rt.SwitchProvider(ctx, id, "A"); return err }},
		{"Rotate", func(id string) error { _, err := rt.Rotate(ctx, id, "A"); return err }},
		{"StartRun", func(id string) error { _, err := rt.StartRun(ctx, id, "A"); return err }},
		{"EndRun", func(id string) error { return rt.EndRun(ctx, id, "") }},
		{"Touch", func(id string) error { return rt.Touch(ctx, id) }},
		{"Detach", func(id string) error { return rt.Detach(ctx, id) }},
		{"Archive", func(id string) error { return rt.Archive(ctx, id) }},
		{"DeleteThread", func(id string) error { return rt.DeleteThread(ctx, id) }},
	}
	for _, op := range ops {
		for _, id := range ids {
			t.Run(op.name+"/"+id.name, func(t *testing.T) {
				if err := op.call(id.id); !errors.Is(err, mcpruntime.ErrInvalidID) {
					t.Fatalf("%s(%q) = %v, want ErrInvalidID", op.name, id.id, err)
				}
			})
		}
	}
	ths, err := rt.Threads(ctx)
	noErr(t, err)
	if len(ths) != 1 || ths[0].ID != "T" || ths[0].Instance != "" {
		t.Fatalf("threads after refused calls = %+v, want T alone and untouched", ths)
	}
	if insts := rt.Instances(); len(insts) != 1 {
		t.Fatalf("instances after refused calls = %d, want 1", len(insts))
	}

	// The longest id and every allowed punctuation mark are accepted.
	for _, id := range []string{strings.Repeat("x", 128), "a-b_c.d:e@f", ".a", "..a", "a.."} {
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatalf("CreateThread(%q) = %v, want ok", id, err)
		}
		if err := rt.RegisterInstance(ctx, id, mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
			t.Fatalf("RegisterInstance(%q) = %v, want ok", id, err)
		}
	}
}

// TestThreadReadRejectsInvalidID: Thread names an id like every other
// method and answers ErrInvalidID for an ill-formed one, not ErrUnknownThread.
func TestThreadReadRejectsInvalidID(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	for _, id := range []string{"", strings.Repeat("x", 129), "a/b", "a b"} {
		if _, err := rt.Thread(context.Background(), id); !errors.Is(err, mcpruntime.ErrInvalidID) {
			t.Errorf("Thread(%q) = %v, want ErrInvalidID", id, err)
		}
	}
}

// TestDuplicates: a thread or instance id in use is refused, and the
// existing one is untouched.
func TestDuplicates(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")

	if _, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{Instance: "B"}); !errors.Is(err, mcpruntime.ErrThreadExists) {
		t.Fatalf("CreateThread of an existing id = %v, want ErrThreadExists", err)
	}
	if th := threadOf(t, rt, "T"); th.Instance != "A" {
		t.Fatalf("existing thread changed: %+v", th)
	}
	assertLive(t, rt, "existing thread's credential", tok)

	err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Config: json.RawMessage(`{"multiThread":true}`)})
	if !errors.Is(err, mcpruntime.ErrInstanceExists) {
		t.Fatalf("RegisterInstance of an existing id = %v, want ErrInstanceExists", err)
	}
	// The instance stays as it was: exclusive (below), its driver inproc.
	inst, err := rt.Instance("A")
	noErr(t, err)
	if inst.Driver != driver.InprocKind {
		t.Fatalf("existing instance replaced by %+v", inst)
	}
	createThreads(t, rt, "U")
	openMinted(t, rt, "U", "A")
	if n := len(inprocOf(rt).Sessions("A")); n != 2 {
		t.Fatalf("instance A has %d sessions for two threads, want 2 (still exclusive)", n)
	}
	assertLive(t, rt, "existing instance's credential", tok)
}

// TestUnknownNames: unknown drivers, instances, threads and provider
// sessions are refused with their own errors, and nothing is created.
func TestUnknownNames(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")

	t.Run("driver", func(t *testing.T) {
		if err := rt.RegisterInstance(ctx, "X", mcpruntime.InstanceSpec{Driver: "nope"}); !errors.Is(err, mcpruntime.ErrUnknownDriver) {
			t.Fatalf("RegisterInstance(driver nope) = %v, want ErrUnknownDriver", err)
		}
		if _, err := rt.Instance("X"); !errors.Is(err, mcpruntime.ErrUnknownInstance) {
			t.Fatalf("instance X after a refused registration: %v, want not found", err)
		}
		// The id is still free.
		registerInproc(t, rt, "X")
	})
	t.Run("driver config", func(t *testing.T) {
		err := rt.RegisterInstance(ctx, "Y", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Config: json.RawMessage(`{"bogus":1}`)})
		if err == nil {
			t.Fatal("RegisterInstance with an unknown config field succeeded")
		}
		if _, err := rt.Instance("Y"); !errors.Is(err, mcpruntime.ErrUnknownInstance) {
			t.Fatalf("instance Y after a refused registration: %v, want not found", err)
		}
	})
	t.Run("instance", func(t *testing.T) {
		if _, err := rt.CreateThread(ctx, "N", mcpruntime.ThreadOptions{Instance: "nope"}); !errors.Is(err, mcpruntime.ErrUnknownInstance) {
			t.Fatalf("CreateThread(instance nope) = %v, want ErrUnknownInstance", err)
		}
		if _, err := rt.Thread(ctx, "N"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
			t.Fatalf("thread N after a refused create: %v, want ErrUnknownThread", err)
		}
		calls := []struct {
			name string
			call func() error
		}{
			{"OpenProviderSession", func() error { _, err := rt.OpenProviderSession(ctx, "T", "nope"); return err }},
			{"SwitchProvider", func() error { _, err := rt.SwitchProvider(ctx, "T", "nope"); return err }},
			{"Rotate", func() error { _, err := rt.Rotate(ctx, "T", "nope"); return err }},
		}
		for _, c := range calls {
			if err := c.call(); !errors.Is(err, mcpruntime.ErrUnknownInstance) {
				t.Fatalf("%s(T, nope) = %v, want ErrUnknownInstance", c.name, err)
			}
		}
		if th := threadOf(t, rt, "T"); th.Instance != "" {
			t.Fatalf("thread T after refused calls: current instance %q, want none", th.Instance)
		}
		if got := liveCredentials(t, rt, time.Now(), "T", ""); len(got) != 0 {
			t.Fatalf("refused calls minted credentials %q", got)
		}
	})
	t.Run("thread", func(t *testing.T) {
		_, tok := openMinted(t, rt, "T", "A")
		p := assertLive(t, rt, "caller", tok)
		calls := []struct {
			name string
			call func() error
		}{
			{"Thread", func() error { _, err := rt.Thread(ctx, "nope"); return err }},
			{"OpenProviderSession", func() error { _, err := rt.OpenProviderSession(ctx, "nope", "A"); return err }},
			{"SwitchProvider", func() error { _, err := rt.SwitchProvider(ctx, "nope", "A"); return err }},
			{"Rotate", func() error { _, err := rt.Rotate(ctx, "nope", "A"); return err }},
			{"StartRun", func() error { _, err := rt.StartRun(ctx, "nope", "A"); return err }},
			{"EndRun", func() error { return rt.EndRun(ctx, "nope", "") }},
			{"Touch", func() error { return rt.Touch(ctx, "nope") }},
			{"Detach", func() error { return rt.Detach(ctx, "nope") }},
			{"Archive", func() error { return rt.Archive(ctx, "nope") }},
			{"DeleteThread", func() error { return rt.DeleteThread(ctx, "nope") }},
			{"Post", func() error { _, err := rt.Post(ctx, p, "nope", "x"); return err }},
		}
		for _, c := range calls {
			if err := c.call(); !errors.Is(err, mcpruntime.ErrUnknownThread) {
				t.Fatalf("%s(nope) = %v, want ErrUnknownThread", c.name, err)
			}
		}
		if n := len(inprocOf(rt).Sessions("A")); n != 1 {
			t.Fatalf("refused opens started driver sessions: %d, want 1", n)
		}
	})
	t.Run("provider session", func(t *testing.T) {
		createThreads(t, rt, "S")
		ps, tok := openMinted(t, rt, "S", "A")
		noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
		if err := rt.ReleaseProviderSession(ctx, ps.ID); !errors.Is(err, mcpruntime.ErrUnknownProviderSession) {
			t.Fatalf("second release = %v, want ErrUnknownProviderSession", err)
		}
		if err := rt.ReleaseProviderSession(ctx, "ps_nope"); !errors.Is(err, mcpruntime.ErrUnknownProviderSession) {
			t.Fatalf("release of an unknown id = %v, want ErrUnknownProviderSession", err)
		}
		assertDead(t, rt, "released token", tok)
	})
}

// TestAuthenticateFailures: every refused token is an *AuthError matching
// ErrUnauthenticated, with a reason that says why.
func TestAuthenticateFailures(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T", "U")
	_, tok := openMinted(t, rt, "T", "A")
	altered := tok[:len(tok)-1] + "A"
	if altered == tok {
		altered = tok[:len(tok)-1] + "B"
	}
	released, revoked := openMinted(t, rt, "U", "A")
	noErr(t, rt.ReleaseProviderSession(ctx, released.ID))

	tests := []struct {
		name, tok, want string
	}{
		{"empty", "", mcpruntime.AuthMalformed},
		{"garbage", "garbage", mcpruntime.AuthMalformed},
		{"with the Bearer prefix", "Bearer " + tok, mcpruntime.AuthMalformed},
		{"trailing space", tok + " ", mcpruntime.AuthMalformed},
		{"truncated", tok[:len(tok)-1], mcpruntime.AuthMalformed},
		{"wrong alphabet", tok[:len(tok)-1] + "+", mcpruntime.AuthMalformed},
		{"well-formed, never minted", "mcprt_" + strings.Repeat("A", 43), mcpruntime.AuthUnknown},
		{"one character changed", altered, mcpruntime.AuthUnknown},
		{"revoked", revoked, mcpruntime.AuthRevoked},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			assertReason(t, rt, test.name, test.tok, test.want)
		})
	}
	assertLive(t, rt, "the real token", tok)
}

// TestCanceledContext: a call with a context that is already cancelled
// returns context.Canceled.
func TestCanceledContext(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	ps, _, _ := liveOn(t, rt, "T", "A")
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
	sess, err := rt.OpenProviderSession(context.Background(), "T", "A")
	noErr(t, err)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, c := range canceledCalls(rt, ctx, ps, sess.ID, ct.ClientID) {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(); !errors.Is(err, context.Canceled) {
				t.Fatalf("%s with a cancelled context = %v, want context.Canceled", c.name, err)
			}
		})
	}
}

type canceledCall struct {
	name string
	call func() error
}

func canceledCalls(rt *mcpruntime.Runtime, ctx context.Context, caller mcpruntime.Principal, session, client string) []canceledCall {
	return []canceledCall{
		{"RegisterInstance", func() error {
			return rt.RegisterInstance(ctx, "C", mcpruntime.InstanceSpec{Driver: driver.InprocKind})
		}},
		{"CreateThread", func() error { _, err := rt.CreateThread(ctx, "V", mcpruntime.ThreadOptions{}); return err }},
		{"OpenProviderSession", func() error { _, err := rt.OpenProviderSession(ctx, "T", "B"); return err }},
		{"ReleaseProviderSession", func() error { return rt.ReleaseProviderSession(ctx, session) }},
		{"SwitchProvider", func() error { _, err := rt.SwitchProvider(ctx, "T", "B"); return err }},
		{"Rotate", func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }},
		{"StartRun", func() error { _, err := rt.StartRun(ctx, "T", "A"); return err }},
		{"EndRun", func() error { return rt.EndRun(ctx, "T", "") }},
		{"Touch", func() error { return rt.Touch(ctx, "T") }},
		{"Detach", func() error { return rt.Detach(ctx, "T") }},
		{"Archive", func() error { return rt.Archive(ctx, "T") }},
		{"DeleteThread", func() error { return rt.DeleteThread(ctx, "T") }},
		{"IssueClient", func() error { _, err := rt.IssueClient(ctx, "x", memdb.AccessReadOnly); return err }},
		{"RefreshClient", func() error { _, err := rt.RefreshClient(ctx, client, true); return err }},
		{"RevokeClient", func() error { return rt.RevokeClient(ctx, client) }},
		{"Post", func() error { _, err := rt.Post(ctx, caller, "", "x"); return err }},
	}
}

// TestCanceledContextChangesNothing: a call refused with context.Canceled
// had no effect: retrying it with a live context behaves as if it had never
// been made.
func TestCanceledContextChangesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	tests := []struct {
		name  string
		call  func(rt *mcpruntime.Runtime) error
		retry func(rt *mcpruntime.Runtime) error
	}{
		{
			"CreateThread",
			func(rt *mcpruntime.Runtime) error {
				_, err := rt.CreateThread(ctx, "V", mcpruntime.ThreadOptions{})
				return err
			},
			func(rt *mcpruntime.Runtime) error {
				_, err := rt.CreateThread(bg, "V", mcpruntime.ThreadOptions{})
				return err
			},
		},
		{
			"RegisterInstance",
			func(rt *mcpruntime.Runtime) error {
				return rt.RegisterInstance(ctx, "C", mcpruntime.InstanceSpec{Driver: driver.InprocKind})
			},
			func(rt *mcpruntime.Runtime) error {
				return rt.RegisterInstance(bg, "C", mcpruntime.InstanceSpec{Driver: driver.InprocKind})
			},
		},
		{
			"StartRun",
			func(rt *mcpruntime.Runtime) error { _, err := rt.StartRun(ctx, "T", "A"); return err },
			func(rt *mcpruntime.Runtime) error { _, err := rt.StartRun(bg, "T", "A"); return err },
		},
		{
			"Archive",
			func(rt *mcpruntime.Runtime) error { return rt.Archive(ctx, "T") },
			func(rt *mcpruntime.Runtime) error { _, err := rt.StartRun(bg, "T", "A"); return err },
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			_, err := rt.CreateThread(bg, "T", mcpruntime.ThreadOptions{Instance: "A"})
			noErr(t, err)
			if err := test.call(rt); !errors.Is(err, context.Canceled) {
				t.Fatalf("%s with a cancelled context = %v, want context.Canceled", test.name, err)
			}
			if err := test.retry(rt); err != nil {
				t.Fatalf("after a cancelled %s, retrying = %v; the cancelled call took effect", test.name, err)
			}
		})
	}
}

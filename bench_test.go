package mcpruntime_test

import (
	"context"
	"log/slog"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// benchRuntime is a runtime with one instance "a" and a thread "T" whose
// provider session for "a" is open; it returns the session's token.
func benchRuntime(b *testing.B) (*mcpruntime.Runtime, mcpruntime.Principal, string) {
	b.Helper()
	return benchRuntimeWith(b, mcpruntime.Config{})
}

// benchRuntimeWith is benchRuntime on cfg, with its log discarded.
func benchRuntimeWith(b *testing.B, cfg mcpruntime.Config) (*mcpruntime.Runtime, mcpruntime.Principal, string) {
	b.Helper()
	ctx := context.Background()
	cfg.Logger = slog.New(slog.DiscardHandler)
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { rt.Close() })
	if err := rt.RegisterInstance(ctx, "a", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		b.Fatal(err)
	}
	if _, err := rt.CreateThread(ctx, "T", mcpruntime.ThreadOptions{}); err != nil {
		b.Fatal(err)
	}
	ps, err := rt.OpenProviderSession(ctx, "T", "a")
	if err != nil {
		b.Fatal(err)
	}
	tok := ps.Authorization[len("Bearer "):]
	p, err := rt.Authenticate(tok)
	if err != nil {
		b.Fatal(err)
	}
	return rt, p, tok
}

// BenchmarkAuthenticate is the per-request cost: shape check, SHA-256, one
// lock-free memdb read, liveness check.
func BenchmarkAuthenticate(b *testing.B) {
	rt, _, tok := benchRuntime(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Authenticate(tok); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAuthenticateParallel shows that authentication takes no lock.
func BenchmarkAuthenticateParallel(b *testing.B) {
	rt, _, tok := benchRuntime(b)
	b.ReportAllocs()
	b.ResetTimer() // RunParallel does not exclude the set-up the way b.Loop does
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := rt.Authenticate(tok); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkAuthenticateUnknown is the cost of rejecting a well-formed token
// that no credential has.
func BenchmarkAuthenticateUnknown(b *testing.B) {
	rt, _, tok := benchRuntime(b)
	bad := tok[:len(tok)-1] + "A"
	if bad == tok {
		bad = tok[:len(tok)-1] + "B"
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Authenticate(bad); err == nil {
			b.Fatal("unknown token authenticated")
		}
	}
}

// BenchmarkTouch is one request/reply round trip through a thread actor
// with one store write.
func BenchmarkTouch(b *testing.B) {
	rt, _, _ := benchRuntime(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if err := rt.Touch(ctx, "T"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunCycle is StartRun then EndRun: two round trips.
func BenchmarkRunCycle(b *testing.B) {
	rt, _, _ := benchRuntime(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		id, err := rt.StartRun(ctx, "T", "a")
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.EndRun(ctx, "T", id); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPost is the atomic check-and-apply of a mutation.
func BenchmarkPost(b *testing.B) {
	rt, p, _ := benchRuntime(b)
	ctx := context.Background()
	if _, err := rt.StartRun(ctx, "T", "a"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Post(ctx, p, "", "hello"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRotate mints and revokes: thread actor, store write, and a
// re-bind through the provider actor and the driver.
func BenchmarkRotate(b *testing.B) {
	rt, _, _ := benchRuntime(b)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := rt.Rotate(ctx, "T", "a"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkOpenRelease is a whole provider-session lifecycle: mint, spawn a
// session actor, driver open, record; then close, revoke.
func BenchmarkOpenRelease(b *testing.B) {
	rt, _, _ := benchRuntime(b)
	ctx := context.Background()
	if err := rt.RegisterInstance(ctx, "b", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		ps, err := rt.OpenProviderSession(ctx, "T", "b")
		if err != nil {
			b.Fatal(err)
		}
		if err := rt.ReleaseProviderSession(ctx, ps.ID); err != nil {
			b.Fatal(err)
		}
	}
}

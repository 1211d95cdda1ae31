package mcpruntime_test

import (
	"context"
	"sync"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
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

package mcpruntime_test

import (
	"context"
	"testing"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestStatsBackToBaseline: after a thread's whole life the counts are back
// where they started: no actor, record or credential is left behind.
func TestStatsBackToBaseline(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	base := rt.Stats()
	if base.Instances != 2 || base.Threads != 0 || base.ProviderSessions != 0 || base.LiveCredentials != 0 {
		t.Fatalf("baseline = %+v", base)
	}

	createThreads(t, rt, "T")
	openMinted(t, rt, "T", "A")
	openMinted(t, rt, "T", "B")
	c, err := rt.IssueClient(ctx, "x", "read-only")
	noErr(t, err)
	mid := rt.Stats()
	if mid.Threads != 1 || mid.Clients != 1 || mid.ProviderSessions != 2 || mid.LiveCredentials != 3 || mid.Processes <= base.Processes {
		t.Fatalf("with a thread, two sessions and a client = %+v (baseline %+v)", mid, base)
	}

	noErr(t, rt.DeleteThread(ctx, "T"))
	noErr(t, rt.RevokeClient(ctx, c.ClientID))
	waitUntil(t, "counts back to baseline", func() bool {
		s := rt.Stats()
		return s.Threads == 0 && s.Clients == 0 && s.LiveCredentials == 0 && s.ProviderSessions == 2
	})
	// Provider sessions stay open after a delete (only detached): a host
	// releases them. Releasing both brings everything back.
	for _, ps := range inprocOf(rt).Sessions("A") {
		noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
	}
	for _, ps := range inprocOf(rt).Sessions("B") {
		noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))
	}
	waitUntil(t, "provider sessions released", func() bool {
		s := rt.Stats()
		return s.ProviderSessions == 0 && s.Processes == base.Processes
	})
}

package mcpruntime_test

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestJournalSwitchAndRevoke (SPEC §3.7a): a thread's switch is journaled
// with the instance it left, and a provider credential's revocation with
// its reason. The records are appended by the committing write's hook, so
// they are read as soon as the call that made them returned.
func TestJournalSwitchAndRevoke(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	_, err := rt.SwitchProvider(ctx, "T", "A")
	noErr(t, err)
	ps, _ := openMinted(t, rt, "T", "A")
	_, err = rt.SwitchProvider(ctx, "T", "B")
	noErr(t, err)
	noErr(t, rt.ReleaseProviderSession(ctx, ps.ID))

	page, err := rt.Records(0, 1<<20)
	noErr(t, err)
	var got []mcpruntime.Record
	for _, r := range page.Records {
		if r.Kind == mcpruntime.RecordThreadSwitched || r.Kind == mcpruntime.RecordCredentialRevoked {
			got = append(got, r)
		}
	}
	want := []mcpruntime.Record{
		{Kind: mcpruntime.RecordThreadSwitched, Thread: "T", Instance: "A"},
		{Kind: mcpruntime.RecordThreadSwitched, Thread: "T", Instance: "B", From: "A"},
		{Kind: mcpruntime.RecordCredentialRevoked, Thread: "T", Instance: "A", Credential: ps.CredentialID, Reason: "released"},
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(mcpruntime.Record{}, "ID", "Time")); diff != "" {
		t.Errorf("switch and revoke records (-want +got):\n%s", diff)
	}
}

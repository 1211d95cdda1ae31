package mcpruntime_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// liveOn opens (thread, instance), starts a run of instance on the thread
// and returns the caller's principal, the run id and the raw token.
// instance must be (or become, by this first open) the thread's current one.
func liveOn(t *testing.T, rt *mcpruntime.Runtime, thread, instance string) (p mcpruntime.Principal, run, tok string) {
	t.Helper()
	_, tok = openMinted(t, rt, thread, instance)
	run, err := rt.StartRun(context.Background(), thread, instance)
	if err != nil {
		t.Fatalf("StartRun(%s, %s) = %v", thread, instance, err)
	}
	return assertLive(t, rt, fmt.Sprintf("(%s, %s)", thread, instance), tok), run, tok
}

// TestPostLiveCaller: a live caller posts to its own thread, by default or
// by id, and the stored message says who posted it.
func TestPostLiveCaller(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")

	m0, err := rt.Post(ctx, p, "", "hello")
	noErr(t, err)
	m1, err := rt.Post(ctx, p, "T", "again")
	noErr(t, err)
	want := []mcpruntime.Message{
		{Seq: 0, Text: "hello", Author: p.Namespace, Instance: "A", At: clk.Now()},
		{Seq: 1, Text: "again", Author: p.Namespace, Instance: "A", At: clk.Now()},
	}
	if diff := gocmp.Diff(want, []mcpruntime.Message{m0, m1}); diff != "" {
		t.Fatalf("Post results (-want +got):\n%s", diff)
	}
	if diff := gocmp.Diff(want, threadOf(t, rt, "T").Messages); diff != "" {
		t.Fatalf("thread messages (-want +got):\n%s", diff)
	}
}

// TestPostAfterSwitch is SPEC §4's switch rule: after A→B, A still
// authenticates but may not mutate; B mutates while it owns the run.
func TestPostAfterSwitch(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A", "B")
	createThreads(t, rt, "T")
	pA, _, tokA := liveOn(t, rt, "T", "A")
	_, tokB := openMinted(t, rt, "T", "B")
	pB := assertLive(t, rt, "B", tokB)
	if _, err := rt.Post(ctx, pA, "", "A owns the run"); err != nil {
		t.Fatalf("A's post while it owns the run = %v", err)
	}
	if _, err := rt.Post(ctx, pB, "", "B before the switch"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("B's post while A owns the run = %v, want ErrNotLive", err)
	}

	_, err := rt.SwitchProvider(ctx, "T", "B")
	noErr(t, err)
	if _, err := rt.Post(ctx, pA, "", "A after the switch"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("A's post after the switch = %v, want ErrNotLive", err)
	}
	assertLive(t, rt, "A after the switch", tokA)
	if _, err := rt.Post(ctx, pB, "", "B before its run"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("B's post before its run = %v, want ErrNotLive", err)
	}

	run, err := rt.StartRun(ctx, "T", "B")
	noErr(t, err)
	m, err := rt.Post(ctx, pB, "", "B owns the run")
	noErr(t, err)
	if m.Author != pB.Namespace || m.Instance != "B" {
		t.Fatalf("B's message = %+v, want author %s, instance B", m, pB.Namespace)
	}
	if _, err := rt.Post(ctx, pA, "", "A during B's run"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("A's post during B's run = %v, want ErrNotLive", err)
	}

	noErr(t, rt.EndRun(ctx, "T", run))
	if _, err := rt.Post(ctx, pB, "", "B after its run"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("B's post after EndRun = %v, want ErrNotLive", err)
	}
	var texts []string
	for _, m := range threadOf(t, rt, "T").Messages {
		texts = append(texts, m.Text)
	}
	if want := []string{"A owns the run", "B owns the run"}; !slices.Equal(texts, want) {
		t.Fatalf("messages = %q, want %q", texts, want)
	}
}

// TestPostCallers: who may post where (SPEC §4 mutate class).
func TestPostCallers(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: time.Hour})
	registerInproc(t, rt, "A", "B")
	// T: the target, with a live caller pT. U: a caller live on its own thread.
	// I: a thread with no run. V: archived. W: deleted. R: rotated.
	createThreads(t, rt, "T", "U", "I", "V", "W", "R", "X")
	pT, _, _ := liveOn(t, rt, "T", "A")
	pU, _, _ := liveOn(t, rt, "U", "A")
	_, tokI := openMinted(t, rt, "I", "A")
	pI := assertLive(t, rt, "I", tokI)
	pV, _, _ := liveOn(t, rt, "V", "A")
	noErr(t, rt.Archive(ctx, "V"))
	pW, _, _ := liveOn(t, rt, "W", "A")
	noErr(t, rt.DeleteThread(ctx, "W"))
	pR, _, _ := liveOn(t, rt, "R", "A")
	rot, err := rt.Rotate(ctx, "R", "A")
	noErr(t, err)
	pR2 := assertLive(t, rt, "rotated", bearer(t, rot.Authorization))
	_, rw := issueClient(t, rt, "editor", memdb.AccessReadWrite)
	_, ro := issueClient(t, rt, "viewer", memdb.AccessReadOnly)
	revokedClient, rc := issueClient(t, rt, "gone", memdb.AccessReadWrite)
	noErr(t, rt.RevokeClient(ctx, revokedClient.ClientID))
	forged := pT
	forged.CredentialID, forged.Namespace = "cred_forged", "cred:cred_forged"

	tests := []struct {
		name    string
		caller  mcpruntime.Principal
		thread  string
		text    string
		wantErr error // nil: the post succeeds
	}{
		{"live caller, own thread", pT, "", "x", nil},
		{"live caller, own thread by id", pT, "T", "x", nil},
		{"caller live on its own thread, another target", pU, "T", "x", nil},
		{"caller without a run on its own thread", pI, "", "x", mcpruntime.ErrNotLive},
		{"caller without a run, another target with a run", pI, "T", "x", mcpruntime.ErrNotLive},
		{"caller of an archived thread, own thread", pV, "", "x", mcpruntime.ErrArchivedThread},
		{"caller of an archived thread, live target", pV, "T", "x", mcpruntime.ErrNotLive},
		{"caller of a deleted thread, live target", pW, "T", "x", mcpruntime.ErrNotLive},
		{"caller of a deleted thread, own thread", pW, "", "x", mcpruntime.ErrUnknownThread},
		{"rotated-out credential", pR, "", "x", mcpruntime.ErrNotLive},
		{"rotated-in credential", pR2, "", "x", nil},
		{"forged credential id", forged, "", "x", mcpruntime.ErrNotLive},
		{"read-write client, explicit thread", rw, "T", "x", nil},
		{"read-write client, no thread", rw, "", "x", mcpruntime.ErrCredentialRequired},
		{"read-only client", ro, "T", "x", mcpruntime.ErrReadOnly},
		{"revoked client", rc, "T", "x", mcpruntime.ErrNotLive},
		{"missing target", pT, "nope", "x", mcpruntime.ErrUnknownThread},
		{"archived target", pT, "V", "x", mcpruntime.ErrArchivedThread},
		{"archived target, client", rw, "V", "x", mcpruntime.ErrArchivedThread},
		{"empty text", pT, "", "", mcpruntime.ErrInvalidArgument},
		{"invalid UTF-8", pT, "", "\xff\xfe", mcpruntime.ErrInvalidArgument},
		{"text over 64 KiB", pT, "", strings.Repeat("x", 64<<10+1), mcpruntime.ErrInvalidArgument},
		{"text of 64 KiB", pT, "", strings.Repeat("x", 64<<10), nil},
		{"thread without a current instance", pT, "X", "x", nil},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			target := test.thread
			if target == "" {
				target = test.caller.Thread
			}
			var before []mcpruntime.Message
			if th, err := rt.Thread(ctx, target); err == nil {
				before = th.Messages
			}
			m, err := rt.Post(ctx, test.caller, test.thread, test.text)
			if test.wantErr != nil {
				if !errors.Is(err, test.wantErr) {
					t.Fatalf("Post = %+v, %v; want %v", m, err, test.wantErr)
				}
				if th, err := rt.Thread(ctx, target); err == nil && len(th.Messages) != len(before) {
					t.Fatalf("refused post changed %s's messages: %d → %d", target, len(before), len(th.Messages))
				}
				return
			}
			noErr(t, err)
			if m.Text != test.text || m.Author != test.caller.Namespace || m.Instance != test.caller.Instance {
				t.Fatalf("Post = %+v, want text of %d bytes by %s (instance %q)", m, len(test.text), test.caller.Namespace, test.caller.Instance)
			}
			got := threadOf(t, rt, target).Messages
			if len(got) != len(before)+1 || got[len(got)-1] != m {
				t.Fatalf("%s's last message = %+v, want %+v appended", target, got[len(got)-1], m)
			}
		})
	}

	// An expired credential is not live, even while its run is active.
	clk.Advance(time.Hour)
	if _, err := rt.Post(ctx, pT, "", "after expiry"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("Post with an expired credential = %v, want ErrNotLive", err)
	}
	if _, err := rt.Post(ctx, rw, "T", "client after the provider's expiry"); err != nil {
		t.Fatalf("read-write client post = %v (its token has its own TTL)", err)
	}
}

// TestMessageLogBound: a thread keeps only the last Config.MessageLog
// messages; sequence numbers keep counting.
func TestMessageLogBound(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{MessageLog: 3})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, _ := liveOn(t, rt, "T", "A")
	for i := range 5 {
		m, err := rt.Post(ctx, p, "", fmt.Sprintf("m%d", i))
		noErr(t, err)
		if m.Seq != uint64(i) {
			t.Fatalf("post %d got Seq %d", i, m.Seq)
		}
	}
	type entry struct {
		Seq  uint64
		Text string
	}
	var got []entry
	for _, m := range threadOf(t, rt, "T").Messages {
		got = append(got, entry{m.Seq, m.Text})
	}
	want := []entry{{2, "m2"}, {3, "m3"}, {4, "m4"}}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Fatalf("kept messages (-want +got):\n%s", diff)
	}
}

// TestPostRacesEndRun is SPEC §4's atomicity: with posts racing EndRun, no
// post that starts after EndRun returned succeeds, a caller that was refused
// is never accepted again, and the thread holds exactly the accepted posts.
func TestPostRacesEndRun(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{MessageLog: 1 << 20})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, run, _ := liveOn(t, rt, "T", "A")

	const (
		workers     = 8
		beforeEnd   = 32   // successful posts to wait for before EndRun
		afterEnd    = 5    // posts each worker makes once it saw EndRun return
		maxAttempts = 5000 // bounds a worker if EndRun is never reached
	)
	var (
		ended     atomic.Bool
		successes atomic.Int64
		enough    = make(chan struct{})
		enoughOne sync.Once
		mu        sync.Mutex // guards the fields below
		accepted  []mcpruntime.Message
		problems  []string
	)
	report := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			refused, after := false, 0
			for i := 0; i < maxAttempts && after < afterEnd; i++ {
				startedAfterEnd := ended.Load()
				if startedAfterEnd {
					after++
				}
				m, err := rt.Post(ctx, p, "", fmt.Sprintf("w%d-%d", w, i))
				switch {
				case err == nil:
					mu.Lock()
					accepted = append(accepted, m)
					mu.Unlock()
					if startedAfterEnd {
						report("worker %d: post %d started after EndRun returned and succeeded (Seq %d)", w, i, m.Seq)
					}
					if refused {
						report("worker %d: post %d succeeded after an earlier post was refused", w, i)
					}
					if successes.Add(1) == beforeEnd {
						enoughOne.Do(func() { close(enough) })
					}
				case errors.Is(err, mcpruntime.ErrNotLive):
					refused = true
				default:
					report("worker %d: post %d: unexpected error %v", w, i, err)
				}
			}
		})
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-enough:
	case <-allDone:
		t.Fatalf("workers stopped after %d successful posts, before EndRun: %q", successes.Load(), problems)
	}
	noErr(t, rt.EndRun(ctx, "T", run))
	ended.Store(true)
	<-allDone

	for _, p := range problems {
		t.Error(p)
	}
	t.Logf("%d posts accepted before the run ended", len(accepted))
	slices.SortFunc(accepted, func(a, b mcpruntime.Message) int { return cmp.Compare(a.Seq, b.Seq) })
	if diff := gocmp.Diff(accepted, threadOf(t, rt, "T").Messages); diff != "" {
		t.Fatalf("thread messages differ from the accepted posts (-accepted +thread):\n%s", diff)
	}
	for i, m := range accepted {
		if m.Seq != uint64(i) {
			t.Fatalf("accepted message %d has Seq %d: sequence numbers must be dense", i, m.Seq)
		}
	}
}

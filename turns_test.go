package mcpruntime_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// agentRuntime is a runtime whose instance "A" (kind "agent") takes
// prompts, with thread "T" on it and its session open; it returns the
// runtime, the agent driver, and the principal of the pair's credential.
func agentRuntime(t *testing.T, cfg mcpruntime.Config) (*mcpruntime.Runtime, *providertest.Agent, mcpruntime.Principal) {
	t.Helper()
	agent := &providertest.Agent{}
	cfg.Drivers = map[string]driver.Factory{"agent": agent.Factory()}
	rt := quietRuntime(t, cfg)
	registerInproc(t, rt, "plain")
	noErr(t, rt.RegisterInstance(context.Background(), "A", mcpruntime.InstanceSpec{Driver: "agent"}))
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	p, err := rt.Authenticate(tok)
	noErr(t, err)
	return rt, agent, p
}

func runOf(t *testing.T, rt *mcpruntime.Runtime, thread string) *mcpruntime.Run {
	t.Helper()
	th, err := rt.Thread(context.Background(), thread)
	noErr(t, err)
	return th.Run
}

// TestStartTurnIsTheAgentsTurn: a run with an input is the agent's turn —
// the agent gets the prompt under the run's id, its credential may mutate
// while the turn runs, and once the agent reports the turn ended the run
// is over and the same post is refused (SPEC §3.7). The run's end follows
// the report off the reporting goroutine, so the test runs in a synctest
// bubble: once the bubble is quiet after the report, the run must be over
// — checked at that moment, not waited for.
func TestStartTurnIsTheAgentsTurn(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		drainDeadLetterThrottle(t)
		ctx := context.Background()
		rt, agent, p := agentRuntime(t, mcpruntime.Config{})

		run, err := rt.StartTurn(ctx, "T", "A", "post hello")
		noErr(t, err)
		s := agent.Session("T")
		if got := s.Turns(); !slices.Equal(got, []driver.Turn{{Thread: "T", ID: run, Input: "post hello"}}) {
			t.Fatalf("turns the agent got = %+v, want the input under run %s", got, run)
		}
		if r := runOf(t, rt, "T"); r == nil || r.ID != run || r.Instance != "A" {
			t.Fatalf("thread's run = %+v, want %s of A", r, run)
		}
		_, err = rt.Post(ctx, p, "T", "during the turn")
		noErr(t, err)

		s.End(run, driver.TurnCompleted)
		synctest.Wait()
		if r := runOf(t, rt, "T"); r != nil {
			t.Fatalf("thread's run once the turn's end was heard = %+v, want none", r)
		}
		if _, err := rt.Post(ctx, p, "T", "after the turn"); !errors.Is(err, mcpruntime.ErrNotLive) {
			t.Fatalf("post after the turn ended = %v, want ErrNotLive", err)
		}
		if got := s.Interrupts(); len(got) != 0 {
			t.Errorf("a turn that ended by itself was interrupted: %q", got)
		}
	})
}

// TestEndRunInterruptsTheTurn: the host ending the run asks the agent to
// stop the turn; a switch does not — the agent finishes its turn, and what
// it mutates meanwhile is refused.
func TestEndRunInterruptsTheTurn(t *testing.T) {
	ctx := context.Background()
	rt, agent, p := agentRuntime(t, mcpruntime.Config{})
	run, err := rt.StartTurn(ctx, "T", "A", "work")
	noErr(t, err)
	noErr(t, rt.EndRun(ctx, "T", ""))
	s := agent.Session("T")
	if got := s.Interrupts(); !slices.Equal(got, []string{run}) {
		t.Fatalf("interrupts = %q, want [%s]", got, run)
	}

	second, err := rt.StartTurn(ctx, "T", "A", "more work")
	noErr(t, err)
	res, err := rt.SwitchProvider(ctx, "T", "plain")
	noErr(t, err)
	if res.EndedRun != second {
		t.Fatalf("switch ended %q, want %s", res.EndedRun, second)
	}
	if got := s.Interrupts(); !slices.Equal(got, []string{run}) {
		t.Fatalf("interrupts after the switch = %q, want [%s] (the switch lets the turn finish)", got, run)
	}
	if _, err := rt.Post(ctx, p, "T", "still in my turn"); !errors.Is(err, mcpruntime.ErrNotLive) {
		t.Fatalf("the switched-away agent's post = %v, want ErrNotLive", err)
	}
}

// TestEndRunInterruptsADetachedTurn: the interrupt goes to the session
// that was given the turn, even once the thread was detached from it (a
// handoff keeps the agent running): the host ending the run stops it.
func TestEndRunInterruptsADetachedTurn(t *testing.T) {
	ctx := context.Background()
	rt, agent, _ := agentRuntime(t, mcpruntime.Config{})
	run, err := rt.StartTurn(ctx, "T", "A", "work")
	noErr(t, err)
	noErr(t, rt.Detach(ctx, "T"))
	if r := runOf(t, rt, "T"); r == nil || r.ID != run {
		t.Fatalf("thread's run after the detach = %+v, want %s", r, run)
	}
	noErr(t, rt.EndRun(ctx, "T", run))
	if got := agent.Session("T").Interrupts(); !slices.Equal(got, []string{run}) {
		t.Fatalf("interrupts = %q, want [%s]: the detached agent's turn runs on", got, run)
	}
}

// TestTurnEndOfAnOldRun: the end of a turn whose run is over leaves the
// thread's next run alone.
func TestTurnEndOfAnOldRun(t *testing.T) {
	ctx := context.Background()
	rt, agent, p := agentRuntime(t, mcpruntime.Config{})
	first, err := rt.StartTurn(ctx, "T", "A", "one")
	noErr(t, err)
	noErr(t, rt.EndRun(ctx, "T", first)) // the agent reports it interrupted
	second, err := rt.StartTurn(ctx, "T", "A", "two")
	noErr(t, err)
	agent.Session("T").End(first, driver.TurnCompleted) // late, again
	// A post is a round trip through the thread actor: every end the
	// runtime heard before it has been applied.
	recs := waitRecords(t, rt, func(r mcpruntime.Record) bool {
		return r.Kind == mcpruntime.RecordTurnEnded && r.Turn == first && r.State == driver.TurnCompleted
	})
	_ = recs
	_, err = rt.Post(ctx, p, "T", "still in the second turn")
	noErr(t, err)
	if r := runOf(t, rt, "T"); r == nil || r.ID != second {
		t.Fatalf("run = %+v, want %s still active", r, second)
	}
}

// TestStartTurnRefusals: no open session, a driver that takes no prompts,
// an agent that refuses, a bad input — each refused, with no run left.
func TestStartTurnRefusals(t *testing.T) {
	ctx := context.Background()
	rt, agent, _ := agentRuntime(t, mcpruntime.Config{})
	createThreads(t, rt, "U")
	_, err := rt.SwitchProvider(ctx, "U", "A")
	noErr(t, err)
	if _, err := rt.StartTurn(ctx, "U", "A", "hi"); !errors.Is(err, mcpruntime.ErrNoProviderSession) {
		t.Errorf("no session: %v, want ErrNoProviderSession", err)
	}
	if _, err := rt.StartTurn(ctx, "nope", "A", "hi"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
		t.Errorf("unknown thread: %v, want ErrUnknownThread", err)
	}
	agent.FailNextTurn(errors.New("agent is busy compacting"))
	_, err = rt.StartTurn(ctx, "T", "A", "hi")
	if !errors.Is(err, mcpruntime.ErrTurnRefused) || !strings.Contains(err.Error(), "agent is busy compacting") {
		t.Errorf("refused turn: %v, want ErrTurnRefused with the agent's words", err)
	}
	if r := runOf(t, rt, "T"); r != nil {
		t.Errorf("run %+v left after a refused turn", r)
	}
	for _, input := range []string{"", strings.Repeat("x", mcpruntime.MaxTurnInput+1), "\xff"} {
		if _, err := rt.StartTurn(ctx, "T", "A", input); !errors.Is(err, mcpruntime.ErrInvalidArgument) {
			t.Errorf("input of %d bytes: %v, want ErrInvalidArgument", len(input), err)
		}
	}

	createThreads(t, rt, "V")
	openMinted(t, rt, "V", "plain")
	if _, err := rt.StartTurn(ctx, "V", "plain", "hi"); !errors.Is(err, mcpruntime.ErrTurnsUnsupported) {
		t.Errorf("inproc: %v, want ErrTurnsUnsupported", err)
	}
	if r := runOf(t, rt, "V"); r != nil {
		t.Errorf("run %+v left on a driver that takes no prompts", r)
	}
}

// waitRecords waits until a record of the journal matches and
// returns the journal's records up to it.
func waitRecords(t *testing.T, rt *mcpruntime.Runtime, match func(mcpruntime.Record) bool) []mcpruntime.Record {
	t.Helper()
	var out []mcpruntime.Record
	waitUntil(t, "a provider record", func() bool {
		page, err := rt.Records(0, 1<<20)
		noErr(t, err)
		out = page.Records
		return slices.ContainsFunc(out, match)
	})
	return out
}

// TestRecords: what an agent reports is journaled in order, with
// ids a reader resumes from; the journal keeps its last
// Config.Journal records and says where it starts.
func TestRecords(t *testing.T) {
	ctx := context.Background()
	rt, agent, _ := agentRuntime(t, mcpruntime.Config{Journal: 4})
	run, err := rt.StartTurn(ctx, "T", "A", "hi")
	noErr(t, err)
	s := agent.Session("T")
	s.Say(run, "hello there")
	s.End(run, driver.TurnCompleted)
	recs := waitRecords(t, rt, func(r mcpruntime.Record) bool { return r.Kind == mcpruntime.RecordRunEnded })
	var kinds []string
	for i, r := range recs {
		if i > 0 && r.ID != recs[i-1].ID+1 {
			t.Fatalf("ids not consecutive: %+v", recs)
		}
		kinds = append(kinds, r.Kind)
	}
	// Before these: the thread created, its credential minted, the agent's
	// status, the session opened and the run started — dropped by the bound.
	// The turn's end ends the run, journaled after it.
	want := []string{"agent." + driver.EventTurnStarted, "agent." + driver.EventMessage, mcpruntime.RecordTurnEnded, mcpruntime.RecordRunEnded}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds = %q, want %q", kinds, want)
	}
	if m := recs[1]; m.Thread != "T" || m.Turn != run || m.Text != "hello there" || m.Instance != "A" {
		t.Errorf("message record = %+v", m)
	}
	if e := recs[3]; e.Thread != "T" || e.Run != run || e.Instance != "A" {
		t.Errorf("run ended record = %+v", e)
	}
	page, err := rt.Records(recs[1].ID, 10)
	noErr(t, err)
	if page.Oldest != recs[0].ID || page.Newest != recs[3].ID || len(page.Records) != 2 || page.Records[0].ID != recs[2].ID {
		t.Errorf("resume after %d: %+v", recs[1].ID, page)
	}
	if page.Oldest < 2 {
		t.Errorf("oldest = %d: the bound dropped nothing", page.Oldest)
	}
}

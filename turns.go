package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/thread"
)

// MaxTurnInput bounds the input of a run that is an agent's turn.
const MaxTurnInput = 256 << 10

// StartTurn starts a run of instance on the thread whose input is the
// agent's turn (SPEC §3.7): the run starts, then the open provider session
// serving the pair sends input to its agent (Codex turn/start, a Claude
// Code user message, an OpenCode prompt). It returns the run id once the
// agent accepted the prompt; the run ends when the agent's turn ends
// (completed, failed, interrupted), and EndRun interrupts the turn. If the
// agent does not take the prompt the run is ended and the error is
// ErrTurnRefused; a pair with no open session is ErrNoProviderSession, an
// instance whose driver takes no prompts (inproc, exec) ErrTurnsUnsupported.
func (r *Runtime) StartTurn(ctx context.Context, threadID, instance, input string) (string, error) {
	if input == "" || len(input) > MaxTurnInput || !utf8.ValidString(input) {
		return "", fmt.Errorf("turn input: %w: between 1 byte and %d bytes of UTF-8", ErrInvalidArgument, MaxTurnInput)
	}
	if err := validID("instance", instance); err != nil {
		return "", err
	}
	if !r.served(threadID, instance) {
		if _, err := r.threadActor(threadID); err != nil {
			return "", err
		}
		return "", fmt.Errorf("start turn on %s: instance %s: %w", threadID, instance, ErrNoProviderSession)
	}
	runID, err := r.StartRun(ctx, threadID, instance)
	if err != nil {
		return "", err
	}
	_, err = call[*provider.TurnStarted](ctx, r, r.instanceActor(instance),
		&provider.StartTurn{Turn: driver.Turn{Thread: threadID, ID: runID, Input: input}}, r.budget(opDriver, instance))
	if err != nil {
		// The agent never had the turn: the run it was for ends now.
		if _, eerr := r.endRun(context.WithoutCancel(ctx), threadID, runID); eerr != nil && !errors.Is(eerr, ErrNoRun) {
			err = errors.Join(err, eerr)
		}
		return "", err
	}
	return runID, nil
}

// served reports whether an open provider session of instance serves the
// thread.
func (r *Runtime) served(threadID, instance string) bool {
	sessions, err := r.store.Read().ProviderSessionsByInstance(instance)
	if err != nil {
		return false
	}
	for _, s := range sessions {
		for _, t := range s.Threads {
			if t == threadID {
				return true
			}
		}
	}
	return false
}

// endRun ends the run runID ("" whichever is active) without telling the
// agent, and returns the id of the run it ended.
func (r *Runtime) endRun(ctx context.Context, threadID, runID string) (string, error) {
	t, err := r.threadActor(threadID)
	if err != nil {
		return "", err
	}
	res, err := call[*thread.EndRunResult](ctx, r, t, &thread.EndRun{RunID: runID}, r.budget(opActor, ""))
	if err != nil {
		return "", err
	}
	return res.RunID, nil
}

// interrupt asks the agent of instance to stop the turn runID on the
// thread: the host ended the run. A driver
// that takes no prompts has nothing to stop; a failure is logged, the run
// is over regardless.
func (r *Runtime) interrupt(ctx context.Context, threadID, instance, runID string) {
	if instance == "" || runID == "" {
		return
	}
	_, err := call[*provider.TurnInterrupted](ctx, r, r.instanceActor(instance),
		&provider.InterruptTurn{Thread: threadID, Turn: runID}, r.budget(opActor, ""))
	if err != nil && !errors.Is(err, ErrUnknownInstance) {
		r.cfg.Logger.Warn("interrupt turn", "thread", threadID, "instance", instance, "run", runID, "err", err)
	}
}

// turnEnded ends the run of a turn the agent finished, unless it is no
// longer the thread's run (the host ended it, or started another).
func (r *Runtime) turnEnded(e *provider.TurnEnded) {
	ctx, cancel := context.WithTimeout(r.base, r.budget(opActor, ""))
	defer cancel()
	if e.TurnEnd.Turn == "" {
		return // not a run's turn: "" would end whichever run is active
	}
	_, err := r.endRun(ctx, e.TurnEnd.Thread, e.TurnEnd.Turn)
	if err != nil && !errors.Is(err, ErrNoRun) && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrArchivedThread) && !errors.Is(err, ErrUnknownThread) {
		r.cfg.Logger.Warn("end the run of a finished turn", "thread", e.TurnEnd.Thread, "run", e.TurnEnd.Turn, "err", err)
	}
}

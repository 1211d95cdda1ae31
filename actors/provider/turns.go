package provider

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
)

// Turns: a run started with an input is the agent's turn. The instance
// finds the open session serving the thread and hands it the request; the
// session actor runs the driver's Turner call in order with its other
// calls and answers the asker, whose PID it keeps in its queue (state,
// not a message).

// startTurn hands msg to the session serving its thread.
func (a *instanceActor) startTurn(ctx actor.Context, msg *StartTurn) {
	serving := a.serving(msg.Turn.Thread)
	if len(serving) == 0 {
		ctx.Respond(&TurnStarted{Fault: fault.New(fault.NoProviderSession, "start turn on %s: instance %s: %v", msg.Turn.Thread, a.cfg.Instance.ID, fault.ErrNoProviderSession)})
		return
	}
	c := serving[0]
	c.lastActive = a.cfg.Now()
	if c.turns == nil {
		c.turns = map[string]string{}
	}
	c.turns[msg.Turn.Thread] = msg.Turn.ID
	ctx.Send(c.pid, &opTurn{
		start: &msg.Turn, sender: ctx.Sender(), deadline: msg.Or(a.cfg.ActorTimeout),
	})
}

// interruptTurn asks the open session that was given the turn to stop it
// — attached to the thread still or not — and answers once the driver
// took the request (the turn's end is reported when the agent stopped);
// at once when no open session has the turn (a run that was no turn, or
// whose session is gone).
func (a *instanceActor) interruptTurn(ctx actor.Context, msg *InterruptTurn) {
	var c *child
	for _, o := range a.sorted(open) {
		if msg.Turn != "" && o.turns[msg.Thread] == msg.Turn {
			c = o
			break
		}
	}
	if c == nil {
		ctx.Respond(&TurnInterrupted{})
		return
	}
	ctx.Send(c.pid, &opTurn{
		interrupt: &driver.Turn{Thread: msg.Thread, ID: msg.Turn}, sender: ctx.Sender(), deadline: msg.Or(a.cfg.ActorTimeout),
	})
}

// opTurn is a Turner call for the session actor, a start or an interrupt,
// answered to sender.
type opTurn struct {
	start     *driver.Turn
	interrupt *driver.Turn
	sender    *actor.PID
	deadline  time.Time
}

// answer tells the asker how it went. An interrupt's failure is only
// logged (the run is over regardless): its answer carries no fault.
func (op *opTurn) answer(ctx actor.Context, session string, f fault.Fault) {
	switch {
	case op.sender == nil:
	case op.start != nil:
		ctx.Send(op.sender, &TurnStarted{SessionID: session, Fault: f})
	default:
		ctx.Send(op.sender, &TurnInterrupted{Sessions: []string{session}})
	}
}

// runTurn runs op on the session's driver, or answers at once when the
// driver takes no prompts; it reports whether a call is in flight.
func (s *providerSessionActor) runTurn(ctx actor.Context, op *opTurn) bool {
	turner, ok := s.handle.(driver.Turner)
	if !ok {
		var f fault.Fault
		if op.start != nil { // an interrupt has nothing to stop
			f = fault.New(fault.TurnsUnsupported, "start turn on %s: instance %s: %v", op.start.Thread, s.cfg.Instance.ID, fault.ErrTurnsUnsupported)
		}
		op.answer(ctx, s.id, f)
		return false
	}
	if deadline.Passed(op.deadline) {
		op.answer(ctx, s.id, timeoutFault("start turn"))
		return false
	}
	timeout := min(s.cfg.OpTimeout, deadline.Left(op.deadline))
	if op.start != nil {
		t := *op.start
		s.run(ctx, timeout, func(c context.Context) any { return &opDone{op: op, err: turner.StartTurn(c, t)} })
	} else {
		t := *op.interrupt
		s.run(ctx, timeout, func(c context.Context) any { return &opDone{op: op, err: turner.Interrupt(c, t.Thread, t.ID)} })
	}
	return true
}

// turnDone answers a start whose driver call returned.
func (s *providerSessionActor) turnDone(ctx actor.Context, op *opTurn, err error) {
	if err == nil {
		op.answer(ctx, s.id, fault.Fault{})
		return
	}
	if op.start != nil {
		op.answer(ctx, s.id, fault.New(fault.TurnRefused, "start turn on %s: instance %s: %v: %v", op.start.Thread, s.cfg.Instance.ID, fault.ErrTurnRefused, err))
		return
	}
	s.cfg.Logger.Warn("interrupt turn", "session", s.id, "thread", op.interrupt.Thread, "turn", op.interrupt.ID, "err", err)
	op.answer(ctx, s.id, fault.Fault{})
}

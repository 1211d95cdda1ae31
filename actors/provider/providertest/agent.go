package providertest

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Agent is a driver whose sessions take prompts (driver.Turner), as the
// real agents' do, for tests of runs that are turns: a test reads the
// turns and interrupts a session was given, ends a turn as the agent
// would, and makes the next StartTurn fail. An interrupted turn is
// reported ended (interrupted) at once. Sessions are exclusive. One Agent
// serves any number of instances.
type Agent struct {
	mu       sync.Mutex // guards the fields below
	sessions []*AgentSession
	failNext error
}

// Factory returns the driver.Factory of the agent driver; it takes no
// configuration.
func (a *Agent) Factory() driver.Factory {
	return func(string, json.RawMessage) (driver.Driver, error) { return agentDriver{a}, nil }
}

// FailNextTurn makes the next StartTurn of any session return err.
func (a *Agent) FailNextTurn(err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.failNext = err
}

// Session returns the newest session serving thread, or nil.
func (a *Agent) Session(thread string) *AgentSession {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.sessions) - 1; i >= 0; i-- {
		if a.sessions[i].thread == thread {
			return a.sessions[i]
		}
	}
	return nil
}

type agentDriver struct{ a *Agent }

func (agentDriver) MultiThread() bool { return false }

func (d agentDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &AgentSession{a: d.a, thread: req.Binding.Thread, events: req.Events}
	d.a.mu.Lock()
	d.a.sessions = append(d.a.sessions, s)
	d.a.mu.Unlock()
	req.Events.Status(driver.Status{Thread: s.thread, State: driver.StatusConnected})
	return s, nil
}

// AgentSession is one session of the Agent driver.
type AgentSession struct {
	a      *Agent
	thread string
	events driver.Events

	mu         sync.Mutex // guards the fields below
	turns      []driver.Turn
	interrupts []string
	closed     bool
}

// Turns returns the turns the session was given, in order.
func (s *AgentSession) Turns() []driver.Turn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.turns)
}

// Interrupts returns the ids of the turns the session was asked to stop.
func (s *AgentSession) Interrupts() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.interrupts)
}

// Say reports a message of the agent during turn.
func (s *AgentSession) Say(turn, text string) {
	s.events.Event(driver.Event{Thread: s.thread, Turn: turn, Kind: driver.EventMessage, Text: text})
}

// End reports the end of turn with outcome, as the agent would.
func (s *AgentSession) End(turn, outcome string) {
	s.events.TurnEnded(driver.TurnEnd{Thread: s.thread, Turn: turn, Outcome: outcome})
}

// StartTurn implements driver.Turner.
func (s *AgentSession) StartTurn(ctx context.Context, t driver.Turn) error {
	s.a.mu.Lock()
	err := s.a.failNext
	s.a.failNext = nil
	s.a.mu.Unlock()
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("agent: session closed")
	}
	s.turns = append(s.turns, t)
	s.events.Event(driver.Event{Thread: t.Thread, Turn: t.ID, Kind: driver.EventTurnStarted})
	return nil
}

// Interrupt implements driver.Turner: the turn ends, interrupted.
func (s *AgentSession) Interrupt(ctx context.Context, thread, turn string) error {
	s.mu.Lock()
	s.interrupts = append(s.interrupts, turn)
	s.mu.Unlock()
	s.End(turn, driver.TurnInterrupted)
	return nil
}

func (s *AgentSession) Attach(context.Context, driver.Binding) error { return nil }
func (s *AgentSession) Detach(context.Context, string) error         { return nil }

func (s *AgentSession) Close(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}

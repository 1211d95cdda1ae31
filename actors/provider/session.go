package provider

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
)

// Messages between the instance actor and its session children. They
// never leave the process (a child lives where its parent does), and carry
// no PID: the instance keeps who waits for what (attachOp, child.onOpen).
type (
	// opAttach asks for the driver's Attach of binding, bounded by
	// deadline; seq is the instance's number of the dispatch.
	opAttach struct {
		seq      uint64
		binding  driver.Binding
		deadline time.Time
	}
	opDetach struct{ thread string }
	opClose  struct{}

	// childOpened: the driver's Open returned (fault: it failed).
	childOpened struct {
		id    string
		fault fault.Fault
	}
	// childAttached: the Attach dispatched as seq returned.
	childAttached struct {
		id    string
		seq   uint64
		fault fault.Fault
	}
	// childDied: the driver reported that the session ended by itself.
	childDied struct {
		id    string
		cause string
	}
)

// The session actor's own messages: its driver calls reporting back.
type (
	openDone struct {
		handle driver.Session
		err    error
	}
	opDone struct {
		op  any
		err error
	}
	died struct{ err error }
)

// providerSessionActor owns one driver session. driver.Driver calls are I/O, so
// each runs in a goroutine that reports back; the actor runs them one at a
// time, in the order they arrived, which is the serialization the driver
// contract promises. Its phases are behaviours: opening (Open in flight,
// operations queue), open (operations run one at a time), closing (Close
// in flight, then the actor stops) and failed (Open failed; the instance
// stops the actor).
type providerSessionActor struct {
	id       string
	first    driver.Binding
	openBy   time.Time // the deadline of the open that started the session
	cfg      Config
	behavior actor.Behavior

	handle driver.Session
	events *events
	queue  []any
	busy   bool
}

func newProviderSession(id string, cfg Config, first driver.Binding, openBy time.Time) *providerSessionActor {
	s := &providerSessionActor{id: id, first: first, openBy: openBy, cfg: cfg}
	s.behavior.Become(s.opening)
	return s
}

func (s *providerSessionActor) Receive(ctx actor.Context) { s.behavior.Receive(ctx) }

func (s *providerSessionActor) opening(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.busy = true
		s.events = &events{root: ctx.ActorSystem().Root, self: ctx.Self(), instance: s.cfg.Instance.ID, session: s.id}
		req := driver.OpenRequest{
			SessionID: s.id,
			Instance:  s.cfg.Instance.ID,
			Binding:   s.first.Clone(),
			Events:    s.events,
		}
		drv := s.cfg.Driver
		s.run(ctx, min(s.cfg.OpTimeout, deadline.Left(s.openBy)), func(c context.Context) any {
			h, err := drv.Open(c, req)
			return &openDone{handle: h, err: err}
		})
	case *openDone:
		s.busy = false
		if msg.err != nil {
			f := fault.New(fault.ProviderOpenFailed, "open provider session of %s: %v: %v", s.cfg.Instance.ID, driver.ErrOpenFailed, msg.err)
			// The instance answers the open and stops this actor.
			ctx.Send(ctx.Parent(), &childOpened{id: s.id, fault: f})
			for _, op := range s.queue {
				switch op := op.(type) {
				case *opAttach:
					ctx.Send(ctx.Parent(), &childAttached{id: s.id, seq: op.seq, fault: f})
				case *opTurn:
					op.answer(ctx, s.id, gone(s.id))
				}
			}
			s.queue = nil
			s.behavior.Become(s.failed)
			return
		}
		s.handle = msg.handle
		s.behavior.Become(s.open)
		ctx.Send(ctx.Parent(), &childOpened{id: s.id})
		s.next(ctx)
	case *opAttach, *opDetach, *opClose, *opTurn:
		s.queue = append(s.queue, msg)
	case *died:
		ctx.Send(ctx.Parent(), &childDied{id: s.id, cause: msg.err.Error()})
	}
}

func (s *providerSessionActor) open(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *opAttach, *opDetach, *opClose, *opTurn:
		s.queue = append(s.queue, msg)
		s.next(ctx)
	case *opDone:
		s.busy = false
		switch op := msg.op.(type) {
		case *opAttach:
			var f fault.Fault
			if msg.err != nil {
				f = fault.New(fault.Internal, "attach %s to %s: %v", op.binding.Thread, s.id, msg.err)
			}
			ctx.Send(ctx.Parent(), &childAttached{id: s.id, seq: op.seq, fault: f})
		case *opDetach:
			if msg.err != nil {
				s.cfg.Logger.Warn("detach provider session", "session", s.id, "thread", op.thread, "err", msg.err)
			}
		case *opTurn:
			s.turnDone(ctx, op, msg.err)
		}
		s.next(ctx)
	case *died:
		ctx.Send(ctx.Parent(), &childDied{id: s.id, cause: msg.err.Error()})
	}
}

// closing: the driver's Close runs; a death reported now is the close.
func (s *providerSessionActor) closing(ctx actor.Context) {
	if op, ok := ctx.Message().(*opTurn); ok {
		op.answer(ctx, s.id, gone(s.id))
		return
	}
	if msg, ok := ctx.Message().(*opDone); ok {
		if msg.err != nil {
			s.cfg.Logger.Warn("close provider session", "session", s.id, "err", msg.err)
		}
		s.events.closed.Store(true)
		ctx.Stop(ctx.Self())
	}
}

// failed: Open failed; the instance stops the actor.
func (s *providerSessionActor) failed(ctx actor.Context) {
	if op, ok := ctx.Message().(*opTurn); ok {
		op.answer(ctx, s.id, gone(s.id))
	}
}

// gone is the answer to a turn for a session that is closing or failed.
func gone(id string) fault.Fault {
	return fault.New(fault.NoProviderSession, "start turn: provider session %s is closing: %v", id, fault.ErrNoProviderSession)
}

// next starts the oldest queued operation, if none is running.
func (s *providerSessionActor) next(ctx actor.Context) {
	if s.busy || len(s.queue) == 0 {
		return
	}
	op := s.queue[0]
	s.queue = s.queue[1:]
	s.busy = true
	h := s.handle
	switch op := op.(type) {
	case *opAttach:
		b := op.binding.Clone()
		s.run(ctx, min(s.cfg.OpTimeout, deadline.Left(op.deadline)), func(c context.Context) any { return &opDone{op: op, err: h.Attach(c, b)} })
	case *opDetach:
		s.run(ctx, s.cfg.OpTimeout, func(c context.Context) any { return &opDone{op: op, err: h.Detach(c, op.thread)} })
	case *opTurn:
		if !s.runTurn(ctx, op) {
			s.busy = false
			s.next(ctx)
		}
	case *opClose:
		s.behavior.Become(s.closing)
		for _, q := range s.queue {
			if t, ok := q.(*opTurn); ok {
				t.answer(ctx, s.id, gone(s.id))
			}
		}
		s.queue = nil
		s.run(ctx, driver.CloseTimeout(s.cfg.Driver, s.cfg.OpTimeout), func(c context.Context) any { return &opDone{op: op, err: h.Close(c)} })
	}
}

// run calls fn in a goroutine bounded by timeout and sends its result to
// the actor. The goroutine touches no actor field.
func (s *providerSessionActor) run(ctx actor.Context, timeout time.Duration, fn func(context.Context) any) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	base, work := s.cfg.Base, s.cfg.Work
	work.Add(1)
	go func() {
		defer work.Done()
		c, cancel := context.WithTimeout(base, timeout)
		defer cancel()
		root.Send(self, fn(c))
	}()
}

// events is the Events a driver gets: a death becomes a message to the
// session actor; what the agent reports (status, its events, a turn's end)
// is published on the event stream at once, tagged with the session, in
// the order the driver reported it. Nothing is published once the session
// closed (closed is set when its Close returned).
type events struct {
	root     *actor.RootContext
	self     *actor.PID
	instance string
	session  string
	once     sync.Once
	closed   atomic.Bool
}

func (e *events) Died(err error) {
	if err == nil {
		err = fmt.Errorf("session ended")
	}
	e.once.Do(func() { e.root.Send(e.self, &died{err: err}) })
}

func (e *events) Status(st driver.Status) {
	e.publish(&AgentStatus{Instance: e.instance, SessionID: e.session, Status: st})
}

func (e *events) Event(ev driver.Event) {
	ev.Data = slices.Clone(ev.Data)
	e.publish(&AgentEvent{Instance: e.instance, SessionID: e.session, Event: ev})
}

func (e *events) TurnEnded(t driver.TurnEnd) {
	e.publish(&TurnEnded{Instance: e.instance, SessionID: e.session, TurnEnd: t})
}

func (e *events) publish(evt Event) {
	if !e.closed.Load() {
		e.root.ActorSystem().EventStream.Publish(evt)
	}
}

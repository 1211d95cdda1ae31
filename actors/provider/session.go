package provider

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
)

// Messages between the instance actor and its session children.
type (
	opAttach struct {
		binding  Binding
		replaces string
		replyTo  *actor.PID
		fromOpen bool
		openID   string // fromOpen: the id the open proposed for a new session
		seq      uint64 // the instance's order of attach/detach dispatches for the thread
	}
	opDetach struct{ thread string }
	opClose  struct{}

	openDone struct {
		handle Session
		err    error
	}
	opDone struct {
		op  any
		err error
	}
	died struct{ err error }

	childOpened struct {
		id  string
		err error
	}
	childAttached struct {
		id       string
		binding  Binding
		replaces string
		replyTo  *actor.PID
		fromOpen bool
		openID   string
		seq      uint64
		err      error
	}
	childDied struct {
		id  string
		err error
	}
)

// sessionActor owns one driver session. Driver calls are I/O, so each runs
// in a goroutine that reports back; the actor runs them one at a time, in
// the order they arrived, which is the serialization the driver contract
// promises.
type sessionActor struct {
	id       string
	instance string
	first    Binding
	cfg      Config

	handle Session
	queue  []any
	busy   bool
	closed bool // opClose has been taken off the queue
}

func (s *sessionActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		s.busy = true
		req := OpenRequest{
			SessionID: s.id,
			Instance:  s.instance,
			Binding:   s.first.Clone(),
			Events:    &events{root: ctx.ActorSystem().Root, self: ctx.Self()},
		}
		drv := s.cfg.Driver
		s.run(ctx, func(c context.Context) any {
			h, err := drv.Open(c, req)
			return &openDone{handle: h, err: err}
		})
	case *openDone:
		s.busy = false
		if msg.err != nil {
			// The parent answers the open and stops this actor.
			ctx.Send(ctx.Parent(), &childOpened{id: s.id, err: fmt.Errorf("open provider session of %s: %w: %w", s.instance, ErrOpenFailed, msg.err)})
			s.failQueued(ctx, msg.err)
			return
		}
		s.handle = msg.handle
		ctx.Send(ctx.Parent(), &childOpened{id: s.id})
		s.next(ctx)
	case *opAttach, *opDetach, *opClose:
		s.queue = append(s.queue, msg)
		s.next(ctx)
	case *opDone:
		s.busy = false
		switch op := msg.op.(type) {
		case *opAttach:
			ctx.Send(ctx.Parent(), &childAttached{id: s.id, binding: op.binding, replaces: op.replaces, replyTo: op.replyTo, fromOpen: op.fromOpen, openID: op.openID, seq: op.seq, err: msg.err})
		case *opDetach:
			if msg.err != nil {
				s.cfg.Logger.Warn("detach provider session", "session", s.id, "thread", op.thread, "err", msg.err)
			}
		case *opClose:
			if msg.err != nil {
				s.cfg.Logger.Warn("close provider session", "session", s.id, "err", msg.err)
			}
			ctx.Stop(ctx.Self())
			return
		}
		s.next(ctx)
	case *died:
		if !s.closed {
			ctx.Send(ctx.Parent(), &childDied{id: s.id, err: msg.err})
		}
	}
}

// next starts the oldest queued operation, if none is running.
func (s *sessionActor) next(ctx actor.Context) {
	if s.busy || s.handle == nil || len(s.queue) == 0 {
		return
	}
	op := s.queue[0]
	s.queue = s.queue[1:]
	s.busy = true
	h := s.handle
	switch op := op.(type) {
	case *opAttach:
		b := op.binding.Clone()
		s.run(ctx, func(c context.Context) any { return &opDone{op: op, err: h.Attach(c, b)} })
	case *opDetach:
		s.run(ctx, func(c context.Context) any { return &opDone{op: op, err: h.Detach(c, op.thread)} })
	case *opClose:
		s.closed = true
		s.runFor(ctx, CloseTimeout(s.cfg.Driver, s.cfg.OpTimeout), func(c context.Context) any { return &opDone{op: op, err: h.Close(c)} })
	}
}

// failQueued answers the operations that will never run because the open
// failed.
func (s *sessionActor) failQueued(ctx actor.Context, err error) {
	for _, op := range s.queue {
		if a, ok := op.(*opAttach); ok {
			ctx.Send(ctx.Parent(), &childAttached{id: s.id, binding: a.binding, replyTo: a.replyTo, fromOpen: a.fromOpen, seq: a.seq, err: err})
		}
	}
	s.queue = nil
}

// run calls fn in a goroutine bounded by the op timeout and sends its
// result to the actor. The goroutine touches no actor field.
func (s *sessionActor) run(ctx actor.Context, fn func(context.Context) any) {
	s.runFor(ctx, s.cfg.OpTimeout, fn)
}

// runFor is run bounded by timeout.
func (s *sessionActor) runFor(ctx actor.Context, timeout time.Duration, fn func(context.Context) any) {
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

// events is the Events a driver gets: it turns a report into a message.
type events struct {
	root *actor.RootContext
	self *actor.PID
	once sync.Once
}

func (e *events) Died(err error) {
	e.once.Do(func() { e.root.Send(e.self, &died{err: err}) })
}

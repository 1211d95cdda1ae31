// Package commit lets an actor write through a store whose commits take a
// round trip — a replica's etcd transaction and barrier (SPEC §5d), a
// state file's sync (SPEC §3.8) — without waiting for it in Receive.
//
// A write is staged against the store on the actor's turn
// ([memdb.Store.Stage]: fn runs, reads what is committed, and the
// transaction is built), committed on a goroutine of its own
// ([memdb.Pending.Commit]), and its continuation runs on the actor's turn
// once the commit answered, with the message that asked for the write
// current again (ctx.Respond answers its sender), as protoactor's
// ReenterAfter does. Until then:
//
//   - the actor's mailbox holds its user messages: they stay in the
//     mailbox, in their order, and are taken once the commit answered, so
//     each is handled on the state the write left, exactly as if the actor
//     had waited;
//   - a write asked for meanwhile (by a continuation of an earlier
//     request, which runs as a system message) waits its turn: an actor's
//     writes commit one at a time, in the order asked, each staged on the
//     state its predecessor left.
//
// So order and atomicity are those of a write made inside Receive; only the
// actor's goroutine is free, and system messages (stop, watch,
// continuations) are handled meanwhile. A write that needs no round trip
// (no log, or only tables the log does not keep) commits on the actor's
// turn and its continuation runs at once.
package commit

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// DefaultTimeout bounds the wait for a commit's answer when
// Writer.Timeout is zero. A store's log bounds its commits itself (a
// replica's at 5 s): this is a backstop well above it, never the bound a
// caller sees.
const DefaultTimeout = time.Minute

// Writer commits one actor's writes off its Receive. Its zero value is not
// usable: set Store. It belongs to one actor and is used only on that
// actor's turn.
type Writer struct {
	Store *memdb.Store
	// Timeout bounds the wait for one commit's answer. Zero:
	// DefaultTimeout.
	Timeout time.Duration

	busy      bool // a commit is in flight
	suspended bool // the actor's mailbox holds its user messages
	queue     []write
}

// write is a write asked for while another was committing.
type write struct {
	fn   func(w *memdb.Writer) error
	then func(err error)
}

// committed is a commit's answer, to the future of the actor that staged
// it: it never leaves the process (nor the actor), so it keeps the error
// itself, which the actor tells apart (memdb.ErrStale).
type committed struct{ err error }

// Busy reports whether a commit is in flight.
func (c *Writer) Busy() bool { return c.busy }

// Write stages fn in the store and commits it off the actor, then calls
// then on the actor's turn with the outcome (fn's error, or the commit's).
// While it commits, the actor's user messages are held in its mailbox and
// later writes wait their turn (see the package doc). Call it only from
// the actor's Receive or a continuation of it.
func (c *Writer) Write(ctx actor.Context, fn func(w *memdb.Writer) error, then func(err error)) {
	if c.busy || len(c.queue) > 0 {
		c.queue = append(c.queue, write{fn: fn, then: then})
		return
	}
	c.run(ctx, fn, then)
}

func (c *Writer) run(ctx actor.Context, fn func(w *memdb.Writer) error, then func(err error)) {
	p, err := c.Store.Stage(fn)
	if err != nil || p == nil {
		then(err)
		return
	}
	c.busy = true
	c.suspend(ctx)
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	sys := ctx.ActorSystem()
	f := actor.NewFuture(sys, timeout)
	answer := f.PID()
	go func() {
		sys.Root.Send(answer, &committed{err: p.Commit()})
	}()
	ctx.ReenterAfter(f, func(res any, err error) {
		c.busy = false
		if r, ok := res.(*committed); ok && err == nil {
			err = r.err
		} else {
			// The backstop fired: the commit may still land. Say so rather
			// than guess.
			err = fmt.Errorf("commit: no answer within %s: %w", timeout, fault.ErrTimeout)
		}
		then(err)
		c.next(ctx)
	})
}

// next starts the writes that waited, in order, until one must commit
// through the log; once none is in flight the mailbox is let go.
func (c *Writer) next(ctx actor.Context) {
	for !c.busy && len(c.queue) > 0 {
		w := c.queue[0]
		c.queue = c.queue[1:]
		c.run(ctx, w.fn, w.then)
	}
	if !c.busy && c.suspended {
		c.suspended = false
		c.system(ctx, &actor.ResumeMailbox{})
	}
}

// suspend makes the actor's mailbox hold its user messages from the end
// of the current turn on: protoactor's mailbox takes system messages first,
// and while suspended takes only those.
func (c *Writer) suspend(ctx actor.Context) {
	if !c.suspended {
		c.suspended = true
		c.system(ctx, &actor.SuspendMailbox{})
	}
}

func (c *Writer) system(ctx actor.Context, msg any) {
	self := ctx.Self()
	if p, ok := ctx.ActorSystem().ProcessRegistry.Get(self); ok {
		p.SendSystemMessage(self, msg)
	}
}

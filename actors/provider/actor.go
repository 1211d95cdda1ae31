package provider

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/commit"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/memdb"
)

// Config configures one provider instance actor.
type Config struct {
	Instance memdb.Instance // the instance's record, written when the actor starts
	Driver   driver.Driver
	Store    *memdb.Store
	Now      func() time.Time
	// OpTimeout bounds every driver call (Open, Attach, Detach), and Close
	// unless the driver's CloseBudget is longer (see driver.CloseTimeout). A call
	// made for a request is bounded by the request's deadline too.
	OpTimeout time.Duration
	// ActorTimeout bounds what the instance asks of thread actors for a
	// close no request asked for (its idle timer, a death), and serves as
	// the deadline of a request that carries none. Zero: a minute.
	ActorTimeout time.Duration
	// IdleRelease closes a session once none of its threads has had a turn
	// (a run started or ended, a touch) for this long and none has a run of
	// this instance in flight. Zero or negative: never.
	IdleRelease time.Duration
	// Work counts driver goroutines, so the runtime can wait for them on
	// shutdown.
	Work *sync.WaitGroup
	// Base is cancelled when the runtime closes; driver calls derive from it.
	Base   context.Context
	Logger *slog.Logger
}

// Props returns the props of a provider instance actor.
func Props(cfg Config) *actor.Props {
	if cfg.ActorTimeout <= 0 {
		cfg.ActorTimeout = time.Minute
	}
	return actor.PropsFromProducer(func() actor.Actor {
		a := &instanceActor{cfg: cfg, children: map[string]*child{}, attaches: map[uint64]*attachOp{}, writer: commit.Writer{Store: cfg.Store}}
		a.behavior.Become(a.running)
		return a
	})
}

// phase is where a provider session is in its life, as the instance sees
// it. The session's own actor has the same phases as behaviours.
type phase uint8

const (
	opening phase = iota // Open in flight; nothing recorded
	open                 // recorded in provider_sessions
	closing              // record removed; releasing, then the driver's Close
	failed               // Open failed; nothing was recorded, the actor is being stopped
)

// child is the instance actor's view of one provider session actor.
type child struct {
	id    string
	pid   *actor.PID
	phase phase
	// binding is the first binding, the one Open got.
	binding driver.Binding
	// record is the session's provider_sessions row, from phase open.
	record memdb.ProviderSession
	// owners maps each credential the session was given to the thread it
	// was given for: whose actor revokes it when the session is released.
	owners map[string]string
	// onOpen answers the OpenSession that started the session; nil once
	// answered.
	onOpen func(ctx actor.Context, f fault.Fault)
	// openFault is why an open that ended before it was answered failed
	// (it died while opening); zero when it was closed instead.
	openFault fault.Fault
	// threadSeq is, per thread, the seq of the last attach or detach sent
	// to the driver session: an attach that completes after a later detach
	// was sent must not mark the thread attached again.
	threadSeq map[string]uint64
	// turns is, per thread, the id of the last turn the session was given
	// for it (one turn at a time per thread): where an interrupt of that
	// turn goes, whether or not the thread is still attached.
	turns map[string]string
	// lastActive is when the session was opened or last had a thread
	// attached or detached; turns on its threads count too (see idleSince).
	lastActive time.Time

	// From phase closing: the record as it was at close, the driver's
	// error of a death, and the release's failure.
	closed       memdb.ProviderSession
	cause        string
	releaseFault fault.Fault
	released     bool // the release step is done (or there was none)
	stopped      bool // the actor has stopped (Terminated)
}

type instanceActor struct {
	cfg Config
	// writer commits the instance's record off Receive (a state file's
	// sync on one node), holding the actor's later messages until it
	// answered (internal/commit). Its provider sessions' rows are the
	// node's own and commit on the actor's turn.
	writer   commit.Writer
	behavior actor.Behavior // running, then stopping once CloseAll came
	children map[string]*child
	// seq numbers attach and detach dispatches (see child.threadSeq); an
	// attach in flight is found in attaches by its seq.
	seq      uint64
	attaches map[uint64]*attachOp
	// waits are requests answered once certain children have stopped
	// (CloseSession, CloseAll, ReleaseIdle).
	waits []*childWait
	// idleTimer, while armed, sends idleTick to the actor.
	idleTimer *time.Timer
}

// idleTick is the idle-release timer firing.
type idleTick struct{}

func (a *instanceActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

// running is the instance's behaviour until CloseAll.
func (a *instanceActor) running(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *AcquireSession:
		a.acquire(ctx, msg.Binding.Clone(), msg.Or(a.cfg.ActorTimeout), ctx.Sender())
	case *OpenSession:
		a.openFor(ctx, msg.SessionID, msg.Binding.Clone(), msg.Or(a.cfg.ActorTimeout), ctx.Sender())
	case *RebindThread:
		a.rebind(ctx, msg)
	case *DetachThread:
		ctx.Respond(&DetachThreadResult{Sessions: a.detach(ctx, msg.Thread)})
	case *StartTurn:
		a.startTurn(ctx, msg)
	case *InterruptTurn:
		a.interruptTurn(ctx, msg)
	case *CloseSession:
		a.closeSession(ctx, msg)
	case *CloseAll:
		a.closeAll(ctx, msg)
	case *ReleaseIdle:
		a.answerReleaseIdle(ctx, msg)
	case *GetSessions:
		ctx.Respond(&Sessions{Sessions: a.records()})
	case *idleTick:
		a.idleTimer = nil
		a.releaseIdle(ctx, time.Now().Add(a.cfg.ActorTimeout))
		a.armIdle(ctx)
	case *childOpened:
		a.opened(ctx, msg)
	case *childAttached:
		a.attached(ctx, msg.seq, msg.id, msg.fault)
	case *childDied:
		if c := a.children[msg.id]; c != nil && (c.phase == opening || c.phase == open) {
			if c.phase == opening {
				// Died before its open was answered: the open failed.
				c.openFault = fault.New(fault.ProviderOpenFailed, "open provider session of %s: %v: died while opening: %s", a.cfg.Instance.ID, driver.ErrOpenFailed, msg.cause)
			}
			a.close(ctx, c, ReasonDied, msg.cause, time.Now().Add(a.cfg.ActorTimeout))
		}
	case *actor.Terminated:
		a.terminated(ctx, msg.Who)
	case *actor.Stopping:
		if a.idleTimer != nil {
			a.idleTimer.Stop()
			a.idleTimer = nil
		}
	case *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("provider actor: unexpected message", "instance", a.cfg.Instance.ID, "type", fmt.Sprintf("%T", msg))
	}
}

// stopping is the instance's behaviour once CloseAll came: nothing opens
// any more; everything else is handled as before.
func (a *instanceActor) stopping(ctx actor.Context) {
	stop := fault.New(fault.InstanceStopping, "provider instance %s: %v", a.cfg.Instance.ID, fault.ErrInstanceStopping)
	switch ctx.Message().(type) {
	case *AcquireSession:
		ctx.Respond(&SessionAcquired{Fault: stop})
	case *OpenSession:
		ctx.Respond(&OpenSessionResult{Fault: stop})
	case *idleTick:
		a.idleTimer = nil
	default:
		a.running(ctx)
	}
}

func (a *instanceActor) start(ctx actor.Context) {
	inst := a.cfg.Instance
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		if old, err := w.Instance(inst.ID); err == nil && old.Driver == inst.Driver &&
			bytes.Equal(old.Config, inst.Config) && slices.Equal(old.Capabilities, inst.Capabilities) {
			return nil // a restart: the record is already there
		}
		return w.PutInstance(&inst)
	}, func(err error) {
		if err != nil {
			a.cfg.Logger.Error("write instance", "instance", inst.ID, "err", err)
		}
	})
}

// records returns the instance's open sessions as stored.
func (a *instanceActor) records() []memdb.ProviderSession {
	sessions, err := a.cfg.Store.Read().ProviderSessionsByInstance(a.cfg.Instance.ID)
	if err != nil {
		a.cfg.Logger.Error("list provider sessions", "instance", a.cfg.Instance.ID, "err", err)
	}
	out := make([]memdb.ProviderSession, len(sessions))
	for i, s := range sessions {
		out[i] = *s
	}
	return out
}

// sorted returns the children in phases ps, ordered by id (oldest first,
// for ids minted in order; stable in any case).
func (a *instanceActor) sorted(ps ...phase) []*child {
	var out []*child
	for _, c := range a.children {
		if slices.Contains(ps, c.phase) {
			out = append(out, c)
		}
	}
	slices.SortFunc(out, func(x, y *child) int {
		switch {
		case x.id < y.id:
			return -1
		case x.id > y.id:
			return 1
		}
		return 0
	})
	return out
}

// serving returns the open sessions thread is attached to.
func (a *instanceActor) serving(thread string) []*child {
	var out []*child
	for _, c := range a.sorted(open) {
		if slices.Contains(c.record.Threads, thread) {
			out = append(out, c)
		}
	}
	return out
}

// detach unbinds thread from every open session and returns their ids.
func (a *instanceActor) detach(ctx actor.Context, thread string) []string {
	var from []string
	for _, c := range a.serving(thread) {
		c.record.Threads = slices.DeleteFunc(c.record.Threads, func(t string) bool { return t == thread })
		a.dispatched(c, thread)
		c.lastActive = a.cfg.Now()
		a.put(c.record)
		ctx.Send(c.pid, &opDetach{thread: thread})
		ctx.ActorSystem().EventStream.Publish(&ThreadDetached{Instance: a.cfg.Instance.ID, SessionID: c.id, Thread: thread})
		from = append(from, c.id)
	}
	return from
}

// dispatched notes that an attach or detach of thread is being sent to c's
// driver session and returns its sequence number.
func (a *instanceActor) dispatched(c *child, thread string) uint64 {
	a.seq++
	if c.threadSeq == nil {
		c.threadSeq = map[string]uint64{}
	}
	c.threadSeq[thread] = a.seq
	return a.seq
}

func (a *instanceActor) put(r memdb.ProviderSession) {
	if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.PutProviderSession(&r) }); err != nil {
		a.cfg.Logger.Error("write provider session", "session", r.ID, "err", err)
	}
}

// timeoutFault is the fault of a request whose deadline passed before it
// was served.
func timeoutFault(what string) fault.Fault {
	return fault.New(fault.Timeout, "%s: deadline passed: %v", what, fault.ErrTimeout)
}

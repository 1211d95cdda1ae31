package session

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/memdb"
)

// Config configures one session actor.
type Config struct {
	ID              string
	Owner           Owner
	ProtocolVersion string
	ClientName      string
	ClientVersion   string
	Store           *memdb.Store
	Now             func() time.Time
	// IdleTimeout ends a session with nothing in flight and no stream for
	// this long. Zero: never.
	IdleTimeout time.Duration
	Activity    *Activity
	// WatchOwner calls dead once namespace has no live credential left (at
	// once if it has none); stop cancels. Nil: the owner is not watched.
	// The transport passes its liveness monitor's Namespace.
	WatchOwner func(namespace string, dead func()) (stop func())
	// OnEnd is called once, from the actor, as soon as the session ends (its
	// record is gone; the actor stops right after).
	OnEnd  func(id string, reason string)
	Logger *slog.Logger
}

// Props returns the props of a session actor.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &sessionActor{cfg: cfg, inflight: map[string]context.CancelFunc{}}
	})
}

type sessionActor struct {
	cfg         Config
	inflight    map[string]context.CancelFunc
	stream      context.CancelFunc
	initialized bool
	created     time.Time
	ending      string // reason, once the session is ending
	stopWatch   func()
	idleTimer   *time.Timer
}

// idleCheck is sent by the session's own idle timer. (protoactor's receive
// timeout is not used: its timer goroutine writes actor state unguarded,
// asynkron/protoactor-go#1139.)
type idleCheck struct{}

func (a *sessionActor) Receive(ctx actor.Context) {
	if a.ending != "" {
		a.refuse(ctx)
		return
	}
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *Begin:
		if _, dup := a.inflight[msg.RequestID]; dup {
			ctx.Respond(&Begun{Err: ErrDuplicateRequest})
			return
		}
		a.inflight[msg.RequestID] = msg.Cancel
		ctx.Respond(&Begun{})
	case *End:
		delete(a.inflight, msg.RequestID)
	case *Cancel:
		if cancel := a.inflight[msg.RequestID]; cancel != nil {
			cancel()
		}
	case *OpenStream:
		if a.stream != nil {
			ctx.Respond(&StreamOpened{Err: ErrStreamBusy})
			return
		}
		a.stream = msg.Close
		ctx.Respond(&StreamOpened{})
	case *StreamClosed:
		a.stream = nil
	case *CloseStream:
		if a.stream != nil {
			a.stream()
		}
	case *Initialized:
		a.initialized = true
	case *GetInfo:
		ctx.Respond(a.info())
	case *Delete:
		a.end(ctx, msg.Reason)
		ctx.Respond(&Deleted{})
	case *ownerDead:
		a.end(ctx, ReasonRevoked)
	case *idleCheck:
		a.idle(ctx)
	case *actor.Stopped:
		a.stopped()
	case *actor.Stopping, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("session actor: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

// refuse answers what reaches a session that is ending.
func (a *sessionActor) refuse(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Begin:
		msg.Cancel()
		ctx.Respond(&Begun{Err: ErrClosed})
	case *OpenStream:
		ctx.Respond(&StreamOpened{Err: ErrClosed})
	case *Delete:
		ctx.Respond(&Deleted{Err: ErrClosed})
	case *GetInfo:
		ctx.Respond(&Info{ID: a.cfg.ID, Err: ErrClosed})
	case *actor.Stopped:
		a.stopped()
	}
}

func (a *sessionActor) start(ctx actor.Context) {
	now := a.cfg.Now()
	a.created = now
	a.cfg.Activity.last.Store(now.UnixNano())
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		return w.PutMCPSession(&memdb.MCPSession{
			ID:              a.cfg.ID,
			Owner:           a.cfg.Owner.Namespace,
			Credential:      a.cfg.Owner.Credential,
			ProtocolVersion: a.cfg.ProtocolVersion,
			ClientName:      a.cfg.ClientName,
			ClientVersion:   a.cfg.ClientVersion,
			Created:         now,
			LastActive:      now,
		})
	})
	if err != nil {
		a.cfg.Logger.Error("write session record", "err", err)
	}
	if a.cfg.IdleTimeout > 0 {
		a.armIdle(ctx, a.cfg.IdleTimeout)
	}
	if a.cfg.WatchOwner != nil {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		a.stopWatch = a.cfg.WatchOwner(a.cfg.Owner.Namespace, func() { root.Send(self, &ownerDead{}) })
	}
}

func (a *sessionActor) info() *Info {
	return &Info{
		ID:              a.cfg.ID,
		Owner:           a.cfg.Owner,
		ProtocolVersion: a.cfg.ProtocolVersion,
		Initialized:     a.initialized,
		InFlight:        len(a.inflight),
		StreamOpen:      a.stream != nil,
		Created:         a.created,
		LastActive:      a.cfg.Activity.Last(),
	}
}

// armIdle schedules the next idle check. The timer only sends a message:
// the check itself runs on the actor's turn.
func (a *sessionActor) armIdle(ctx actor.Context, d time.Duration) {
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.idleTimer = time.AfterFunc(d, func() { root.Send(self, &idleCheck{}) })
}

// idle evicts the session if nothing happened for IdleTimeout and nothing
// is open; otherwise it checks again when the window would end.
func (a *sessionActor) idle(ctx actor.Context) {
	since := a.cfg.Now().Sub(a.cfg.Activity.Last())
	if len(a.inflight) > 0 || a.stream != nil || a.cfg.Activity.Busy() || since < a.cfg.IdleTimeout {
		a.armIdle(ctx, max(a.cfg.IdleTimeout-since, time.Millisecond))
		return
	}
	a.end(ctx, ReasonIdle)
}

// end cancels everything, removes the ownership record and stops the
// actor. Messages still queued are answered with ErrClosed first.
func (a *sessionActor) end(ctx actor.Context, reason string) {
	a.ending = reason
	for id, cancel := range a.inflight {
		cancel()
		delete(a.inflight, id)
	}
	if a.stream != nil {
		a.stream()
		a.stream = nil
	}
	if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteMCPSession(a.cfg.ID) }); err != nil {
		a.cfg.Logger.Error("delete session record", "err", err)
	}
	a.cfg.OnEnd(a.cfg.ID, reason)
	ctx.Poison(ctx.Self())
}

func (a *sessionActor) stopped() {
	if a.stopWatch != nil {
		a.stopWatch()
	}
	if a.idleTimer != nil {
		a.idleTimer.Stop()
	}
	if a.ending == "" {
		// Stopped from outside (shutdown): the record goes too.
		a.ending = ReasonShutdown
		for _, cancel := range a.inflight {
			cancel()
		}
		if a.stream != nil {
			a.stream()
		}
		_ = a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteMCPSession(a.cfg.ID) })
		a.cfg.OnEnd(a.cfg.ID, a.ending)
	}
}

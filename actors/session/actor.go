package session

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/memdb"
)

// Config is what every session of one endpoint shares. It is given once,
// to [NewProps]; what differs between sessions comes in [Start].
type Config struct {
	Store *memdb.Store
	Now   func() time.Time
	// IdleTimeout ends a session with nothing in flight and no stream for
	// this long, when an [IdleCheck] finds it so. Zero: never.
	IdleTimeout time.Duration
	// WatchOwner calls dead once namespace has no live credential left (at
	// once if it has none); stop cancels. Nil: the owner is not watched.
	// The endpoint passes its liveness monitor's WatchNamespace.
	WatchOwner func(namespace string, dead func()) (stop func())
	// OnEnd is called once, from the actor, as soon as the session ends (its
	// record is gone; the actor stops right after).
	OnEnd  func(id string, reason string)
	Logger *slog.Logger
}

// NewProps returns the props every session actor of an endpoint is
// spawned with. A session does nothing until its [Start] message, which
// the spawner sends right after spawning, before anyone else knows the
// actor: one Props for all sessions, and per session only the actor.
func NewProps(cfg *Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &sessionActor{cfg: cfg}
	})
}

type sessionActor struct {
	cfg         *Config
	p           Start // this session's parameters
	stream      context.CancelFunc
	initialized bool
	created     time.Time
	ending      string // reason, once the session is ending
	stopWatch   func()
}

func (a *sessionActor) Receive(ctx actor.Context) {
	if a.ending != "" {
		a.refuse(ctx)
		return
	}
	if _, ok := ctx.Message().(Message); ok && a.p.ID == "" {
		if msg, ok := ctx.Message().(*Start); ok {
			a.start(ctx, msg)
			return
		}
		a.refuse(ctx) // not started: nothing to do but refuse
		return
	}
	switch msg := ctx.Message().(type) {
	case *Start:
		a.cfg.Logger.Warn("session actor: started twice", "session", a.p.ID)
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
	case *IdleCheck:
		a.idle(ctx)
	case *actor.Stopped:
		a.stopped()
	case *actor.Started, *actor.Stopping, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("session actor: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

// refuse answers what reaches a session that is ending.
func (a *sessionActor) refuse(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *OpenStream:
		ctx.Respond(&StreamOpened{Err: ErrClosed})
	case *Delete:
		ctx.Respond(&Deleted{Err: ErrClosed})
	case *GetInfo:
		ctx.Respond(&Info{ID: a.p.ID, Err: ErrClosed})
	case *actor.Stopped:
		a.stopped()
	}
}

func (a *sessionActor) start(ctx actor.Context, p *Start) {
	a.p = *p
	now := a.cfg.Now()
	a.created = now
	a.p.Activity.last.Store(now.UnixNano())
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		return w.PutMCPSession(&memdb.MCPSession{
			ID:              p.ID,
			Owner:           p.Owner.Namespace,
			Credential:      p.Owner.Credential,
			ProtocolVersion: p.ProtocolVersion,
			ClientName:      p.ClientName,
			ClientVersion:   p.ClientVersion,
			Created:         now,
			LastActive:      now,
		})
	})
	if err != nil {
		a.cfg.Logger.Error("write session record", "err", err)
	}
	if a.cfg.WatchOwner != nil {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		a.stopWatch = a.cfg.WatchOwner(p.Owner.Namespace, func() { root.Send(self, &ownerDead{}) })
	}
}

func (a *sessionActor) info() *Info {
	return &Info{
		ID:              a.p.ID,
		Owner:           a.p.Owner,
		ProtocolVersion: a.p.ProtocolVersion,
		Initialized:     a.initialized,
		InFlight:        a.p.Activity.InFlight(),
		StreamOpen:      a.stream != nil,
		Created:         a.created,
		LastActive:      a.p.Activity.Last(),
	}
}

// idle ends the session if nothing happened for IdleTimeout and nothing
// is open. The transport sends IdleCheck to sessions it sees idle; the
// actor decides, since only it knows what is in flight.
func (a *sessionActor) idle(ctx actor.Context) {
	if a.cfg.IdleTimeout <= 0 || a.p.ID == "" {
		return
	}
	since := a.cfg.Now().Sub(a.p.Activity.Last())
	if a.stream != nil || a.p.Activity.Busy() || since < a.cfg.IdleTimeout { // a call in flight is a request: Busy
		return
	}
	a.end(ctx, ReasonIdle)
}

// end cancels everything, removes the ownership record and stops the
// actor. Messages still queued are answered with ErrClosed first.
func (a *sessionActor) end(ctx actor.Context, reason string) {
	a.ending = reason
	a.p.Activity.close()
	if a.stream != nil {
		a.stream()
		a.stream = nil
	}
	if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteMCPSession(a.p.ID) }); err != nil {
		a.cfg.Logger.Error("delete session record", "err", err)
	}
	a.cfg.OnEnd(a.p.ID, reason)
	ctx.Poison(ctx.Self())
}

func (a *sessionActor) stopped() {
	if a.stopWatch != nil {
		a.stopWatch()
	}
	if a.ending == "" && a.p.ID != "" {
		// Stopped from outside (shutdown): the record goes too.
		a.ending = ReasonShutdown
		a.p.Activity.close()
		if a.stream != nil {
			a.stream()
		}
		_ = a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteMCPSession(a.p.ID) })
		a.cfg.OnEnd(a.p.ID, a.ending)
	}
}

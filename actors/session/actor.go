package session

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/memdb"
)

// Config is what every session of one endpoint shares. It is given once,
// to [NewProps]; what differs between sessions is in their [Entry] and
// their [Start].
type Config struct {
	Store *memdb.Store
	// Table holds the sessions' entries; a session releases its slot there
	// as it ends.
	Table *Table
	Now   func() time.Time
	// IdleTimeout ends a session with nothing in flight and no stream for
	// this long, when an [IdleCheck] finds it so. Zero: never.
	IdleTimeout time.Duration
	// WatchOwner calls dead once namespace has no live credential left (at
	// once if it has none); stop cancels. Nil: the owner is not watched.
	// The endpoint passes its liveness monitor's WatchNamespace.
	WatchOwner func(namespace string, dead func()) (stop func())
	// OnEnd is called once, from the actor, as soon as the session ends (its
	// record is gone and its slot free; the actor stops right after), with
	// one of the Reason constants. Nil: nobody is told.
	OnEnd func(reason string)
	// OnEvent, when set, hears every session's start and end, from the
	// actor: it must not block. Nil: nobody is told.
	OnEvent func(Lifecycle)
	Logger  *slog.Logger
	// Dispatcher runs the session actors' mailboxes; nil: protoactor's
	// default (a goroutine per turn). The endpoint passes its [Workers].
	Dispatcher actor.Dispatcher
}

// Lifecycle is an MCP session's start (Opened) or end (Reason, one of the
// Reason constants), for the host's event stream: ids and names only.
type Lifecycle struct {
	ID              string
	Namespace       string // the owner's
	Credential      string // the credential that initialized it (Opened only)
	ProtocolVersion string // Opened only
	ClientName      string // as the client gave it (Opened only)
	Opened          bool
	Reason          string // the end's
}

// NewProps returns the props every session actor of an endpoint is
// spawned with. A session does nothing until its [Start] message, which
// the spawner sends right after spawning, before anyone else knows the
// actor: one Props for all sessions, and per session only the actor.
func NewProps(cfg *Config) *actor.Props {
	opts := []actor.PropsOption{actor.WithMailbox(newMailbox)}
	if cfg.Dispatcher != nil {
		opts = append(opts, actor.WithDispatcher(cfg.Dispatcher))
	}
	return actor.PropsFromProducer(func() actor.Actor {
		a := &mcpSessionActor{cfg: cfg}
		a.behavior = actor.NewBehavior()
		a.behavior.Become(a.starting)
		return a
	}, opts...)
}

// mcpSessionActor is one MCP session. Its phases are behaviours: starting
// (until Start), live, ended (answering what is still queued until it
// stops). What Start says beyond the id goes into the ownership record and
// is not kept: the id and the protocol version are the Entry's, and an
// idle session holds 64 bytes (one size class) instead of 128.
type mcpSessionActor struct {
	cfg       *Config
	behavior  actor.Behavior
	e         *Entry // found in the Table at Start
	stopWatch func()
}

func (a *mcpSessionActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

// starting waits for Start; anything else of the protocol is refused.
func (a *mcpSessionActor) starting(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Start:
		if a.e = a.cfg.Table.entry(msg.ID); a.e == nil {
			a.cfg.Logger.Error("session actor: no table entry", "session", msg.ID)
			a.behavior.Become(a.ended)
			ctx.Respond(&Started{Ended: true})
			ctx.Stop(ctx.Self())
			return
		}
		a.start(ctx, msg)
		a.behavior.Become(a.live)
		ctx.Respond(&Started{})
	case Message:
		a.refuse(ctx)
	}
}

func (a *mcpSessionActor) live(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *Start:
		a.cfg.Logger.Warn("session actor: started twice", "session", a.e.id)
		ctx.Respond(&Started{})
	case *CloseStream:
		a.e.closeStream()
	case *Delete:
		a.end(ctx, msg.Reason)
		ctx.Respond(&Deleted{})
	case *ownerDead:
		a.end(ctx, ReasonRevoked)
	case *IdleCheck:
		a.idle(ctx)
	case *actor.Stopped:
		// Stopped from outside (shutdown): the record goes too.
		a.finish(ReasonShutdown)
	case *actor.Started, *actor.Stopping, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("session actor: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

// ended answers what reaches a session that has ended, until it stops.
func (a *mcpSessionActor) ended(ctx actor.Context) {
	switch ctx.Message().(type) {
	case Message:
		a.refuse(ctx)
	case *actor.Stopped:
		if a.stopWatch != nil {
			a.stopWatch()
		}
	}
}

// refuse answers a request of the protocol that the session cannot serve
// (not started, or ended).
func (a *mcpSessionActor) refuse(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *Start:
		ctx.Respond(&Started{Ended: true})
	case *Delete:
		ctx.Respond(&Deleted{AlreadyEnded: true})
	}
}

func (a *mcpSessionActor) start(ctx actor.Context, p *Start) {
	owner := a.e.Owner()
	err := a.cfg.Store.PutMCPSession(&memdb.MCPSession{
		ID:              p.ID,
		Owner:           owner.Namespace,
		Credential:      owner.Credential,
		ProtocolVersion: p.ProtocolVersion,
		ClientName:      p.ClientName,
		ClientVersion:   p.ClientVersion,
		Created:         a.e.Created(),
		LastActive:      a.e.Created(),
	})
	if err != nil {
		a.cfg.Logger.Error("write session record", "err", err)
	}
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(Lifecycle{ID: p.ID, Namespace: owner.Namespace, Credential: owner.Credential,
			ProtocolVersion: p.ProtocolVersion, ClientName: p.ClientName, Opened: true})
	}
	if a.cfg.WatchOwner != nil {
		root, self := ctx.ActorSystem().Root, ctx.Self()
		a.stopWatch = a.cfg.WatchOwner(owner.Namespace, func() { root.Send(self, &ownerDead{}) })
	}
}

// idle ends the session if it has been idle for IdleTimeout (Calls.idle,
// the one judgement). The sweep sends IdleCheck to sessions it sees idle;
// the actor asks again, since a request may have begun since.
func (a *mcpSessionActor) idle(ctx actor.Context) {
	if a.cfg.IdleTimeout <= 0 || !a.e.idle(a.cfg.Now(), a.cfg.IdleTimeout) {
		return
	}
	a.end(ctx, ReasonIdle)
}

// end ends the session and stops the actor. Messages still queued are
// answered as by a session that ended.
func (a *mcpSessionActor) end(ctx actor.Context, reason string) {
	a.finish(reason)
	ctx.Poison(ctx.Self())
}

// finish cancels every call and the stream, removes the ownership record,
// frees the slot and tells OnEnd. It runs once: the actor is ended after.
func (a *mcpSessionActor) finish(reason string) {
	a.behavior.Become(a.ended)
	if a.stopWatch != nil {
		a.stopWatch()
		a.stopWatch = nil
	}
	a.e.close()
	a.e.closeShared()
	if err := a.cfg.Store.DeleteMCPSession(a.e.id); err != nil {
		a.cfg.Logger.Error("delete session record", "err", err)
	}
	a.cfg.Table.Release(a.e)
	if a.cfg.OnEnd != nil {
		a.cfg.OnEnd(reason)
	}
	if a.cfg.OnEvent != nil {
		a.cfg.OnEvent(Lifecycle{ID: a.e.id, Namespace: a.e.Owner().Namespace, Reason: reason})
	}
}

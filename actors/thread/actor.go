package thread

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/commit"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// MaxMessageBytes bounds the text of one posted message.
const MaxMessageBytes = 64 << 10

// Config configures one thread actor.
type Config struct {
	ID       string
	Home     string // the node the actor runs on, recorded in the thread (several nodes); "" on one node
	Instance string // initial current instance; "" for none
	Store    *memdb.Store
	Now      func() time.Time
	// Window is the credential liveness window: a credential not refreshed
	// by a turn start for this long expires. Zero or negative: never.
	Window      time.Duration
	Endpoint    string // MCP endpoint URL handed to provider sessions
	MessageLog  int    // messages kept per thread (oldest dropped first)
	RevokedKept int    // revoked credential rows kept per thread, for inspection
	// Timeout is the deadline of a request that carries none (the runtime
	// always sets one; tests may not). Zero: a minute.
	Timeout time.Duration
	Logger  *slog.Logger
}

// Props returns the props of a thread actor.
func Props(cfg Config) *actor.Props {
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Minute
	}
	return actor.PropsFromProducer(func() actor.Actor {
		a := &threadActor{cfg: cfg, flights: map[string]*flight{}, writer: commit.Writer{Store: cfg.Store}}
		a.behavior.Become(a.active)
		return a
	})
}

type threadActor struct {
	cfg      Config
	behavior actor.Behavior // active, then deleted
	// flights are the opens and rotates in flight, by instance (open.go).
	flights map[string]*flight
	// writer commits the thread's writes off Receive, holding its later
	// messages until each commit answered (internal/commit).
	writer commit.Writer
}

func (a *threadActor) Receive(ctx actor.Context) { a.behavior.Receive(ctx) }

// active is the thread's behaviour until it is deleted.
func (a *threadActor) active(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start(ctx)
	case *GetThread:
		t, err := a.load()
		res := &ThreadInfo{Fault: fault.From(err)}
		if err == nil {
			res.Thread = *t
		}
		ctx.Respond(res)
	case *OpenProviderSession:
		a.openSession(ctx, msg.Instance, msg.Or(a.cfg.Timeout))
	case *provider.ReleaseCredentials:
		a.release(ctx, msg)
	case *SwitchProvider:
		a.switchProvider(ctx, msg.Instance)
	case *Rotate:
		a.rotate(ctx, msg.Instance, msg.Or(a.cfg.Timeout))
	case *StartRun:
		a.startRun(ctx, msg.Instance)
	case *EndRun:
		a.endRun(ctx, msg.RunID)
	case *Touch:
		a.touch(ctx)
	case *Mutate:
		if deadline.Passed(msg.Or(a.cfg.Timeout)) {
			// The caller gave up: an effect applied now would be one it was
			// told timed out.
			ctx.Respond(msg.fail(fault.New(fault.Timeout, "mutate %s: deadline passed: %v", a.cfg.ID, fault.ErrTimeout)))
			return
		}
		a.mutate(ctx, msg)
	case *Detach:
		a.detach(ctx, msg.Or(a.cfg.Timeout))
	case *Archive:
		a.archive(ctx, msg.Or(a.cfg.Timeout))
	case *Delete:
		a.delete(ctx, msg.Or(a.cfg.Timeout))
	case *RevokeAll:
		a.revokeAll(ctx, msg.Reason)
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("thread actor: unexpected message", "thread", a.cfg.ID, "type", fmt.Sprintf("%T", msg))
	}
}

// gone is the thread's behaviour once Delete removed it, until the actor
// is gone: every request is answered "unknown thread".
func (a *threadActor) gone(ctx actor.Context) {
	gone := fault.New(fault.UnknownThread, "thread %s: %v", a.cfg.ID, fault.ErrUnknownThread)
	switch msg := ctx.Message().(type) {
	case Message:
		ctx.Respond(msg.fail(gone))
	case *provider.ReleaseCredentials:
		// Its credentials went with it: nothing left to release.
		ctx.Respond(&provider.CredentialsReleased{Fault: gone})
	}
}

func (a *threadActor) start(ctx actor.Context) {
	a.writer.Write(ctx, func(w *memdb.Writer) error {
		if _, err := w.Thread(a.cfg.ID); err == nil {
			return nil // a restart: the record survived
		}
		return w.PutThread(&memdb.Thread{
			ID:       a.cfg.ID,
			Home:     a.cfg.Home,
			Status:   memdb.ThreadActive,
			Instance: a.cfg.Instance,
			Created:  a.cfg.Now(),
		})
	}, func(err error) {
		if err != nil {
			a.cfg.Logger.Error("write thread", "thread", a.cfg.ID, "err", err)
		}
	})
}

func (a *threadActor) load() (*memdb.Thread, error) {
	return loadThread(a.cfg.Store.Read(), a.cfg.ID)
}

func loadThread(r *memdb.Reader, id string) (*memdb.Thread, error) {
	t, err := r.Thread(id)
	if errors.Is(err, memdb.ErrNotFound) {
		return nil, fmt.Errorf("thread %s: %w", id, fault.ErrUnknownThread)
	}
	return t, err
}

// loadActive reads the thread inside w and refuses archived threads.
func (a *threadActor) loadActive(w *memdb.Writer) (*memdb.Thread, error) {
	t, err := loadThread(&w.Reader, a.cfg.ID)
	if err != nil {
		return nil, err
	}
	if t.Status != memdb.ThreadActive {
		return nil, fmt.Errorf("thread %s: %w", a.cfg.ID, fault.ErrArchivedThread)
	}
	return t, nil
}

func (a *threadActor) instance(r *memdb.Reader, id string) (*memdb.Instance, error) {
	inst, err := r.Instance(id)
	if errors.Is(err, memdb.ErrNotFound) {
		return nil, fmt.Errorf("instance %q: %w", id, fault.ErrUnknownInstance)
	}
	return inst, err
}

// provider is the actor of provider instance id, by its name.
func (a *threadActor) provider(ctx actor.Context, id string) *actor.PID {
	return ctx.ActorSystem().NewLocalPID(names.Instance(id))
}

// mint mints a credential for (thread, inst) through the ledger. With a
// reason, the pair's previous live credentials are revoked in the same
// transaction; without one they are left for the caller to revoke once the
// new one is in use.
func (a *threadActor) mint(w *memdb.Writer, inst *memdb.Instance, reason string, now time.Time) (*memdb.Credential, string, []string, error) {
	var revoked []string
	if reason != "" {
		var err error
		if revoked, err = credential.RevokePair(w, a.cfg.ID, inst.ID, "", reason, now); err != nil {
			return nil, "", nil, err
		}
	}
	c, tok, err := credential.MintProvider(w, a.cfg.ID, inst.ID, inst.Capabilities, now, a.cfg.Window)
	if err != nil {
		return nil, "", nil, err
	}
	return c, tok, revoked, a.prune(w)
}

// prune drops the oldest revoked credential rows beyond RevokedKept.
func (a *threadActor) prune(w *memdb.Writer) error {
	creds, err := w.CredentialsByThread(a.cfg.ID)
	if err != nil {
		return err
	}
	return credential.Prune(w, creds, a.cfg.RevokedKept)
}

// write commits fn off Receive (the actor's later messages wait for it)
// and then calls then with its outcome on the actor's turn.
func (a *threadActor) write(ctx actor.Context, fn func(w *memdb.Writer) error, then func(err error)) {
	a.writer.Write(ctx, fn, then)
}

// logged is a continuation of a write whose failure is only logged.
func (a *threadActor) logged(err error) {
	if err != nil {
		a.cfg.Logger.Error("thread write", "thread", a.cfg.ID, "err", err)
	}
}

// sendTo sends res to reply, the sender of the message being answered,
// captured when it was current: a write's continuation may run while
// another message is current (ctx.Respond would answer that one's sender).
// A message sent without a sender gets no answer.
func sendTo(ctx actor.Context, reply *actor.PID, res any) {
	if reply != nil {
		ctx.Send(reply, res)
	}
}

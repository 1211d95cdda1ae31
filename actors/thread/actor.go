package thread

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

// MaxMessageBytes bounds the text of one posted message.
const MaxMessageBytes = 64 << 10

// Config configures one thread actor.
type Config struct {
	ID       string
	Instance string // initial current instance; "" for none
	Store    *memdb.Store
	Now      func() time.Time
	// Window is the credential liveness window: a credential not refreshed
	// by a turn start for this long expires. Zero or negative: never.
	Window      time.Duration
	Endpoint    string // MCP endpoint URL handed to provider sessions
	MessageLog  int    // messages kept per thread (oldest dropped first)
	RevokedKept int    // revoked credential rows kept per thread, for inspection
	// OpenTimeout bounds one provider-session open, driver included.
	OpenTimeout time.Duration
	// ActorTimeout bounds every other request to a provider actor.
	ActorTimeout time.Duration
	// Provider locates the actor of a provider instance.
	Provider func(instance string) *actor.PID
	Logger   *slog.Logger
}

// Props returns the props of a thread actor.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &threadActor{cfg: cfg, pending: map[string]*pendingOpen{}}
	})
}

// pendingOpen is a provider-session open in flight for one instance.
type pendingOpen struct {
	sessionID string       // the session opened or re-attached
	waiters   []*actor.PID // who asked; the first gets the token
	cred      *memdb.Credential
	token     string // set when this open minted cred
	// newSession: the open asked for a new session (abort closes it); else
	// it attached the thread to an existing one (abort detaches).
	newSession bool
	// rotating: not an open but a rotate re-binding the pair's session;
	// rotates that arrive meanwhile wait in rotates and run after it.
	rotating bool
	rotates  []*actor.PID
}

type threadActor struct {
	cfg     Config
	pending map[string]*pendingOpen // by instance
	stopped bool                    // deleted: answer nothing but ErrNotFound
}

func (a *threadActor) Receive(ctx actor.Context) {
	if a.stopped {
		if _, ok := ctx.Message().(Message); ok {
			ctx.Respond(notFoundReply(ctx.Message()))
		}
		return
	}
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start()
	case *GetThread:
		t, err := a.load()
		ctx.Respond(&ThreadInfo{Thread: t, Err: err})
	case *OpenProviderSession:
		a.openSession(ctx, msg)
	case *ReleaseCredentials:
		revoked, err := a.release(msg)
		ctx.Respond(&ReleaseCredentialsResult{Revoked: revoked, Err: err})
	case *SwitchProvider:
		prev, ended, err := a.switchProvider(msg.Instance)
		ctx.Respond(&SwitchProviderResult{Previous: prev, EndedRun: ended, Err: err})
	case *Rotate:
		a.rotate(ctx, msg)
	case *StartRun:
		id, err := a.startRun(msg.Instance)
		ctx.Respond(&StartRunResult{RunID: id, Err: err})
	case *EndRun:
		id, err := a.endRun(msg.RunID)
		ctx.Respond(&EndRunResult{RunID: id, Err: err})
	case *Touch:
		n, err := a.touch()
		ctx.Respond(&TouchResult{Refreshed: n, Err: err})
	case *Mutate:
		v, err := a.mutate(msg)
		ctx.Respond(&MutateResult{Value: v, Err: err})
	case *Detach:
		a.detach(ctx)
	case *Archive:
		a.archive(ctx)
	case *Delete:
		a.delete(ctx)
	case *RevokeAll:
		n, err := a.revokeAll(msg.Reason)
		ctx.Respond(&RevokeAllResult{Revoked: n, Err: err})
	case *actor.Stopping, *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("thread actor: unexpected message", "thread", a.cfg.ID, "type", fmt.Sprintf("%T", msg))
	}
}

// notFoundReply answers a message that reached a deleted thread's actor.
func notFoundReply(m any) any {
	err := fmt.Errorf("thread: %w", ErrNotFound)
	switch m.(type) {
	case *GetThread:
		return &ThreadInfo{Err: err}
	case *OpenProviderSession:
		return &OpenProviderSessionResult{Err: err}
	case *ReleaseCredentials:
		return &ReleaseCredentialsResult{Err: err}
	case *SwitchProvider:
		return &SwitchProviderResult{Err: err}
	case *Rotate:
		return &RotateResult{Err: err}
	case *StartRun:
		return &StartRunResult{Err: err}
	case *EndRun:
		return &EndRunResult{Err: err}
	case *Touch:
		return &TouchResult{Err: err}
	case *Mutate:
		return &MutateResult{Err: err}
	case *Detach:
		return &DetachResult{Err: err}
	case *Archive:
		return &ArchiveResult{Err: err}
	case *Delete:
		return &DeleteResult{Err: err}
	case *RevokeAll:
		return &RevokeAllResult{Err: err}
	}
	return nil
}

func (a *threadActor) start() {
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := w.Thread(nil, a.cfg.ID); err == nil {
			return nil // a restart: the record survived
		}
		return w.PutThread(&memdb.Thread{
			ID:       a.cfg.ID,
			Status:   memdb.ThreadActive,
			Instance: a.cfg.Instance,
			Created:  a.cfg.Now(),
		})
	})
	if err != nil {
		a.cfg.Logger.Error("write thread", "thread", a.cfg.ID, "err", err)
	}
}

func (a *threadActor) load() (*memdb.Thread, error) {
	return loadThread(a.cfg.Store.Read(), a.cfg.ID)
}

func loadThread(r *memdb.Reader, id string) (*memdb.Thread, error) {
	t, err := r.Thread(nil, id)
	if errors.Is(err, memdb.ErrNotFound) {
		return nil, fmt.Errorf("thread %s: %w", id, ErrNotFound)
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
		return nil, fmt.Errorf("thread %s: %w", a.cfg.ID, ErrArchived)
	}
	return t, nil
}

func (a *threadActor) instance(r *memdb.Reader, id string) (*memdb.Instance, error) {
	inst, err := r.Instance(nil, id)
	if errors.Is(err, memdb.ErrNotFound) {
		return nil, fmt.Errorf("instance %q: %w", id, ErrUnknownInstance)
	}
	return inst, err
}

// mintFor mints the credential an open will hand out, keeping the pair's
// old ones live until the open succeeded.
func (a *threadActor) mintFor(p *pendingOpen, inst *memdb.Instance, now time.Time) error {
	return a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := a.loadActive(w); err != nil {
			return err
		}
		c, tok, _, err := a.mint(w, inst, "", now)
		p.cred, p.token = c, tok
		return err
	})
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
	creds, err := w.CredentialsByThread(nil, a.cfg.ID)
	if err != nil {
		return err
	}
	return credential.Prune(w, creds, a.cfg.RevokedKept)
}

// gather waits for every future, without blocking the actor, and then calls
// done on the actor's turn.
func (a *threadActor) gather(ctx actor.Context, fs []*actor.Future, done func([]any, []error)) {
	results, errs := make([]any, len(fs)), make([]error, len(fs))
	if len(fs) == 0 {
		done(results, errs)
		return
	}
	left := len(fs)
	for i, f := range fs {
		ctx.ReenterAfter(f, func(res any, err error) {
			results[i], errs[i] = res, err
			if left--; left == 0 {
				done(results, errs)
			}
		})
	}
}

func (a *threadActor) write(fn func(w *memdb.Writer) error) {
	if err := a.cfg.Store.Write(fn); err != nil {
		a.cfg.Logger.Error("thread write", "thread", a.cfg.ID, "err", err)
	}
}

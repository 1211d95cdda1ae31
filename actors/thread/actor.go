package thread

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// MaxMessageBytes bounds the text of one posted message.
const MaxMessageBytes = 64 << 10

// ErrInvalidMessage is returned for an empty, non-UTF-8 or oversized message.
var ErrInvalidMessage = errors.New("invalid message text")

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

// revokePair revokes the live credentials of (thread, instance) other than
// keep, with reason, and returns their ids. Credentials of other instances
// are not touched.
func (a *threadActor) revokePair(w *memdb.Writer, instance, keep, reason string, now time.Time) ([]string, error) {
	olds, err := w.CredentialsByThreadInstance(nil, a.cfg.ID, instance)
	if err != nil {
		return nil, err
	}
	var revoked []string
	for _, old := range olds {
		if old.ID != keep && old.State == memdb.StateLive {
			if err := a.revoke(w, old, reason, now); err != nil {
				return nil, err
			}
			revoked = append(revoked, old.ID)
		}
	}
	return revoked, nil
}

// mint creates a credential for (thread, inst). With a reason, the pair's
// previous live credentials are revoked in the same transaction; without
// one they are left for the caller to revoke once the new one is in use.
func (a *threadActor) mint(w *memdb.Writer, inst *memdb.Instance, reason string, now time.Time) (*memdb.Credential, string, []string, error) {
	var revoked []string
	if reason != "" {
		var err error
		if revoked, err = a.revokePair(w, inst.ID, "", reason, now); err != nil {
			return nil, "", nil, err
		}
	}
	tok, hash := token.New()
	id := token.NewID("cred_")
	c := &memdb.Credential{
		ID:           id,
		TokenHash:    hash,
		Kind:         memdb.KindProvider,
		Namespace:    "cred:" + id,
		Thread:       a.cfg.ID,
		Instance:     inst.ID,
		Capabilities: slices.Clone(inst.Capabilities),
		Issued:       now,
		LastLive:     now,
		State:        memdb.StateLive,
	}
	if a.cfg.Window > 0 {
		c.Expires = now.Add(a.cfg.Window)
	}
	if err := w.PutCredential(c); err != nil {
		return nil, "", nil, err
	}
	return c, tok, revoked, a.prune(w)
}

// revoke marks c revoked. An already revoked credential keeps its reason.
func (a *threadActor) revoke(w *memdb.Writer, c *memdb.Credential, reason string, now time.Time) error {
	if c.State != memdb.StateLive {
		return nil
	}
	if !c.LiveAt(now) {
		reason = ReasonExpired
	}
	c.State, c.RevokeReason, c.Revoked = memdb.StateRevoked, reason, now
	return w.PutCredential(c)
}

// prune drops the oldest revoked credential rows beyond RevokedKept.
func (a *threadActor) prune(w *memdb.Writer) error {
	creds, err := w.CredentialsByThread(nil, a.cfg.ID)
	if err != nil {
		return err
	}
	return w.PruneRevoked(creds, a.cfg.RevokedKept)
}

// revokeAllTxn revokes every live credential of the thread.
func (a *threadActor) revokeAllTxn(w *memdb.Writer, reason string, now time.Time) (int, error) {
	creds, err := w.CredentialsByThread(nil, a.cfg.ID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range creds {
		if c.State == memdb.StateLive {
			if err := a.revoke(w, c, reason, now); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, nil
}

func (a *threadActor) binding(c *memdb.Credential, tok string) provider.Binding {
	b := provider.Binding{
		Thread:       a.cfg.ID,
		Instance:     c.Instance,
		CredentialID: c.ID,
		Endpoint:     a.cfg.Endpoint,
		Capabilities: slices.Clone(c.Capabilities),
	}
	if tok != "" {
		b.Authorization = "Bearer " + tok
	}
	return b
}

// openSession implements SPEC §3 "open provider session for (T, I)".
func (a *threadActor) openSession(ctx actor.Context, msg *OpenProviderSession) {
	if p := a.pending[msg.Instance]; p != nil {
		p.waiters = append(p.waiters, ctx.Sender())
		return
	}
	fail := func(err error) { ctx.Respond(&OpenProviderSessionResult{Err: err}) }
	now := a.cfg.Now()
	r := a.cfg.Store.Read()
	t, err := loadThread(r, a.cfg.ID)
	if err != nil {
		fail(err)
		return
	}
	if t.Status != memdb.ThreadActive {
		fail(fmt.Errorf("open provider session on %s: %w", a.cfg.ID, ErrArchived))
		return
	}
	inst, err := a.instance(r, msg.Instance)
	if err != nil {
		fail(err)
		return
	}
	creds, err := r.CredentialsByThreadInstance(nil, a.cfg.ID, inst.ID)
	if err != nil {
		fail(err)
		return
	}
	var live *memdb.Credential
	for _, c := range creds {
		if c.LiveAt(now) {
			live = c
		}
	}
	attached, err := r.ProviderSessionsByThread(nil, a.cfg.ID)
	if err != nil {
		fail(err)
		return
	}
	attached = slices.DeleteFunc(attached, func(h *memdb.ProviderSession) bool {
		return h.Instance != inst.ID || h.State != memdb.SessionOpen
	})
	var holder *memdb.ProviderSession
	if live == nil && len(attached) > 0 {
		// The pair's session is attached but its credential expired: re-bind
		// that session to a new credential rather than start a second one.
		p := &pendingOpen{waiters: []*actor.PID{ctx.Sender()}, sessionID: attached[0].ID}
		if err := a.mintFor(p, inst, now); err != nil {
			fail(err)
			return
		}
		a.request(ctx, inst.ID, p, &provider.AttachThread{SessionID: p.sessionID, Binding: a.binding(p.cred, p.token)})
		return
	}
	if live != nil {
		holders, err := r.ProviderSessionsByCredential(nil, live.ID)
		if err != nil {
			fail(err)
			return
		}
		for _, h := range holders {
			if h.Instance != inst.ID || h.State != memdb.SessionOpen {
				continue
			}
			if slices.Contains(h.Threads, a.cfg.ID) {
				// (T, I) already has a live provider session: return it.
				ctx.Respond(&OpenProviderSessionResult{
					SessionID:    h.ID,
					CredentialID: live.ID,
					Endpoint:     a.cfg.Endpoint,
					Capabilities: slices.Clone(live.Capabilities),
					Reused:       true,
				})
				return
			}
			if h.MultiThread || len(h.Threads) == 0 {
				holder = h
			}
		}
	}
	p := &pendingOpen{waiters: []*actor.PID{ctx.Sender()}}
	var req any
	if holder != nil {
		// The credential is live and a session that holds its token can take
		// the thread back: re-attach, mint nothing.
		p.sessionID, p.cred = holder.ID, live
		req = &provider.AttachThread{SessionID: holder.ID, Binding: a.binding(live, "")}
	} else {
		// No process holds a live token for the pair (the runtime keeps no
		// tokens), so a new session needs a new credential. The pair's old
		// one is revoked only once the open succeeded: an open that fails
		// revokes only what it minted.
		if err := a.mintFor(p, inst, now); err != nil {
			fail(err)
			return
		}
		p.sessionID, p.newSession = token.NewID("ps_"), true
		req = &provider.OpenSession{SessionID: p.sessionID, Binding: a.binding(p.cred, p.token)}
	}
	a.request(ctx, inst.ID, p, req)
}

// request records p as the open in flight for instance and sends req to
// the instance's provider actor; finishOpen continues on the actor's turn.
func (a *threadActor) request(ctx actor.Context, instance string, p *pendingOpen, req any) {
	a.pending[instance] = p
	f := ctx.RequestFuture(a.cfg.Provider(instance), req, a.cfg.OpenTimeout)
	ctx.ReenterAfter(f, func(res any, err error) { a.finishOpen(ctx, instance, res, err) })
}

func (a *threadActor) finishOpen(ctx actor.Context, inst string, res any, err error) {
	p := a.pending[inst]
	delete(a.pending, inst)
	if p == nil {
		return // the thread was deleted meanwhile; delete answered the waiters
	}
	prov := a.cfg.Provider(inst)
	sid := p.sessionID
	if err == nil {
		switch r := res.(type) {
		case *provider.OpenSessionResult:
			sid, err = r.SessionID, r.Err
		case *provider.AttachThreadResult:
			err = r.Err
		default:
			err = fmt.Errorf("provider %s: unexpected reply %T", inst, res)
		}
	} else {
		// We gave up waiting: make sure whatever the open produces ends.
		a.abortOpen(ctx, prov, p)
		err = fmt.Errorf("open provider session of %s: %w", inst, err)
	}
	if err == nil {
		if t, terr := a.load(); terr != nil || t.Status != memdb.ThreadActive {
			// Archived while the open ran: the session must not keep the thread.
			// A multi-thread driver may have attached the thread to a session
			// serving others (sid is then not the id we proposed): detach only.
			// The open answers once that is done, so nothing of it is left.
			fs := a.abortOpenWait(ctx, prov, &pendingOpen{sessionID: sid, newSession: p.newSession && sid == p.sessionID})
			err = fmt.Errorf("open provider session on %s: %w", a.cfg.ID, ErrArchived)
			a.gather(ctx, fs, func([]any, []error) { a.failOpen(ctx, p, err) })
			return
		}
	}
	if err != nil && !p.newSession && errors.Is(err, provider.ErrUnknownSession) {
		// The session we re-attached to ended meanwhile (a racing release or
		// death): open again from the store as it is now, as if this open
		// had come after the release.
		a.revokeMinted(p)
		for _, w := range p.waiters {
			ctx.RequestWithCustomSender(ctx.Self(), &OpenProviderSession{Instance: inst}, w)
		}
		return
	}
	if err != nil {
		a.failOpen(ctx, p, err)
		return
	}
	// The open succeeded: the new credential replaces the pair's old ones,
	// and a thread without a current instance gets this one.
	a.write(func(w *memdb.Writer) error {
		now := a.cfg.Now()
		if p.token != "" {
			if _, err := a.revokePair(w, inst, p.cred.ID, ReasonReplaced, now); err != nil {
				return err
			}
		}
		t, err := a.loadActive(w)
		if err != nil || t.Instance != "" {
			return err
		}
		t.Instance = inst
		return w.PutThread(t)
	})
	for i, w := range p.waiters {
		res := &OpenProviderSessionResult{
			SessionID:    sid,
			CredentialID: p.cred.ID,
			Endpoint:     a.cfg.Endpoint,
			Capabilities: slices.Clone(p.cred.Capabilities),
			Reused:       p.token == "" || i > 0,
		}
		if i == 0 && p.token != "" {
			res.Authorization = "Bearer " + p.token
		}
		ctx.Send(w, res)
	}
}

// revokeMinted revokes the credential an open minted, if it did.
func (a *threadActor) revokeMinted(p *pendingOpen) {
	if p.token == "" {
		return
	}
	a.write(func(w *memdb.Writer) error {
		c, err := w.Credential(nil, p.cred.ID)
		if err != nil {
			return nil // pruned or deleted already
		}
		return a.revoke(w, c, ReasonOpenFailed, a.cfg.Now())
	})
}

// failOpen answers an open that failed; only a credential it minted is
// revoked.
func (a *threadActor) failOpen(ctx actor.Context, p *pendingOpen, err error) {
	a.revokeMinted(p)
	for _, w := range p.waiters {
		ctx.Send(w, &OpenProviderSessionResult{Err: err})
	}
}

// abortOpen makes the provider undo an open: a new session is closed, a
// re-attach (or a multi-thread attach) is detached.
func (a *threadActor) abortOpen(ctx actor.Context, prov *actor.PID, p *pendingOpen) {
	for _, msg := range a.abortMessages(p) {
		ctx.Send(prov, msg)
	}
}

// abortOpenWait is abortOpen with futures that complete once the provider
// has closed the session (its driver included) and detached the thread.
func (a *threadActor) abortOpenWait(ctx actor.Context, prov *actor.PID, p *pendingOpen) []*actor.Future {
	var fs []*actor.Future
	for _, msg := range a.abortMessages(p) {
		fs = append(fs, ctx.RequestFuture(prov, msg, a.cfg.OpenTimeout+a.cfg.ActorTimeout))
	}
	return fs
}

func (a *threadActor) abortMessages(p *pendingOpen) []any {
	msgs := []any{&provider.DetachThread{Thread: a.cfg.ID}}
	if p.newSession {
		msgs = append([]any{&provider.CloseSession{SessionID: p.sessionID, Reason: provider.ReasonAborted}}, msgs...)
	}
	return msgs
}

// release implements SPEC §3 "release / close a provider session".
func (a *threadActor) release(msg *ReleaseCredentials) ([]string, error) {
	var revoked []string
	now := a.cfg.Now()
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		for _, id := range msg.Credentials {
			c, err := w.Credential(nil, id)
			if errors.Is(err, memdb.ErrNotFound) || (err == nil && (c.Thread != a.cfg.ID || c.State != memdb.StateLive)) {
				continue
			}
			if err != nil {
				return err
			}
			holders, err := w.ProviderSessionsByCredential(nil, id)
			if err != nil {
				return err
			}
			held := slices.ContainsFunc(holders, func(h *memdb.ProviderSession) bool {
				return h.ID != msg.SessionID && h.State == memdb.SessionOpen
			})
			if held {
				continue
			}
			if err := a.revoke(w, c, ReasonReleased, now); err != nil {
				return err
			}
			revoked = append(revoked, id)
		}
		return a.prune(w)
	})
	return revoked, err
}

func (a *threadActor) switchProvider(instance string) (prev, ended string, err error) {
	err = a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if _, err := a.instance(&w.Reader, instance); err != nil {
			return err
		}
		prev = t.Instance
		if t.Run != nil && t.Run.Instance != instance {
			ended, t.Run = t.Run.ID, nil
			t.LastTurn = a.cfg.Now()
		}
		t.Instance = instance
		return w.PutThread(t)
	})
	return prev, ended, err
}

func (a *threadActor) rotate(ctx actor.Context, msg *Rotate) {
	if p := a.pending[msg.Instance]; p != nil {
		if p.rotating {
			p.rotates = append(p.rotates, ctx.Sender())
			return
		}
		ctx.Respond(&RotateResult{Err: fmt.Errorf("rotate (%s, %s): %w", a.cfg.ID, msg.Instance, ErrBusy)})
		return
	}
	var (
		cred *memdb.Credential
		tok  string
		olds []string
	)
	now := a.cfg.Now()
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := a.loadActive(w); err != nil {
			return err
		}
		inst, err := a.instance(&w.Reader, msg.Instance)
		if err != nil {
			return err
		}
		cred, tok, olds, err = a.mint(w, inst, ReasonRotated, now)
		return err
	})
	if err != nil {
		ctx.Respond(&RotateResult{Err: err})
		return
	}
	// A session serving the thread with the old credential gets the new one.
	r := a.cfg.Store.Read()
	var reqs []*actor.Future
	for _, old := range olds {
		holders, _ := r.ProviderSessionsByCredential(nil, old)
		for _, h := range holders {
			if h.Instance == msg.Instance && slices.Contains(h.Threads, a.cfg.ID) {
				reqs = append(reqs, ctx.RequestFuture(a.cfg.Provider(msg.Instance),
					&provider.AttachThread{SessionID: h.ID, Binding: a.binding(cred, tok), Replaces: old}, a.cfg.OpenTimeout))
			}
		}
	}
	reply := ctx.Sender()
	if len(reqs) > 0 {
		// Until the session holds the new credential, an open of the pair
		// would find a live credential nobody holds and replace it: opens
		// wait, as they wait for an open in flight.
		a.pending[msg.Instance] = &pendingOpen{rotating: true}
	}
	a.gather(ctx, reqs, func(results []any, errs []error) {
		for i := range results {
			if e := replyErr(results[i], errs[i]); e != nil {
				a.cfg.Logger.Warn("rebind rotated credential", "thread", a.cfg.ID, "instance", msg.Instance, "err", e)
			}
		}
		ctx.Send(reply, &RotateResult{CredentialID: cred.ID, Authorization: "Bearer " + tok})
		if p := a.pending[msg.Instance]; p != nil && len(reqs) > 0 {
			delete(a.pending, msg.Instance)
			// Opens that waited are handled now, in arrival order, as if
			// they had come after the rotate.
			for _, w := range p.waiters {
				ctx.RequestWithCustomSender(ctx.Self(), &OpenProviderSession{Instance: msg.Instance}, w)
			}
			for _, w := range p.rotates {
				ctx.RequestWithCustomSender(ctx.Self(), &Rotate{Instance: msg.Instance}, w)
			}
		}
	})
}

func replyErr(res any, err error) error {
	if err != nil {
		return err
	}
	switch r := res.(type) {
	case *provider.AttachThreadResult:
		return r.Err
	case *provider.OpenSessionResult:
		return r.Err
	}
	return nil
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

func (a *threadActor) startRun(instance string) (string, error) {
	var id string
	now := a.cfg.Now()
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if t.Instance != instance {
			return fmt.Errorf("start run for %q on %s (current %q): %w", instance, a.cfg.ID, t.Instance, ErrNotCurrent)
		}
		if t.Run != nil {
			return fmt.Errorf("start run on %s: %w", a.cfg.ID, ErrRunActive)
		}
		id = token.NewID("run_")
		t.Run = &memdb.Run{ID: id, Instance: instance, Started: now}
		t.LastTurn = now
		if _, err := a.touchTxn(w, now); err != nil {
			return err
		}
		return w.PutThread(t)
	})
	return id, err
}

func (a *threadActor) endRun(runID string) (string, error) {
	var id string
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if t.Run == nil || (runID != "" && t.Run.ID != runID) {
			return fmt.Errorf("end run %q on %s: %w", runID, a.cfg.ID, ErrNoRun)
		}
		id, t.Run = t.Run.ID, nil
		t.LastTurn = a.cfg.Now()
		return w.PutThread(t)
	})
	return id, err
}

func (a *threadActor) touch() (int, error) {
	var n int
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		now := a.cfg.Now()
		if n, err = a.touchTxn(w, now); err != nil {
			return err
		}
		t.LastTurn = now
		return w.PutThread(t)
	})
	return n, err
}

// touchTxn refreshes the liveness of every credential of the thread that is
// still live. An expired credential stays expired.
func (a *threadActor) touchTxn(w *memdb.Writer, now time.Time) (int, error) {
	creds, err := w.CredentialsByThread(nil, a.cfg.ID)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, c := range creds {
		if !c.LiveAt(now) {
			continue
		}
		c.LastLive = now
		if a.cfg.Window > 0 {
			c.Expires = now.Add(a.cfg.Window)
		}
		if err := w.PutCredential(c); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// mutate implements SPEC §4's atomic "check live caller and apply".
func (a *threadActor) mutate(msg *Mutate) (any, error) {
	var val any
	now := a.cfg.Now()
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if err := checkLive(w, msg.Caller, now); err != nil {
			return err
		}
		val, err = msg.Effect.Apply(w, t, now, msg.Caller)
		if err != nil {
			return err
		}
		if over := len(t.Messages) - a.cfg.MessageLog; over > 0 {
			t.Messages = slices.Delete(t.Messages, 0, over)
		}
		return w.PutThread(t)
	})
	if err != nil {
		return nil, err
	}
	return val, nil
}

// checkLive decides from the store, inside the write transaction, whether
// c may mutate: what the caller claims is not trusted, its credential row is.
func checkLive(w *memdb.Writer, c Caller, now time.Time) error {
	cred, err := w.Credential(nil, c.CredentialID)
	if err != nil || !cred.LiveAt(now) {
		return fmt.Errorf("credential %s: %w", c.CredentialID, ErrNotLive)
	}
	switch cred.Kind {
	case memdb.KindClient:
		if cred.Access != memdb.AccessReadWrite {
			return fmt.Errorf("client %s: %w", cred.Client, ErrReadOnly)
		}
		return nil
	case memdb.KindProvider:
		own, err := w.Thread(nil, cred.Thread)
		if err != nil || own.Status != memdb.ThreadActive || own.Run == nil || own.Run.Instance != cred.Instance {
			return fmt.Errorf("caller (%s, %s): %w", cred.Thread, cred.Instance, ErrNotLive)
		}
		return nil
	}
	return fmt.Errorf("credential kind %q: %w", cred.Kind, ErrNotLive)
}

// Apply appends the message to t's log.
func (m *AppendMessage) Apply(_ *memdb.Writer, t *memdb.Thread, now time.Time, c Caller) (any, error) {
	if m.Text == "" || len(m.Text) > MaxMessageBytes || !utf8.ValidString(m.Text) {
		return nil, fmt.Errorf("message of %d bytes: %w", len(m.Text), ErrInvalidMessage)
	}
	msg := memdb.Message{Seq: t.NextSeq, Text: m.Text, Author: c.Namespace, Instance: c.Instance, At: now}
	t.NextSeq++
	t.Messages = append(t.Messages, msg)
	return msg, nil
}

// detachAll tells every provider instance serving the thread to detach it,
// and calls done once they all answered.
func (a *threadActor) detachAll(ctx actor.Context, done func(sessions []string)) {
	sessions, err := a.cfg.Store.Read().ProviderSessionsByThread(nil, a.cfg.ID)
	if err != nil {
		a.cfg.Logger.Error("list provider sessions", "thread", a.cfg.ID, "err", err)
	}
	var instances []string
	for _, s := range sessions {
		if !slices.Contains(instances, s.Instance) {
			instances = append(instances, s.Instance)
		}
	}
	fs := make([]*actor.Future, len(instances))
	for i, inst := range instances {
		fs[i] = ctx.RequestFuture(a.cfg.Provider(inst), &provider.DetachThread{Thread: a.cfg.ID}, a.cfg.ActorTimeout)
	}
	a.gather(ctx, fs, func(results []any, errs []error) {
		var from []string
		for i, res := range results {
			if r, ok := res.(*provider.DetachThreadResult); ok && errs[i] == nil {
				from = append(from, r.Sessions...)
			} else if errs[i] != nil {
				a.cfg.Logger.Warn("detach thread", "thread", a.cfg.ID, "instance", instances[i], "err", errs[i])
			}
		}
		slices.Sort(from)
		done(from)
	})
}

func (a *threadActor) detach(ctx actor.Context) {
	reply := ctx.Sender()
	if _, err := a.load(); err != nil {
		ctx.Respond(&DetachResult{Err: err})
		return
	}
	a.detachAll(ctx, func(sessions []string) { ctx.Send(reply, &DetachResult{Sessions: sessions}) })
}

func (a *threadActor) archive(ctx actor.Context) {
	var n int
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		t, err := loadThread(&w.Reader, a.cfg.ID)
		if err != nil {
			return err
		}
		if n, err = a.revokeAllTxn(w, ReasonArchived, a.cfg.Now()); err != nil {
			return err
		}
		t.Status, t.Run = memdb.ThreadArchived, nil
		if err := w.PutThread(t); err != nil {
			return err
		}
		return a.prune(w)
	})
	if err != nil {
		ctx.Respond(&ArchiveResult{Err: err})
		return
	}
	reply := ctx.Sender()
	a.detachAll(ctx, func([]string) { ctx.Send(reply, &ArchiveResult{Revoked: n}) })
}

func (a *threadActor) delete(ctx actor.Context) {
	var n int
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := loadThread(&w.Reader, a.cfg.ID); err != nil {
			return err
		}
		creds, err := w.CredentialsByThread(nil, a.cfg.ID)
		if err != nil {
			return err
		}
		for _, c := range creds {
			if c.State == memdb.StateLive {
				n++
			}
			if err := w.DeleteCredential(c.ID); err != nil {
				return err
			}
		}
		return w.DeleteThread(a.cfg.ID)
	})
	if err != nil {
		ctx.Respond(&DeleteResult{Err: err})
		return
	}
	// Opens still in flight end now: their sessions are aborted, their
	// askers told the thread is gone.
	for inst, p := range a.pending {
		a.abortOpen(ctx, a.cfg.Provider(inst), p)
		for _, w := range p.waiters {
			ctx.Send(w, &OpenProviderSessionResult{Err: fmt.Errorf("thread %s: %w", a.cfg.ID, ErrNotFound)})
		}
		for _, w := range p.rotates {
			ctx.Send(w, &RotateResult{Err: fmt.Errorf("thread %s: %w", a.cfg.ID, ErrNotFound)})
		}
		delete(a.pending, inst)
	}
	a.stopped = true
	reply := ctx.Sender()
	a.detachAll(ctx, func([]string) {
		ctx.Send(reply, &DeleteResult{Revoked: n})
		// Poison, not Stop: messages already queued are answered (with
		// ErrNotFound) before the actor goes.
		ctx.Poison(ctx.Self())
	})
}

func (a *threadActor) revokeAll(reason string) (int, error) {
	var n int
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		var err error
		n, err = a.revokeAllTxn(w, reason, a.cfg.Now())
		return err
	})
	return n, err
}

func (a *threadActor) write(fn func(w *memdb.Writer) error) {
	if err := a.cfg.Store.Write(fn); err != nil {
		a.cfg.Logger.Error("thread write", "thread", a.cfg.ID, "err", err)
	}
}

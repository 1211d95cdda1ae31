package thread

import (
	"errors"
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

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
			if _, err := credential.RevokePair(w, a.cfg.ID, inst, p.cred.ID, credential.ReasonReplaced, now); err != nil {
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
		_, err = credential.Revoke(w, c, credential.ReasonOpenFailed, a.cfg.Now())
		return err
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
		cred, tok, olds, err = a.mint(w, inst, credential.ReasonRotated, now)
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

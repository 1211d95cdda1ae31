package thread

import (
	"errors"
	"fmt"
	"slices"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

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
			if _, err := credential.Revoke(w, c, credential.ReasonReleased, now); err != nil {
				return err
			}
			revoked = append(revoked, id)
		}
		return a.prune(w)
	})
	return revoked, err
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
		if n, err = credential.RevokeThread(w, a.cfg.ID, credential.ReasonArchived, a.cfg.Now()); err != nil {
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
		if n, err = credential.Delete(w, creds, a.cfg.Now()); err != nil {
			return err
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
		n, err = credential.RevokeThread(w, a.cfg.ID, reason, a.cfg.Now())
		return err
	})
	return n, err
}

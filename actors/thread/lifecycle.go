package thread

import (
	"errors"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/gather"
	"github.com/agenthost/mcpruntime/memdb"
)

// release implements the thread's part of SPEC §3.2 "release a provider
// session": the instance actor closing the session decided which of its
// credentials no other open session holds; the thread revokes those that
// are its own and still live.
func (a *threadActor) release(ctx actor.Context, msg *provider.ReleaseCredentials) {
	reply := ctx.Sender()
	var revoked []string
	now := a.cfg.Now()
	a.write(ctx, func(w *memdb.Writer) error {
		revoked = nil
		for _, id := range msg.Credentials {
			c, err := w.Credential(id)
			if errors.Is(err, memdb.ErrNotFound) || (err == nil && c.Thread != a.cfg.ID) {
				continue
			}
			if err != nil {
				return err
			}
			ok, err := credential.Revoke(w, c, credential.ReasonReleased, now)
			if err != nil {
				return err
			}
			if ok {
				revoked = append(revoked, id)
			}
		}
		return a.prune(w)
	}, func(err error) {
		if err != nil {
			revoked = nil
		}
		sendTo(ctx, reply, &provider.CredentialsReleased{Revoked: revoked, Fault: fault.From(err)})
	})
}

// detachAll tells every provider instance to detach the thread from the
// sessions serving it, and calls done once they all answered or dl
// passed. Which sessions serve it is the instances' to know
// (provider_sessions is theirs), so every registered instance is asked.
func (a *threadActor) detachAll(ctx actor.Context, dl time.Time, done func(sessions []string)) {
	insts, err := a.cfg.Store.Read().Instances()
	if err != nil {
		a.cfg.Logger.Error("list provider instances", "thread", a.cfg.ID, "err", err)
	}
	fs := make([]*actor.Future, len(insts))
	for i, inst := range insts {
		fs[i] = ctx.RequestFuture(a.provider(ctx, inst.ID), &provider.DetachThread{Request: deadline.At(dl), Thread: a.cfg.ID}, deadline.Left(dl))
	}
	gather.All(ctx, fs, func(results []any, errs []error) {
		var from []string
		for i, res := range results {
			if r, ok := res.(*provider.DetachThreadResult); ok && errs[i] == nil {
				from = append(from, r.Sessions...)
			} else if errs[i] != nil && !errors.Is(errs[i], actor.ErrDeadLetter) {
				a.cfg.Logger.Warn("detach thread", "thread", a.cfg.ID, "instance", insts[i].ID, "err", errs[i])
			}
		}
		slices.Sort(from)
		done(from)
	})
}

func (a *threadActor) detach(ctx actor.Context, dl time.Time) {
	reply := ctx.Sender()
	if _, err := a.load(); err != nil {
		ctx.Respond(&DetachResult{Fault: fault.From(err)})
		return
	}
	a.detachAll(ctx, dl, func(sessions []string) { sendTo(ctx, reply, &DetachResult{Sessions: sessions}) })
}

func (a *threadActor) archive(ctx actor.Context, dl time.Time) {
	reply := ctx.Sender()
	var n int
	a.write(ctx, func(w *memdb.Writer) error {
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
	}, func(err error) {
		if err != nil {
			sendTo(ctx, reply, &ArchiveResult{Fault: fault.From(err)})
			return
		}
		a.detachAll(ctx, dl, func([]string) { sendTo(ctx, reply, &ArchiveResult{Revoked: n}) })
	})
}

func (a *threadActor) delete(ctx actor.Context, dl time.Time) {
	reply := ctx.Sender()
	var n int
	a.write(ctx, func(w *memdb.Writer) error {
		if _, err := loadThread(&w.Reader, a.cfg.ID); err != nil {
			return err
		}
		creds, err := w.CredentialsByThread(a.cfg.ID)
		if err != nil {
			return err
		}
		if n, err = credential.Delete(w, creds, a.cfg.Now()); err != nil {
			return err
		}
		return w.DeleteThread(a.cfg.ID)
	}, func(err error) {
		if err != nil {
			sendTo(ctx, reply, &DeleteResult{Fault: fault.From(err)})
			return
		}
		a.deleted(ctx, dl, reply, n)
	})
}

// deleted goes on with a delete once its write committed: from here on
// every request is answered "unknown thread". Opens and rotates still in
// flight end now: their sessions are aborted, their askers told the thread
// is gone.
func (a *threadActor) deleted(ctx actor.Context, dl time.Time, reply *actor.PID, n int) {
	a.behavior.Become(a.gone)
	gone := fault.New(fault.UnknownThread, "thread %s: %v", a.cfg.ID, fault.ErrUnknownThread)
	for inst, f := range a.flights {
		if f.kind == flightOpen {
			a.abort(ctx, f)
		}
		for _, w := range f.opens {
			ctx.Send(w.pid, &OpenProviderSessionResult{Fault: gone})
		}
		for _, w := range f.rotates {
			ctx.Send(w.pid, &RotateResult{Fault: gone})
		}
		delete(a.flights, inst)
	}
	a.detachAll(ctx, dl, func([]string) {
		sendTo(ctx, reply, &DeleteResult{Revoked: n})
		// Poison, not Stop: messages already queued are answered (with
		// fault.ErrUnknownThread) before the actor goes.
		ctx.Poison(ctx.Self())
	})
}

func (a *threadActor) revokeAll(ctx actor.Context, reason string) {
	reply := ctx.Sender()
	var n int
	a.write(ctx, func(w *memdb.Writer) error {
		var err error
		n, err = credential.RevokeThread(w, a.cfg.ID, reason, a.cfg.Now())
		return err
	}, func(err error) {
		if err != nil {
			n = 0
		}
		sendTo(ctx, reply, &RevokeAllResult{Revoked: n, Fault: fault.From(err)})
	})
}

package thread

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/gather"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// The thread's side of the open protocol (SPEC §3.2). The thread owns the
// pair's credentials; the instance actor owns provider_sessions and
// decides which session serves the thread. An open asks one question,
// AcquireSession ("a session for (T, I) holding this credential"); only if
// the answer is NeedsCredential does the thread mint one and send
// OpenSession. A rotation mints and sends RebindThread. The thread never
// reads provider_sessions and never retries the instance's races.

// flightKind is what a flight is.
type flightKind uint8

const (
	flightOpen   flightKind = iota // an open of the pair
	flightRotate                   // a rotation re-binding the pair's sessions
)

// waiter is an asker waiting for a flight: its PID stays in the actor's
// state, never in a message.
type waiter struct {
	pid      *actor.PID
	deadline time.Time
}

// flight is an open or a rotation of one pair in flight. Opens of the pair
// that arrive meanwhile wait in opens (an open's first waiter is its
// asker); rotations that arrive during a rotation wait in rotates, and run
// after it; a rotation during an open is fault.ErrBusy.
type flight struct {
	kind     flightKind
	instance string
	deadline time.Time
	opens    []waiter
	rotates  []waiter
	// An open's credential: the pair's live one it asked about, or the one
	// it minted (then token is set and the pair's older ones are revoked
	// once the open succeeded, or it is revoked if the open fails).
	cred  *memdb.Credential
	token string
	// sessionID is the session serving the thread; proposed is the id of a
	// new session the open asked for (an abort closes it).
	sessionID string
	proposed  string
}

func (a *threadActor) binding(c *memdb.Credential, tok string) driver.Binding {
	b := driver.Binding{
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

// openSession implements SPEC §3.2 "open provider session for (T, I)".
func (a *threadActor) openSession(ctx actor.Context, instance string, dl time.Time) {
	w := waiter{pid: ctx.Sender(), deadline: dl}
	if f := a.flights[instance]; f != nil {
		f.opens = append(f.opens, w)
		return
	}
	fail := func(err error) { ctx.Respond(&OpenProviderSessionResult{Fault: fault.From(err)}) }
	if deadline.Passed(dl) {
		fail(fmt.Errorf("open provider session of %s on %s: deadline passed: %w", instance, a.cfg.ID, fault.ErrTimeout))
		return
	}
	now := a.cfg.Now()
	r := a.cfg.Store.Read()
	t, err := loadThread(r, a.cfg.ID)
	if err != nil {
		fail(err)
		return
	}
	if t.Status != memdb.ThreadActive {
		fail(fmt.Errorf("open provider session on %s: %w", a.cfg.ID, fault.ErrArchivedThread))
		return
	}
	inst, err := a.instance(r, instance)
	if err != nil {
		fail(err)
		return
	}
	creds, err := r.CredentialsByThreadInstance(a.cfg.ID, inst.ID)
	if err != nil {
		fail(err)
		return
	}
	f := &flight{kind: flightOpen, instance: instance, deadline: dl, opens: []waiter{w}}
	b := driver.Binding{Thread: a.cfg.ID, Instance: inst.ID, Endpoint: a.cfg.Endpoint}
	for _, c := range creds {
		if c.LiveAt(now) {
			f.cred, b = c, a.binding(c, "")
		}
	}
	a.flights[instance] = f
	req := ctx.RequestFuture(a.provider(ctx, instance), &provider.AcquireSession{Request: deadline.At(dl), Binding: b}, deadline.Left(dl))
	ctx.ReenterAfter(req, func(res any, err error) { a.acquired(ctx, f, res, err) })
}

// acquired continues an open with the instance's answer to AcquireSession.
func (a *threadActor) acquired(ctx actor.Context, f *flight, res any, err error) {
	if a.flights[f.instance] != f {
		return // the thread was deleted meanwhile; delete answered the waiters
	}
	r, ok := answer[*provider.SessionAcquired](ctx, a, f, "acquire a provider session", res, err)
	if !ok {
		return
	}
	if r.Outcome == provider.Reused || r.Outcome == provider.Attached {
		f.sessionID = r.SessionID
		a.finishOpen(ctx, f)
		return
	}
	// No session holds a live credential of the pair: mint one. The pair's
	// old ones are revoked only once the open succeeded: an open that fails
	// revokes only what it minted.
	if deadline.Passed(f.deadline) {
		a.failOpen(ctx, f, fmt.Errorf("open provider session of %s on %s: deadline passed: %w", f.instance, a.cfg.ID, fault.ErrTimeout))
		return
	}
	a.write(ctx, func(w *memdb.Writer) error {
		if _, err := a.loadActive(w); err != nil {
			return err
		}
		inst, err := a.instance(&w.Reader, f.instance)
		if err != nil {
			return err
		}
		f.cred, f.token, _, err = a.mint(w, inst, "", a.cfg.Now())
		return err
	}, func(err error) { a.minted(ctx, f, err) })
}

// minted continues an open once the credential it minted committed.
func (a *threadActor) minted(ctx actor.Context, f *flight, err error) {
	if a.flights[f.instance] != f {
		// The thread was deleted meanwhile (its credentials with it); delete
		// answered the waiters.
		return
	}
	if err != nil {
		f.cred, f.token = nil, ""
		a.failOpen(ctx, f, err)
		return
	}
	f.proposed = token.NewID("ps_")
	req := ctx.RequestFuture(a.provider(ctx, f.instance), &provider.OpenSession{
		Request: deadline.At(f.deadline), SessionID: f.proposed, Binding: a.binding(f.cred, f.token),
	}, deadline.Left(f.deadline))
	ctx.ReenterAfter(req, func(res any, err error) { a.opened(ctx, f, res, err) })
}

// opened continues an open with the instance's answer to OpenSession.
func (a *threadActor) opened(ctx actor.Context, f *flight, res any, err error) {
	if a.flights[f.instance] != f {
		return
	}
	r, ok := answer[*provider.OpenSessionResult](ctx, a, f, "open a provider session", res, err)
	if !ok {
		return
	}
	f.sessionID = r.SessionID
	if !r.New {
		f.proposed = "" // an open session took the thread: an abort detaches only
	}
	a.finishOpen(ctx, f)
}

// answer is the instance's reply res to the request what of the open f,
// and whether it serves the open. If it does not, the open has failed and
// its waiters were answered: the instance refused, or gave no answer (the
// deadline passed, or the instance is gone) — then whatever it does for
// the open (a new session, an attach) is undone.
func answer[R interface{ Err() error }](ctx actor.Context, a *threadActor, f *flight, what string, res any, err error) (R, bool) {
	r, ok := res.(R)
	switch {
	case errors.Is(err, actor.ErrDeadLetter):
		a.failOpen(ctx, f, fmt.Errorf("%s of %s for %s: instance gone: %w", what, f.instance, a.cfg.ID, fault.ErrUnknownInstance))
	case err != nil:
		a.abort(ctx, f)
		a.failOpen(ctx, f, fmt.Errorf("%s of %s for %s: %v: %w", what, f.instance, a.cfg.ID, err, fault.ErrTimeout))
	case !ok:
		a.failOpen(ctx, f, fmt.Errorf("%s of %s: unexpected reply %T", what, f.instance, res))
	case r.Err() != nil:
		a.failOpen(ctx, f, r.Err())
	default:
		return r, true
	}
	return r, false
}

// finishOpen ends a served open: unless the thread was archived meanwhile,
// the credential it minted replaces the pair's old ones, a thread without
// a current instance gets this one, and the waiters get the session.
func (a *threadActor) finishOpen(ctx actor.Context, f *flight) {
	if t, err := a.load(); err != nil || t.Status != memdb.ThreadActive {
		// Archived while the open ran: the session must not keep the
		// thread. The open answers once that is undone, but never after its
		// deadline: nothing of it waits past the point its asker gave up.
		err := fmt.Errorf("open provider session on %s: %w", a.cfg.ID, fault.ErrArchivedThread)
		if deadline.Passed(f.deadline) {
			a.abort(ctx, f)
			a.failOpen(ctx, f, err)
			return
		}
		var fs []*actor.Future
		for _, msg := range a.abortMessages(f) {
			fs = append(fs, ctx.RequestFuture(a.provider(ctx, f.instance), msg, deadline.Left(f.deadline)))
		}
		gather.All(ctx, fs, func([]any, []error) {
			if a.flights[f.instance] == f {
				a.failOpen(ctx, f, err)
			}
		})
		return
	}
	delete(a.flights, f.instance)
	a.write(ctx, func(w *memdb.Writer) error {
		now := a.cfg.Now()
		if f.token != "" {
			if _, err := credential.RevokePair(w, a.cfg.ID, f.instance, f.cred.ID, credential.ReasonReplaced, now); err != nil {
				return err
			}
		}
		t, err := a.loadActive(w)
		if err != nil || t.Instance != "" {
			return err
		}
		t.Instance = f.instance
		return w.PutThread(t)
	}, func(err error) {
		a.logged(err)
		a.served(ctx, f)
	})
}

// served answers an open's waiters with its session, once its credential
// replaced the pair's old ones.
func (a *threadActor) served(ctx actor.Context, f *flight) {
	for i, w := range f.opens {
		res := &OpenProviderSessionResult{
			SessionID:    f.sessionID,
			CredentialID: f.cred.ID,
			Endpoint:     a.cfg.Endpoint,
			Capabilities: slices.Clone(f.cred.Capabilities),
			Reused:       f.token == "" || i > 0,
		}
		if i == 0 && f.token != "" {
			res.Authorization = "Bearer " + f.token
		}
		ctx.Send(w.pid, res)
	}
}

// failOpen answers an open that failed; only a credential it minted is
// revoked.
func (a *threadActor) failOpen(ctx actor.Context, f *flight, err error) {
	delete(a.flights, f.instance)
	res := &OpenProviderSessionResult{Fault: fault.From(err)}
	tell := func() {
		for _, w := range f.opens {
			ctx.Send(w.pid, res)
		}
	}
	if f.token == "" {
		tell()
		return
	}
	a.write(ctx, func(w *memdb.Writer) error {
		c, err := w.Credential(f.cred.ID)
		if err != nil {
			return nil // pruned or deleted already
		}
		_, err = credential.Revoke(w, c, credential.ReasonOpenFailed, a.cfg.Now())
		return err
	}, func(err error) {
		a.logged(err)
		tell()
	})
}

// abort makes the instance undo an open, without waiting: a new session it
// asked for is closed, the thread is detached from whatever took it.
func (a *threadActor) abort(ctx actor.Context, f *flight) {
	for _, msg := range a.abortMessages(f) {
		ctx.Send(a.provider(ctx, f.instance), msg)
	}
}

func (a *threadActor) abortMessages(f *flight) []any {
	msgs := []any{&provider.DetachThread{Request: deadline.At(f.deadline), Thread: a.cfg.ID}}
	if f.proposed != "" {
		msgs = append([]any{&provider.CloseSession{Request: deadline.At(f.deadline), SessionID: f.proposed, Reason: provider.ReasonAborted}}, msgs...)
	}
	return msgs
}

// rotate implements SPEC §3.2 "rotate (T, I)".
func (a *threadActor) rotate(ctx actor.Context, instance string, dl time.Time) {
	if f := a.flights[instance]; f != nil {
		if f.kind == flightRotate {
			f.rotates = append(f.rotates, waiter{pid: ctx.Sender(), deadline: dl})
			return
		}
		ctx.Respond(&RotateResult{Fault: fault.From(fmt.Errorf("rotate (%s, %s): %w", a.cfg.ID, instance, fault.ErrBusy))})
		return
	}
	if deadline.Passed(dl) {
		ctx.Respond(&RotateResult{Fault: fault.From(fmt.Errorf("rotate (%s, %s): deadline passed: %w", a.cfg.ID, instance, fault.ErrTimeout))})
		return
	}
	var (
		cred *memdb.Credential
		tok  string
		olds []string
	)
	// The pair is busy from here on: opens and rotates that come while the
	// mint commits wait for the rotation, as they wait while it rebinds.
	f := &flight{kind: flightRotate, instance: instance, deadline: dl}
	a.flights[instance] = f
	reply := ctx.Sender()
	now := a.cfg.Now()
	a.write(ctx, func(w *memdb.Writer) error {
		if _, err := a.loadActive(w); err != nil {
			return err
		}
		inst, err := a.instance(&w.Reader, instance)
		if err != nil {
			return err
		}
		// The pair's live credentials stay live until a session serving the
		// thread holds the new one (SPEC §3.2): an agent mid-turn keeps
		// working while its new token reaches it.
		rows, err := w.CredentialsByThreadInstance(a.cfg.ID, instance)
		if err != nil {
			return err
		}
		for _, c := range rows {
			if c.State == memdb.StateLive {
				olds = append(olds, c.ID)
			}
		}
		cred, tok, _, err = a.mint(w, inst, "", now)
		return err
	}, func(err error) {
		if err != nil {
			sendTo(ctx, reply, &RotateResult{Fault: fault.From(err)})
			a.rotated(ctx, f)
			return
		}
		a.rebind(ctx, f, reply, cred, tok, olds)
	})
}

// rebind goes on with a rotation once its credential committed: a session
// serving the thread gets the new credential. Until it holds it, an open
// of the pair would find a live credential nobody holds and replace it:
// opens wait, as they wait for an open in flight.
func (a *threadActor) rebind(ctx actor.Context, f *flight, reply *actor.PID, cred *memdb.Credential, tok string, olds []string) {
	instance, dl := f.instance, f.deadline
	if a.flights[instance] != f {
		// Deleted meanwhile: delete answered the waiters, this asker is told
		// too.
		sendTo(ctx, reply, &RotateResult{Fault: fault.New(fault.UnknownThread, "thread %s: %v", a.cfg.ID, fault.ErrUnknownThread)})
		return
	}
	req := ctx.RequestFuture(a.provider(ctx, instance), &provider.RebindThread{
		Request: deadline.At(dl), Binding: a.binding(cred, tok), Replaces: olds,
	}, deadline.Left(dl))
	ctx.ReenterAfter(req, func(res any, err error) {
		if r, ok := res.(*provider.ThreadRebound); ok && err == nil {
			err = r.Err()
		}
		if err != nil {
			a.cfg.Logger.Warn("rebind rotated credential", "thread", a.cfg.ID, "instance", instance, "err", err)
		}
		// The sessions hold the new credential (or could not take it: the
		// rotation stands regardless): the old ones are revoked now, before
		// the rotation answers.
		a.write(ctx, func(w *memdb.Writer) error {
			if _, err := credential.RevokePair(w, a.cfg.ID, instance, cred.ID, credential.ReasonRotated, a.cfg.Now()); err != nil {
				return err
			}
			return a.prune(w)
		}, func(err error) {
			if err != nil {
				sendTo(ctx, reply, &RotateResult{Fault: fault.From(fmt.Errorf("rotate (%s, %s): revoke the old credentials: %w", a.cfg.ID, instance, err))})
			} else {
				sendTo(ctx, reply, &RotateResult{CredentialID: cred.ID, Authorization: "Bearer " + tok})
			}
			a.rotated(ctx, f)
		})
	})
}

// rotated ends the rotation f: opens and rotates that waited for it are
// handled now, in arrival order, as if they had come after it.
func (a *threadActor) rotated(ctx actor.Context, f *flight) {
	if a.flights[f.instance] != f {
		return // deleted meanwhile: delete answered the waiters
	}
	delete(a.flights, f.instance)
	for _, w := range f.opens {
		ctx.RequestWithCustomSender(ctx.Self(), &OpenProviderSession{Request: deadline.At(w.deadline), Instance: f.instance}, w.pid)
	}
	for _, w := range f.rotates {
		ctx.RequestWithCustomSender(ctx.Self(), &Rotate{Request: deadline.At(w.deadline), Instance: f.instance}, w.pid)
	}
}

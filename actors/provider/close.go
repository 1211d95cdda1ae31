package provider

import (
	"errors"
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/gather"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// How a session ends. Every end — a release by the host, idle release, a
// death, an abandoned open, shutdown — takes the same path (close): the
// record is removed; for a release, an idle release and a death the
// credentials the session alone held are revoked by their threads' actors
// (release); then the driver's Close runs in the session's actor, which
// stops; once it has (finish), SessionClosed is published and whoever
// waits for the session is answered (childWait).

// childWait is a request answered once every child in pending has stopped.
type childWait struct {
	pending map[string]bool
	stopped []*child
	done    func(ctx actor.Context, stopped []*child)
}

// closeSession serves CloseSession.
func (a *instanceActor) closeSession(ctx actor.Context, msg *CloseSession) {
	c := a.children[msg.SessionID]
	if c == nil || c.phase == closing || c.phase == failed {
		ctx.Respond(&CloseSessionResult{Fault: fault.New(fault.UnknownProviderSession, "close %s: %v", msg.SessionID, fault.ErrUnknownProviderSession)})
		return
	}
	reply := ctx.Sender()
	a.close(ctx, c, msg.Reason, "", msg.Or(a.cfg.ActorTimeout))
	a.waitFor(ctx, []*child{c}, func(ctx actor.Context, _ []*child) {
		if reply != nil {
			ctx.Send(reply, &CloseSessionResult{Session: c.closed, Fault: c.releaseFault})
		}
	})
}

// closeAll serves CloseAll: nothing opens from now on, every session
// closes, and the answer comes once every child has stopped.
func (a *instanceActor) closeAll(ctx actor.Context, msg *CloseAll) {
	a.behavior.Become(a.stopping)
	if a.idleTimer != nil {
		a.idleTimer.Stop()
		a.idleTimer = nil
	}
	var closed []*child
	for _, c := range a.sorted(opening, open) {
		a.close(ctx, c, msg.Reason, "", msg.Or(a.cfg.ActorTimeout))
		closed = append(closed, c)
	}
	reply := ctx.Sender()
	a.waitFor(ctx, a.sorted(opening, open, closing, failed), func(ctx actor.Context, _ []*child) {
		res := &CloseAllResult{}
		for _, c := range closed {
			res.Sessions = append(res.Sessions, c.closed)
		}
		ctx.Send(reply, res)
	})
}

// answerReleaseIdle serves ReleaseIdle: answered once the sessions it
// released have stopped.
func (a *instanceActor) answerReleaseIdle(ctx actor.Context, msg *ReleaseIdle) {
	reply := ctx.Sender()
	released := a.releaseIdle(ctx, msg.Or(a.cfg.ActorTimeout))
	a.waitFor(ctx, released, func(ctx actor.Context, _ []*child) {
		res := &ReleaseIdleResult{}
		for _, c := range released {
			res.Sessions = append(res.Sessions, c.closed)
			if res.Fault.OK() {
				res.Fault = c.releaseFault
			}
		}
		ctx.Send(reply, res)
	})
}

// close ends c for reason (cause: the driver's error of a death): the one
// path of every end. dl bounds the release.
func (a *instanceActor) close(ctx actor.Context, c *child, reason, cause string, dl time.Time) {
	wasOpen := c.phase == open
	c.phase = closing
	rec := c.record.Clone()
	if !wasOpen {
		// Still opening: nothing was recorded yet, but the open's binding
		// is what it would hold.
		rec = &memdb.ProviderSession{
			ID:          c.id,
			Instance:    a.cfg.Instance.ID,
			Threads:     []string{c.binding.Thread},
			Credentials: []string{c.binding.CredentialID},
		}
	} else if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteProviderSession(c.id) }); err != nil {
		a.cfg.Logger.Error("delete provider session", "session", c.id, "err", err)
	}
	rec.State, rec.Closed, rec.CloseReason = memdb.SessionClosed, a.cfg.Now(), reason
	c.closed, c.cause = *rec, cause
	a.cfg.Logger.Info("provider session closing", "instance", a.cfg.Instance.ID, "session", c.id, "reason", reason, "cause", cause)
	if !wasOpen || (reason != ReasonReleased && reason != ReasonIdle && reason != ReasonDied) {
		// Nothing to release here: a session still opening recorded
		// nothing (its failed open revokes the credential it minted), an
		// aborted open is undone by the thread that abandoned it, and
		// shutdown revoked everything first.
		a.released(ctx, c, fault.Fault{})
		return
	}
	a.release(ctx, c, dl)
}

// release has the threads' actors revoke the credentials c alone held and
// continues once they all answered, or dl passed.
func (a *instanceActor) release(ctx actor.Context, c *child, dl time.Time) {
	byThread := a.releasable(c)
	threads := make([]string, 0, len(byThread))
	for t := range byThread {
		threads = append(threads, t)
	}
	slices.Sort(threads)
	fs := make([]*actor.Future, len(threads))
	for i, t := range threads {
		fs[i] = ctx.RequestFuture(ctx.ActorSystem().NewLocalPID(names.Thread(t)), &ReleaseCredentials{
			Request: deadline.At(dl), SessionID: c.id, Credentials: byThread[t],
		}, deadline.Left(dl))
	}
	gather.All(ctx, fs, func(results []any, errs []error) {
		var f fault.Fault
		for i := range fs {
			rf := releaseFault(threads[i], results[i], errs[i])
			if !rf.OK() {
				a.cfg.Logger.Warn("revoke the credentials of a closing provider session", "instance", a.cfg.Instance.ID, "session", c.id, "thread", threads[i], "err", rf.Err())
				if f.OK() {
					f = rf
				}
			}
		}
		a.released(ctx, c, f)
	})
}

// releaseFault is what an answer to ReleaseCredentials says went wrong. A
// thread that is gone (deleted) took its credentials with it: nothing to
// revoke.
func releaseFault(thread string, res any, err error) fault.Fault {
	switch {
	case errors.Is(err, actor.ErrDeadLetter):
		return fault.Fault{}
	case err != nil:
		return fault.New(fault.Timeout, "revoke the credentials of thread %s: %v: %v", thread, err, fault.ErrTimeout)
	}
	r, ok := res.(*CredentialsReleased)
	if !ok {
		return fault.New(fault.Internal, "revoke the credentials of thread %s: reply %T", thread, res)
	}
	if r.Fault.Code == fault.UnknownThread {
		return fault.Fault{}
	}
	return r.Fault
}

// releasable groups, by the thread they were given for, the credentials c
// held that no other open session of the instance holds.
func (a *instanceActor) releasable(c *child) map[string][]string {
	out := map[string][]string{}
	for _, id := range c.closed.Credentials {
		held := slices.ContainsFunc(a.sorted(open), func(o *child) bool { return slices.Contains(o.record.Credentials, id) })
		if held {
			continue
		}
		if t := c.owners[id]; t != "" {
			out[t] = append(out[t], id)
		}
	}
	return out
}

// released is the release step of c done, with its failure: the driver's
// Close comes next, or, for a session whose actor already stopped, the end.
func (a *instanceActor) released(ctx actor.Context, c *child, f fault.Fault) {
	c.released, c.releaseFault = true, f
	if c.stopped {
		a.finish(ctx, c)
		return
	}
	ctx.Send(c.pid, &opClose{})
}

// terminated is a session's actor having stopped: after its driver's
// Close, after a failed open, or on its own (a crash, which is a death).
func (a *instanceActor) terminated(ctx actor.Context, who *actor.PID) {
	var c *child
	for _, x := range a.children {
		if x.pid.Equal(who) {
			c = x
		}
	}
	if c == nil {
		return
	}
	c.stopped = true
	switch {
	case c.phase == opening || c.phase == open:
		// It stopped without being closed (it crashed): what it recorded is
		// released like a death's.
		a.close(ctx, c, ReasonDied, "provider session actor stopped", time.Now().Add(a.cfg.ActorTimeout))
	case c.released || c.phase == failed:
		a.finish(ctx, c)
	}
}

// finish is the end of c: its driver is closed and its actor stopped.
func (a *instanceActor) finish(ctx actor.Context, c *child) {
	if c.onOpen != nil {
		// Stopped before its open was answered (closed while opening):
		// Terminated can overtake the session's own report.
		answer := c.onOpen
		c.onOpen = nil
		answer(ctx, c.closedWhileOpening())
	}
	if c.phase == closing {
		a.cfg.Logger.Info("provider session closed", "instance", a.cfg.Instance.ID, "session", c.id,
			"reason", c.closed.CloseReason, "cause", c.cause)
		ctx.ActorSystem().EventStream.Publish(&SessionClosed{Session: *c.closed.Clone(), Reason: c.closed.CloseReason, Cause: c.cause})
	}
	delete(a.children, c.id)
	var done []*childWait
	waits := a.waits[:0]
	for _, w := range a.waits {
		if w.pending[c.id] {
			delete(w.pending, c.id)
			w.stopped = append(w.stopped, c)
		}
		if len(w.pending) == 0 {
			done = append(done, w)
			continue
		}
		waits = append(waits, w)
	}
	clear(a.waits[len(waits):])
	a.waits = waits
	for _, w := range done {
		w.done(ctx, w.stopped)
	}
}

// waitFor calls done, on the actor's turn, once every child of cs has
// stopped: the one mechanism behind CloseSession, CloseAll and ReleaseIdle.
func (a *instanceActor) waitFor(ctx actor.Context, cs []*child, done func(ctx actor.Context, stopped []*child)) {
	w := &childWait{pending: map[string]bool{}, done: done}
	for _, c := range cs {
		if a.children[c.id] == c {
			w.pending[c.id] = true
		}
	}
	if len(w.pending) == 0 {
		done(ctx, nil)
		return
	}
	a.waits = append(a.waits, w)
}

// releaseIdle closes every open session idle for at least IdleRelease and
// returns them.
func (a *instanceActor) releaseIdle(ctx actor.Context, dl time.Time) []*child {
	if a.cfg.IdleRelease <= 0 {
		return nil
	}
	rd := a.cfg.Store.Read()
	now := a.cfg.Now()
	var released []*child
	for _, c := range a.sorted(open) {
		since, busy := a.idleSince(rd, c)
		if busy || now.Sub(since) < a.cfg.IdleRelease {
			continue
		}
		a.close(ctx, c, ReasonIdle, "", dl)
		released = append(released, c)
	}
	return released
}

// idleSince returns when the session last had something to do: its own
// last open/attach/detach, or the last turn of a thread it serves. busy
// reports a run of this instance in flight on one of its threads: an
// in-flight turn defers idle release.
func (a *instanceActor) idleSince(rd *memdb.Reader, c *child) (since time.Time, busy bool) {
	since = c.lastActive
	for _, id := range c.record.Threads {
		t, err := rd.Thread(id)
		if err != nil {
			continue // deleted: no turns any more
		}
		if t.Run != nil && t.Run.Instance == a.cfg.Instance.ID {
			return since, true
		}
		if t.LastTurn.After(since) {
			since = t.LastTurn
		}
	}
	return since, false
}

// armIdle starts the idle-release timer if it is off and a session is open.
// It ticks at a quarter of IdleRelease (at most once a minute), so a
// session is released at most that late. Once CloseAll came nothing arms
// it: every session is closing.
func (a *instanceActor) armIdle(ctx actor.Context) {
	if a.cfg.IdleRelease <= 0 || a.idleTimer != nil || len(a.sorted(open)) == 0 {
		return
	}
	every := min(max(a.cfg.IdleRelease/4, 5*time.Millisecond), time.Minute)
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.idleTimer = time.AfterFunc(every, func() { root.Send(self, &idleTick{}) })
}

package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// Config configures one provider instance actor.
type Config struct {
	Instance *memdb.Instance // the instance's record, written when the actor starts
	Driver   Driver
	Store    *memdb.Store
	Now      func() time.Time
	// OpTimeout bounds every driver call (Open, Attach, Detach), and Close
	// unless the driver's CloseBudget is longer (see CloseTimeout).
	OpTimeout time.Duration
	// Release revokes the credentials a closing session recorded, except
	// those another open session holds, and returns once they no longer
	// authenticate. The instance calls it off its turn, for a session
	// released by the host, released as idle or dead, after removing the
	// session's record and before the driver's Close: a token is refused
	// from the moment its session starts closing, not once its agent is
	// gone (SPEC §3). Nil: nothing is revoked here (the caller does it).
	Release func(ctx context.Context, closed *memdb.ProviderSession) error
	// IdleRelease closes a session once none of its threads has had a turn
	// (a run started or ended, a touch) for this long and none has a run of
	// this instance in flight. Zero or negative: never.
	IdleRelease time.Duration
	// Work counts driver goroutines, so the runtime can wait for them on
	// shutdown.
	Work *sync.WaitGroup
	// Base is cancelled when the runtime closes; driver calls derive from it.
	Base   context.Context
	Logger *slog.Logger
}

// Props returns the props of a provider instance actor.
func Props(cfg Config) *actor.Props {
	return actor.PropsFromProducer(func() actor.Actor {
		return &instanceActor{cfg: cfg, children: map[string]*child{}}
	})
}

// child is the instance actor's view of one provider session actor.
type child struct {
	id        string
	pid       *actor.PID
	binding   Binding    // first binding, the one Open got
	openReply *actor.PID // requester of the OpenSession that created it
	record    *memdb.ProviderSession
	// threadSeq is, per thread, the seq of the last attach or detach sent
	// to the driver session: an attach that completes after a later detach
	// was sent must not mark the thread attached again.
	threadSeq map[string]uint64
	// lastActive is when the session was opened or last had a thread
	// attached or detached; turns on its threads count too (see idleSince).
	lastActive time.Time
	closed     bool // closed (or aborted); waiting for the actor to stop
	// openAnswered: openReply has had its answer (success or failure).
	openAnswered bool
	// openErr: why an open that ended before it was answered failed; nil
	// when it was closed (released, aborted) rather than dying.
	openErr error
	// closedRecord and closeReplies: CloseSession is answered once the
	// child has stopped, that is once the driver session is closed.
	closedRecord *memdb.ProviderSession
	closeReplies []*actor.PID
	// closeCause is the driver's error of a death; releaseErr is what
	// Config.Release returned, reported to whoever waits for the close.
	closeCause error
	releaseErr error
}

type instanceActor struct {
	cfg      Config
	children map[string]*child
	stopping bool
	// closeAllWaiters are answered once every child has stopped.
	closeAllWaiters []*actor.PID
	closedByAll     []*memdb.ProviderSession
	// seq numbers attach and detach dispatches (see child.threadSeq).
	seq uint64
	// idleTimer, while armed, sends idleTick to the actor.
	idleTimer *time.Timer
	// idleWaits are ReleaseIdle requests waiting for their sessions' driver
	// Close to return.
	idleWaits []*idleWait
}

// idleWait is a ReleaseIdle answered once every session it closed stopped.
type idleWait struct {
	reply    *actor.PID
	pending  map[string]bool // session ids not stopped yet
	sessions []*memdb.ProviderSession
	errs     []error // of Config.Release, for the sessions that stopped
}

// idleTick is the idle-release timer firing.
type idleTick struct{}

// released is Config.Release returning for a closing session: its driver
// session may be closed now.
type released struct {
	id  string
	err error
}

func (a *instanceActor) Receive(ctx actor.Context) {
	switch msg := ctx.Message().(type) {
	case *actor.Started:
		a.start()
	case *OpenSession:
		a.open(ctx, msg)
	case *AttachThread:
		a.attach(ctx, msg)
	case *DetachThread:
		a.detach(ctx, msg)
	case *CloseSession:
		c := a.children[msg.SessionID]
		if c == nil || c.closed {
			ctx.Respond(&CloseSessionResult{Err: fmt.Errorf("close %s: %w", msg.SessionID, ErrUnknownSession)})
			return
		}
		a.close(ctx, c, msg.Reason, nil)
		if ctx.Sender() != nil {
			c.closeReplies = append(c.closeReplies, ctx.Sender())
		}
	case *CloseAll:
		a.stopping = true
		for _, id := range a.sortedChildren() {
			if c := a.children[id]; !c.closed {
				a.closedByAll = append(a.closedByAll, a.close(ctx, c, msg.Reason, nil))
			}
		}
		a.closeAllWaiters = append(a.closeAllWaiters, ctx.Sender())
		a.answerCloseAll(ctx)
	case *ReleaseIdle:
		released := a.releaseIdle(ctx)
		w := &idleWait{reply: ctx.Sender(), pending: map[string]bool{}, sessions: released}
		for _, r := range released {
			w.pending[r.ID] = true
		}
		a.idleWaits = append(a.idleWaits, w)
		a.answerIdleWaits(ctx, "", nil)
	case *idleTick:
		a.idleTimer = nil
		a.releaseIdle(ctx)
		a.armIdle(ctx)
	case *GetSessions:
		sessions, err := a.cfg.Store.Read().ProviderSessionsByInstance(nil, a.cfg.Instance.ID)
		if err != nil {
			a.cfg.Logger.Error("list provider sessions", "instance", a.cfg.Instance.ID, "err", err)
		}
		ctx.Respond(&Sessions{Sessions: sessions})
	case *childOpened:
		a.opened(ctx, msg)
	case *childAttached:
		a.attached(ctx, msg)
	case *released:
		if msg.err != nil {
			// Reported to whoever waits for the close; an idle timer's
			// release has nobody waiting, so it is logged too.
			a.cfg.Logger.Warn("revoke the credentials of a closing provider session", "instance", a.cfg.Instance.ID, "session", msg.id, "err", msg.err)
		}
		if c := a.children[msg.id]; c != nil {
			c.releaseErr = msg.err
			ctx.Send(c.pid, &opClose{})
		}
	case *childDied:
		if c := a.children[msg.id]; c != nil && !c.closed {
			if c.record == nil {
				// Died before its open was answered: the open failed.
				c.openErr = fmt.Errorf("open provider session of %s: %w: died while opening: %w", a.cfg.Instance.ID, ErrOpenFailed, msg.err)
			}
			a.close(ctx, c, ReasonDied, msg.err)
		}
	case *actor.Terminated:
		for id, c := range a.children {
			if !c.pid.Equal(msg.Who) {
				continue
			}
			if !c.closed {
				// The child stopped without being closed (it crashed): whatever
				// it recorded is released.
				a.close(ctx, c, ReasonDied, errors.New("provider session actor stopped"))
			}
			if !c.openAnswered {
				// Stopped before its open was answered (closed while opening):
				// Terminated can overtake the child's own report.
				c.openAnswered = true
				ctx.Send(c.openReply, &OpenSessionResult{Err: c.closedWhileOpening()})
			}
			if c.closedRecord.CloseReason != "" { // closed, not a failed open
				a.cfg.Logger.Info("provider session closed", "instance", a.cfg.Instance.ID, "session", c.id,
					"reason", c.closedRecord.CloseReason, "err", c.closeCause)
			}
			for _, w := range c.closeReplies {
				ctx.Send(w, &CloseSessionResult{Session: c.closedRecord.Clone(), Err: c.releaseErr})
			}
			delete(a.children, id)
			a.answerIdleWaits(ctx, id, c.releaseErr)
		}
		a.answerCloseAll(ctx)
	case *actor.Stopping:
		if a.idleTimer != nil {
			a.idleTimer.Stop()
			a.idleTimer = nil
		}
	case *actor.Stopped, *actor.Restarting:
	default:
		a.cfg.Logger.Warn("provider actor: unexpected message", "type", fmt.Sprintf("%T", msg))
	}
}

func (a *instanceActor) start() {
	inst := a.cfg.Instance
	err := a.cfg.Store.Write(func(w *memdb.Writer) error {
		if _, err := w.Instance(nil, inst.ID); err == nil {
			return nil // a restart: the record is already there
		}
		return w.PutInstance(inst)
	})
	if err != nil {
		a.cfg.Logger.Error("write instance", "instance", inst.ID, "err", err)
	}
}

func (a *instanceActor) sortedChildren() []string {
	ids := make([]string, 0, len(a.children))
	for id := range a.children {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (a *instanceActor) open(ctx actor.Context, msg *OpenSession) {
	a.openFor(ctx, msg, ctx.Sender())
}

// openFor handles an OpenSession whose answer goes to reply.
func (a *instanceActor) openFor(ctx actor.Context, msg *OpenSession, reply *actor.PID) {
	if a.stopping {
		ctx.Send(reply, &OpenSessionResult{Err: ErrStopping})
		return
	}
	b := msg.Binding.Clone()
	if a.cfg.Driver.MultiThread() {
		// One session serves every thread: attach to the oldest live one.
		for _, id := range a.sortedChildren() {
			if c := a.children[id]; !c.closed {
				ctx.Send(c.pid, &opAttach{binding: b, replyTo: reply, fromOpen: true, openID: msg.SessionID, seq: a.dispatched(c, b.Thread)})
				return
			}
		}
	}
	id := msg.SessionID
	if id == "" {
		id = token.NewID("ps_")
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		return &sessionActor{id: id, instance: a.cfg.Instance.ID, first: b, cfg: a.cfg}
	})
	pid, err := ctx.SpawnNamed(props, id)
	if err != nil {
		ctx.Send(reply, &OpenSessionResult{Err: fmt.Errorf("spawn provider session: %w", err)})
		return
	}
	a.children[id] = &child{id: id, pid: pid, binding: b, openReply: reply}
}

// closedWhileOpening is the answer of an open whose session ended before
// the open was answered.
func (c *child) closedWhileOpening() error {
	if c.openErr != nil {
		return c.openErr
	}
	return fmt.Errorf("open %s: closed while opening: %w", c.id, ErrUnknownSession)
}

func (a *instanceActor) opened(ctx actor.Context, msg *childOpened) {
	c := a.children[msg.id]
	if c == nil || c.openAnswered {
		return
	}
	c.openAnswered = true
	switch {
	case msg.err != nil:
		// Nothing was opened or recorded: stop the child quietly. (The child
		// does not stop itself: its Terminated could overtake this message.)
		c.closed = true
		if c.closedRecord == nil { // not closed while it was opening
			c.closedRecord = &memdb.ProviderSession{ID: c.id, Instance: a.cfg.Instance.ID, State: memdb.SessionClosed}
		}
		ctx.Stop(c.pid)
		ctx.Send(c.openReply, &OpenSessionResult{Err: msg.err})
	case c.closed:
		ctx.Send(c.openReply, &OpenSessionResult{Err: c.closedWhileOpening()})
	default:
		now := a.cfg.Now()
		c.record = &memdb.ProviderSession{
			ID:          c.id,
			Instance:    a.cfg.Instance.ID,
			MultiThread: a.cfg.Driver.MultiThread(),
			Threads:     []string{c.binding.Thread},
			Credentials: []string{c.binding.CredentialID},
			State:       memdb.SessionOpen,
			Opened:      now,
		}
		c.lastActive = now
		a.put(c.record)
		ctx.Send(c.openReply, &OpenSessionResult{SessionID: c.id})
		ctx.ActorSystem().EventStream.Publish(&SessionOpened{Session: c.record.Clone()})
		a.armIdle(ctx)
	}
}

func (a *instanceActor) attach(ctx actor.Context, msg *AttachThread) {
	c := a.children[msg.SessionID]
	if c == nil || c.closed || c.record == nil {
		ctx.Respond(&AttachThreadResult{Err: fmt.Errorf("attach to %s: %w", msg.SessionID, ErrUnknownSession)})
		return
	}
	if !c.record.MultiThread {
		for _, t := range c.record.Threads {
			if t != msg.Binding.Thread {
				ctx.Respond(&AttachThreadResult{Err: fmt.Errorf("attach %s to %s: %w", msg.Binding.Thread, c.id, ErrExclusive)})
				return
			}
		}
	}
	if msg.Replaces != "" && !slices.Contains(c.record.Threads, msg.Binding.Thread) {
		// A rotation's re-bind that a detach overtook: the session no
		// longer serves the thread, so it does not get the new credential.
		ctx.Respond(&AttachThreadResult{})
		return
	}
	ctx.Send(c.pid, &opAttach{binding: msg.Binding.Clone(), replaces: msg.Replaces, replyTo: ctx.Sender(), seq: a.dispatched(c, msg.Binding.Thread)})
}

func (a *instanceActor) attached(ctx actor.Context, msg *childAttached) {
	c := a.children[msg.id]
	err := msg.err
	if err == nil && (c == nil || c.closed || c.record == nil) {
		if msg.fromOpen {
			// The session an open joined was closed meanwhile (released,
			// died): open again, as if the open had come after the close.
			a.openFor(ctx, &OpenSession{SessionID: msg.openID, Binding: msg.binding}, msg.replyTo)
			return
		}
		err = fmt.Errorf("attach to %s: %w", msg.id, ErrUnknownSession)
	}
	if err == nil {
		r := c.record
		// A detach of the thread dispatched after this attach was queued
		// behind it on the driver, so the thread ends detached: only the
		// credential the attach handed over is recorded.
		if c.threadSeq[msg.binding.Thread] == msg.seq && !slices.Contains(r.Threads, msg.binding.Thread) {
			r.Threads = append(r.Threads, msg.binding.Thread)
		}
		if msg.replaces != "" {
			r.Credentials = slices.DeleteFunc(r.Credentials, func(id string) bool { return id == msg.replaces })
		}
		if !slices.Contains(r.Credentials, msg.binding.CredentialID) {
			r.Credentials = append(r.Credentials, msg.binding.CredentialID)
		}
		c.lastActive = a.cfg.Now()
		a.put(r)
		ctx.ActorSystem().EventStream.Publish(&ThreadAttached{
			Instance: a.cfg.Instance.ID, SessionID: c.id,
			Thread: msg.binding.Thread, CredentialID: msg.binding.CredentialID,
		})
	}
	if msg.fromOpen {
		res := &OpenSessionResult{Err: err}
		if err == nil {
			res.SessionID = msg.id
		}
		ctx.Send(msg.replyTo, res)
		return
	}
	ctx.Send(msg.replyTo, &AttachThreadResult{Err: err})
}

func (a *instanceActor) detach(ctx actor.Context, msg *DetachThread) {
	var from []string
	for _, id := range a.sortedChildren() {
		c := a.children[id]
		if c.closed || c.record == nil || !slices.Contains(c.record.Threads, msg.Thread) {
			continue
		}
		c.record.Threads = slices.DeleteFunc(c.record.Threads, func(t string) bool { return t == msg.Thread })
		a.dispatched(c, msg.Thread)
		c.lastActive = a.cfg.Now()
		a.put(c.record)
		ctx.Send(c.pid, &opDetach{thread: msg.Thread})
		ctx.ActorSystem().EventStream.Publish(&ThreadDetached{Instance: a.cfg.Instance.ID, SessionID: c.id, Thread: msg.Thread})
		from = append(from, id)
	}
	ctx.Respond(&DetachThreadResult{Sessions: from})
}

// close removes the session's record, tells the world, revokes what the
// session held (Config.Release, for a release, idle release or death), and
// then has the child close the driver session and stop. It returns the
// record as it was. Callers waiting for the driver to be closed wait for
// the child's Terminated, where "provider session closed" is logged.
func (a *instanceActor) close(ctx actor.Context, c *child, reason string, cause error) *memdb.ProviderSession {
	c.closed = true
	rec := c.record
	if rec == nil {
		// Still opening: nothing was recorded yet, but the open's binding
		// is what it will hold.
		rec = &memdb.ProviderSession{
			ID:          c.id,
			Instance:    a.cfg.Instance.ID,
			Threads:     []string{c.binding.Thread},
			Credentials: []string{c.binding.CredentialID},
		}
	} else if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.DeleteProviderSession(c.id) }); err != nil {
		a.cfg.Logger.Error("delete provider session", "session", c.id, "err", err)
	}
	rec = rec.Clone()
	rec.State = memdb.SessionClosed
	rec.Closed = a.cfg.Now()
	rec.CloseReason = reason
	c.closedRecord, c.closeCause = rec, cause
	ctx.ActorSystem().EventStream.Publish(&SessionClosed{Session: rec.Clone(), Reason: reason, Err: cause})
	a.cfg.Logger.Info("provider session closing", "instance", a.cfg.Instance.ID, "session", c.id, "reason", reason, "err", cause)
	switch {
	case c.record == nil, a.cfg.Release == nil, reason != ReasonReleased && reason != ReasonIdle && reason != ReasonDied:
		// Nothing to release here: a session still opening recorded
		// nothing (its failed open revokes the credential it minted), an
		// aborted open is undone by the thread that abandoned it, and
		// shutdown revoked everything first.
		ctx.Send(c.pid, &opClose{})
		return rec
	}
	root, self, release, work, base := ctx.ActorSystem().Root, ctx.Self(), a.cfg.Release, a.cfg.Work, a.cfg.Base
	closed := rec.Clone()
	work.Add(1)
	go func() {
		defer work.Done()
		root.Send(self, &released{id: closed.ID, err: release(base, closed)})
	}()
	return rec
}

// dispatched notes that an attach or detach of thread is being sent to c's
// driver session and returns its sequence number.
func (a *instanceActor) dispatched(c *child, thread string) uint64 {
	a.seq++
	if c.threadSeq == nil {
		c.threadSeq = map[string]uint64{}
	}
	c.threadSeq[thread] = a.seq
	return a.seq
}

// releaseIdle closes every open session idle for at least IdleRelease and
// returns their records as they were at close.
func (a *instanceActor) releaseIdle(ctx actor.Context) []*memdb.ProviderSession {
	if a.cfg.IdleRelease <= 0 {
		return nil
	}
	rd := a.cfg.Store.Read()
	now := a.cfg.Now()
	var released []*memdb.ProviderSession
	for _, id := range a.sortedChildren() {
		c := a.children[id]
		if c.closed || c.record == nil {
			continue
		}
		since, busy := a.idleSince(rd, c)
		if busy || now.Sub(since) < a.cfg.IdleRelease {
			continue
		}
		released = append(released, a.close(ctx, c, ReasonIdle, nil))
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
		t, err := rd.Thread(nil, id)
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
// session is released at most that late.
func (a *instanceActor) armIdle(ctx actor.Context) {
	if a.cfg.IdleRelease <= 0 || a.idleTimer != nil || a.stopping {
		return
	}
	open := false
	for _, c := range a.children {
		if !c.closed && c.record != nil {
			open = true
			break
		}
	}
	if !open {
		return
	}
	every := min(max(a.cfg.IdleRelease/4, 5*time.Millisecond), time.Minute)
	root, self := ctx.ActorSystem().Root, ctx.Self()
	a.idleTimer = time.AfterFunc(every, func() { root.Send(self, &idleTick{}) })
}

// answerIdleWaits notes that session stopped ("" for none), with the error
// of its release, and answers the ReleaseIdle requests with nothing left
// pending.
func (a *instanceActor) answerIdleWaits(ctx actor.Context, stopped string, err error) {
	waits := a.idleWaits[:0]
	for _, w := range a.idleWaits {
		if w.pending[stopped] && err != nil {
			w.errs = append(w.errs, err)
		}
		delete(w.pending, stopped)
		if len(w.pending) > 0 {
			waits = append(waits, w)
			continue
		}
		if w.reply != nil {
			ctx.Send(w.reply, &ReleaseIdleResult{Sessions: w.sessions, Err: errors.Join(w.errs...)})
		}
	}
	clear(a.idleWaits[len(waits):])
	a.idleWaits = waits
}

func (a *instanceActor) answerCloseAll(ctx actor.Context) {
	if len(a.closeAllWaiters) == 0 || len(a.children) > 0 {
		return
	}
	for _, w := range a.closeAllWaiters {
		ctx.Send(w, &CloseAllResult{Sessions: a.closedByAll})
	}
	a.closeAllWaiters, a.closedByAll = nil, nil
}

func (a *instanceActor) put(r *memdb.ProviderSession) {
	if err := a.cfg.Store.Write(func(w *memdb.Writer) error { return w.PutProviderSession(r) }); err != nil {
		a.cfg.Logger.Error("write provider session", "session", r.ID, "err", err)
	}
}

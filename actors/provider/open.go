package provider

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/internal/deadline"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// The instance's side of the open protocol (see the package doc): which
// session serves a thread is decided here, by the owner of
// provider_sessions, and so are the races of that decision. A driver call
// a decision needs (an Attach) is an attachOp: dispatched to the session's
// actor, and completed by childAttached on the instance's turn.

// attachOp is an Attach in flight on a session's driver.
type attachOp struct {
	child    string
	binding  driver.Binding
	replaces []string // credentials the binding's credential supersedes (a rotation)
	// done is called on the instance's turn with the outcome; a session that
	// closed before the Attach completed is fault.UnknownProviderSession.
	done func(ctx actor.Context, f fault.Fault)
}

// acquire serves AcquireSession for reply: the session holding b's
// credential and serving b's thread (Reused), one holding it that takes the
// thread back (Attached), or neither (NeedsCredential). A session that
// closes while it takes the thread back is not an answer: the question is
// asked again of the sessions as they are then.
func (a *instanceActor) acquire(ctx actor.Context, b driver.Binding, dl time.Time, reply *actor.PID) {
	answer := func(r *SessionAcquired) { ctx.Send(reply, r) }
	if deadline.Passed(dl) {
		answer(&SessionAcquired{Fault: timeoutFault("acquire a provider session for " + b.Thread)})
		return
	}
	if b.CredentialID != "" {
		var holder *child
		for _, c := range a.sorted(open) {
			if !slices.Contains(c.record.Credentials, b.CredentialID) {
				continue
			}
			if slices.Contains(c.record.Threads, b.Thread) {
				answer(&SessionAcquired{SessionID: c.id, Outcome: Reused})
				return
			}
			if holder == nil && (c.record.MultiThread || len(c.record.Threads) == 0) {
				holder = c
			}
		}
		if holder != nil {
			// The credential is live and a session that holds its token can
			// take the thread back: re-attach, nothing to mint.
			a.dispatchAttach(ctx, holder, dl, &attachOp{binding: b, done: func(ctx actor.Context, f fault.Fault) {
				switch {
				case f.Code == fault.UnknownProviderSession:
					a.acquire(ctx, b, dl, reply)
				case !f.OK():
					answer(&SessionAcquired{Fault: f})
				default:
					answer(&SessionAcquired{SessionID: holder.id, Outcome: Attached})
				}
			}})
			return
		}
	}
	// No process holds a live token of the pair (the runtime keeps no
	// tokens), so serving the thread needs a new credential.
	answer(&SessionAcquired{Outcome: NeedsCredential})
}

// openFor serves OpenSession for reply: b carries a credential just minted.
// A session the thread is attached to (its credential had expired) is
// re-bound to it; else a multi-thread driver's live session takes the
// thread; else a new session, id (or a fresh id), is opened. A session that
// closes before it took the thread is not an answer: the open is decided
// again.
func (a *instanceActor) openFor(ctx actor.Context, id string, b driver.Binding, dl time.Time, reply *actor.PID) {
	answer := func(r *OpenSessionResult) { ctx.Send(reply, r) }
	if deadline.Passed(dl) {
		answer(&OpenSessionResult{Fault: timeoutFault("open a provider session for " + b.Thread)})
		return
	}
	bind := func(c *child) {
		a.dispatchAttach(ctx, c, dl, &attachOp{binding: b, done: func(ctx actor.Context, f fault.Fault) {
			switch {
			case f.Code == fault.UnknownProviderSession:
				a.openFor(ctx, id, b, dl, reply)
			case !f.OK():
				answer(&OpenSessionResult{Fault: f})
			default:
				answer(&OpenSessionResult{SessionID: c.id})
			}
		}})
	}
	if s := a.serving(b.Thread); len(s) > 0 {
		bind(s[0])
		return
	}
	if a.cfg.Driver.MultiThread() {
		// One session serves every thread: the oldest one alive, even while
		// it is still opening (the Attach waits behind its Open).
		if s := a.sorted(opening, open); len(s) > 0 {
			bind(s[0])
			return
		}
	}
	if id == "" {
		id = token.NewID("ps_")
	} else if a.children[id] != nil {
		// The id's earlier session has not been reaped yet (its Terminated
		// is still on its way, even when the registry already forgot it):
		// a new actor of that name would be taken for it and closed.
		answer(&OpenSessionResult{Fault: fault.New(fault.Unavailable, "open provider session %s of %s: the id's previous session is still stopping", id, a.cfg.Instance.ID)})
		return
	}
	props := actor.PropsFromProducer(func() actor.Actor {
		return newProviderSession(id, a.cfg, b, dl)
	})
	pid, err := ctx.SpawnNamed(props, id)
	if err != nil {
		answer(&OpenSessionResult{Fault: fault.New(fault.Internal, "spawn provider session: %v", err)})
		return
	}
	a.children[id] = &child{id: id, pid: pid, binding: b, onOpen: func(ctx actor.Context, f fault.Fault) {
		r := &OpenSessionResult{Fault: f}
		if f.OK() {
			r.SessionID, r.New = id, true
		}
		answer(r)
	}}
}

// rebind serves RebindThread: every open session serving the thread gets
// the new credential; answered once every Attach returned.
func (a *instanceActor) rebind(ctx actor.Context, msg *RebindThread) {
	reply, dl, b := ctx.Sender(), msg.Or(a.cfg.ActorTimeout), msg.Binding.Clone()
	targets := a.serving(b.Thread)
	res := &ThreadRebound{}
	if len(targets) == 0 {
		ctx.Send(reply, res)
		return
	}
	left := len(targets)
	for _, c := range targets {
		a.dispatchAttach(ctx, c, dl, &attachOp{binding: b, replaces: slices.Clone(msg.Replaces), done: func(ctx actor.Context, f fault.Fault) {
			if f.OK() {
				res.Sessions = append(res.Sessions, c.id)
			} else if res.Fault.OK() {
				res.Fault = f
			}
			if left--; left == 0 {
				slices.Sort(res.Sessions)
				ctx.Send(reply, res)
			}
		}})
	}
}

// dispatchAttach sends op to c's driver session, bounded by dl.
func (a *instanceActor) dispatchAttach(ctx actor.Context, c *child, dl time.Time, op *attachOp) {
	op.child = c.id
	seq := a.dispatched(c, op.binding.Thread)
	a.attaches[seq] = op
	ctx.Send(c.pid, &opAttach{seq: seq, binding: op.binding.Clone(), deadline: dl})
}

// attached completes the attach seq on session id with f: records what it
// changed and answers whoever waits for it.
func (a *instanceActor) attached(ctx actor.Context, seq uint64, id string, f fault.Fault) {
	op := a.attaches[seq]
	if op == nil {
		return
	}
	delete(a.attaches, seq)
	c := a.children[id]
	if f.OK() && (c == nil || c.phase != open) {
		f = fault.New(fault.UnknownProviderSession, "attach to %s: %v: closed meanwhile", id, fault.ErrUnknownProviderSession)
	}
	if f.OK() {
		r, b := &c.record, op.binding
		// A detach of the thread dispatched after this attach was queued
		// behind it on the driver, so the thread ends detached: only the
		// credential the attach handed over is recorded.
		if c.threadSeq[b.Thread] == seq && !slices.Contains(r.Threads, b.Thread) {
			r.Threads = append(r.Threads, b.Thread)
		}
		r.Credentials = slices.DeleteFunc(r.Credentials, func(id string) bool { return slices.Contains(op.replaces, id) })
		if !slices.Contains(r.Credentials, b.CredentialID) {
			r.Credentials = append(r.Credentials, b.CredentialID)
		}
		c.owners[b.CredentialID] = b.Thread
		c.lastActive = a.cfg.Now()
		a.put(*r)
		ctx.ActorSystem().EventStream.Publish(&ThreadAttached{
			Instance: a.cfg.Instance.ID, SessionID: c.id, Thread: b.Thread, CredentialID: b.CredentialID,
		})
	}
	op.done(ctx, f)
}

// opened is a session's Open returning.
func (a *instanceActor) opened(ctx actor.Context, msg *childOpened) {
	c := a.children[msg.id]
	if c == nil || c.onOpen == nil {
		return
	}
	answer := c.onOpen
	c.onOpen = nil
	switch {
	case !msg.fault.OK():
		// Nothing was opened or recorded: stop the actor quietly. (It does
		// not stop itself: its Terminated could overtake this message.)
		if c.phase == opening {
			c.phase = failed
		}
		ctx.Stop(c.pid)
		answer(ctx, msg.fault)
	case c.phase == closing:
		answer(ctx, c.closedWhileOpening())
	default:
		now := a.cfg.Now()
		c.phase = open
		c.record = memdb.ProviderSession{
			ID:          c.id,
			Instance:    a.cfg.Instance.ID,
			MultiThread: a.cfg.Driver.MultiThread(),
			Threads:     []string{c.binding.Thread},
			Credentials: []string{c.binding.CredentialID},
			State:       memdb.SessionOpen,
			Opened:      now,
		}
		c.owners = map[string]string{c.binding.CredentialID: c.binding.Thread}
		c.lastActive = now
		a.put(c.record)
		// Published before the open is answered: whoever the answer reaches
		// finds the session's record in the journal already.
		ctx.ActorSystem().EventStream.Publish(&SessionOpened{Session: *c.record.Clone()})
		answer(ctx, fault.Fault{})
		a.armIdle(ctx)
	}
}

// closedWhileOpening is the answer of an open whose session ended before
// the open was answered.
func (c *child) closedWhileOpening() fault.Fault {
	if !c.openFault.OK() {
		return c.openFault
	}
	return fault.New(fault.UnknownProviderSession, "open %s: %v: closed while opening", c.id, fault.ErrUnknownProviderSession)
}

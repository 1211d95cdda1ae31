package thread

import (
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

func (a *threadActor) switchProvider(ctx actor.Context, instance string) {
	reply := ctx.Sender()
	var prev, ended string
	a.write(ctx, func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if _, err := a.instance(&w.Reader, instance); err != nil {
			return err
		}
		prev, ended = t.Instance, ""
		if t.Run != nil && t.Run.Instance != instance {
			ended, t.Run = t.Run.ID, nil
			t.LastTurn = a.cfg.Now()
		}
		t.Instance = instance
		return w.PutThread(t)
	}, func(err error) {
		if err != nil {
			prev, ended = "", ""
		}
		sendTo(ctx, reply, &SwitchProviderResult{Previous: prev, EndedRun: ended, Fault: fault.From(err)})
	})
}

func (a *threadActor) startRun(ctx actor.Context, instance string) {
	reply := ctx.Sender()
	var id string
	now := a.cfg.Now()
	a.write(ctx, func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if t.Instance != instance {
			return fmt.Errorf("start run for %q on %s (current %q): %w", instance, a.cfg.ID, t.Instance, fault.ErrNotCurrentInstance)
		}
		if t.Run != nil {
			return fmt.Errorf("start run on %s: %w", a.cfg.ID, fault.ErrRunActive)
		}
		id = token.NewID("run_")
		t.Run = &memdb.Run{ID: id, Instance: instance, Started: now}
		t.LastTurn = now
		if _, err := credential.Touch(w, a.cfg.ID, now, a.cfg.Window); err != nil {
			return err
		}
		return w.PutThread(t)
	}, func(err error) {
		if err != nil {
			id = ""
		}
		sendTo(ctx, reply, &StartRunResult{RunID: id, Fault: fault.From(err)})
	})
}

func (a *threadActor) endRun(ctx actor.Context, runID string) {
	reply := ctx.Sender()
	var id string
	a.write(ctx, func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if t.Run == nil || (runID != "" && t.Run.ID != runID) {
			return fmt.Errorf("end run %q on %s: %w", runID, a.cfg.ID, fault.ErrNoRun)
		}
		id, t.Run = t.Run.ID, nil
		t.LastTurn = a.cfg.Now()
		return w.PutThread(t)
	}, func(err error) {
		if err != nil {
			id = ""
		}
		sendTo(ctx, reply, &EndRunResult{RunID: id, Fault: fault.From(err)})
	})
}

func (a *threadActor) touch(ctx actor.Context) {
	reply := ctx.Sender()
	var n int
	a.write(ctx, func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		now := a.cfg.Now()
		if n, err = credential.Touch(w, a.cfg.ID, now, a.cfg.Window); err != nil {
			return err
		}
		t.LastTurn = now
		return w.PutThread(t)
	}, func(err error) {
		if err != nil {
			n = 0
		}
		sendTo(ctx, reply, &TouchResult{Refreshed: n, Fault: fault.From(err)})
	})
}

// mutate implements SPEC §4's atomic "check live caller and apply".
func (a *threadActor) mutate(ctx actor.Context, msg *Mutate) {
	reply := ctx.Sender()
	var val any
	now := a.cfg.Now()
	a.writeFresh(ctx, func(w *memdb.Writer) error {
		t, err := a.loadActive(w)
		if err != nil {
			return err
		}
		if err := credential.CheckLive(&w.Reader, msg.Caller, now); err != nil {
			return err
		}
		val, err = msg.Effect.Apply(txn{t: t, now: now, caller: msg.Caller})
		if err != nil {
			return err
		}
		if over := len(t.Messages) - a.cfg.MessageLog; over > 0 {
			t.Messages = slices.Delete(t.Messages, 0, over)
		}
		return w.PutThread(t)
	}, func(err error) {
		if err != nil {
			val = nil
		}
		sendTo(ctx, reply, &MutateResult{Value: val, Fault: fault.From(err)})
	})
}

// staleRetries bounds how often a mutation is tried again after a stale
// read (writeFresh).
const staleRetries = 3

// writeFresh is write, tried again (at most staleRetries times) while it
// finds a row changed by another node since this node's replica applied
// it (memdb.ErrStale, on several nodes): a mutation reads its caller's
// credential and thread, which another node may write, and the store
// answers ErrStale only once its replica has applied the change, so the
// next try reads it. fn must be a function of what it reads (an Effect
// is: it touches only its Txn).
func (a *threadActor) writeFresh(ctx actor.Context, fn func(w *memdb.Writer) error, then func(err error)) {
	var try func(left int)
	try = func(left int) {
		a.write(ctx, fn, func(err error) {
			if left > 0 && errors.Is(err, memdb.ErrStale) {
				try(left - 1)
				return
			}
			then(err)
		})
	}
	try(staleRetries)
}

// txn is the Txn an Effect is given: the thread's record, the time and
// the caller, and nothing else of the transaction.
type txn struct {
	t      *memdb.Thread
	now    time.Time
	caller principal.Principal
}

func (x txn) Thread() *memdb.Thread       { return x.t }
func (x txn) Now() time.Time              { return x.now }
func (x txn) Caller() principal.Principal { return x.caller }

// Apply appends the message to the thread's log.
func (m AppendMessage) Apply(tx Txn) (any, error) {
	if m.Text == "" || len(m.Text) > MaxMessageBytes || !utf8.ValidString(m.Text) {
		return nil, fmt.Errorf("message of %d bytes: %w", len(m.Text), fault.ErrInvalidMessage)
	}
	t, c := tx.Thread(), tx.Caller()
	msg := memdb.Message{Seq: t.NextSeq, Text: m.Text, Author: c.Namespace, Instance: c.Instance, At: tx.Now()}
	t.NextSeq++
	t.Messages = append(t.Messages, msg)
	return msg, nil
}

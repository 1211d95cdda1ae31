package thread

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

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
func checkLive(w *memdb.Writer, c principal.Principal, now time.Time) error {
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
func (m *AppendMessage) Apply(_ *memdb.Writer, t *memdb.Thread, now time.Time, c principal.Principal) (any, error) {
	if m.Text == "" || len(m.Text) > MaxMessageBytes || !utf8.ValidString(m.Text) {
		return nil, fmt.Errorf("message of %d bytes: %w", len(m.Text), ErrInvalidMessage)
	}
	msg := memdb.Message{Seq: t.NextSeq, Text: m.Text, Author: c.Namespace, Instance: c.Instance, At: now}
	t.NextSeq++
	t.Messages = append(t.Messages, msg)
	return msg, nil
}

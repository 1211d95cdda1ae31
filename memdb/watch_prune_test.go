package memdb

import (
	"context"
	"slices"
	"testing"
	"time"
)

func TestPruneRevoked(t *testing.T) {
	s := newStore(t)
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var creds []*Credential
	for i, state := range []string{StateRevoked, StateLive, StateRevoked, StateRevoked, StateLive, StateRevoked} {
		c := &Credential{ID: string(rune('a' + i)), TokenHash: string(rune('A' + i)), Kind: KindProvider,
			Namespace: "ns" + string(rune('a'+i)), Thread: "T", Instance: "I", State: state}
		if state == StateRevoked {
			c.Revoked = base.Add(time.Duration(10-i) * time.Minute) // later ids were revoked earlier
		}
		creds = append(creds, c)
	}
	mustWrite(t, s, func(w *Writer) error {
		for _, c := range creds {
			if err := w.PutCredential(c); err != nil {
				return err
			}
		}
		return nil
	})
	// Revoked: a (10m), c (8m), d (7m), f (5m). Keep 2: the two revoked last, a and c.
	mustWrite(t, s, func(w *Writer) error {
		all, err := w.CredentialsByThread(nil, "T")
		if err != nil {
			return err
		}
		return w.PruneRevoked(all, 2)
	})
	left, err := s.Read().CredentialsByThread(nil, "T")
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range left {
		ids = append(ids, c.ID)
	}
	slices.Sort(ids)
	if want := []string{"a", "b", "c", "e"}; !slices.Equal(ids, want) {
		t.Fatalf("after PruneRevoked(keep 2) = %v, want %v (live b, e kept; newest revoked a, c kept)", ids, want)
	}
	// Nothing to prune: a no-op.
	mustWrite(t, s, func(w *Writer) error {
		all, _ := w.CredentialsByThread(nil, "T")
		return w.PruneRevoked(all, 5)
	})
	if left2, _ := s.Read().CredentialsByThread(nil, "T"); len(left2) != 4 {
		t.Fatalf("PruneRevoked under the bound removed rows: %d left, want 4", len(left2))
	}
}

func TestStoreWatch(t *testing.T) {
	now := func() time.Time { return time.Now() }
	t.Run("wakes on a write to what it read", func(t *testing.T) {
		s := newStore(t)
		mustWrite(t, s, func(w *Writer) error { return w.PutThread(&Thread{ID: "T", Status: ThreadActive}) })
		done := make(chan bool, 1)
		go func() {
			done <- s.Watch(context.Background(), now, func(r *Reader, ws WatchSet) (bool, time.Time) {
				th, err := r.Thread(ws, "T")
				return err == nil && th.Status == ThreadArchived, time.Time{}
			})
		}()
		mustWrite(t, s, func(w *Writer) error { return w.PutThread(&Thread{ID: "T", Status: ThreadArchived}) })
		select {
		case ok := <-done:
			if !ok {
				t.Fatal("Watch = false, want true")
			}
		case <-time.After(time.Minute): // detects a hang only
			t.Fatal("Watch did not see the write")
		}
	})
	t.Run("wakes at the time check returned", func(t *testing.T) {
		s := newStore(t)
		deadline := time.Now().Add(50 * time.Millisecond)
		got := s.Watch(context.Background(), now, func(*Reader, WatchSet) (bool, time.Time) {
			return !time.Now().Before(deadline), deadline
		})
		if !got || time.Now().Before(deadline) {
			t.Fatalf("Watch = %v before the deadline", got)
		}
	})
	t.Run("returns false when ctx ends", func(t *testing.T) {
		s := newStore(t)
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		if s.Watch(ctx, now, func(*Reader, WatchSet) (bool, time.Time) { return false, time.Time{} }) {
			t.Fatal("Watch = true for a check that is never done")
		}
	})
}

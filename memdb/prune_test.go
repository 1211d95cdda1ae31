package memdb

import (
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
		all, err := w.CredentialsByThread("T")
		if err != nil {
			return err
		}
		return w.PruneRevoked(all, 2)
	})
	left, err := s.Read().CredentialsByThread("T")
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
		all, _ := w.CredentialsByThread("T")
		return w.PruneRevoked(all, 5)
	})
	if left2, _ := s.Read().CredentialsByThread("T"); len(left2) != 4 {
		t.Fatalf("PruneRevoked under the bound removed rows: %d left, want 4", len(left2))
	}
}

package memdb

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// TestAuthIndexMatchesTheTable: after any sequence of writes — credentials
// put, re-put with another state or another token hash, deleted, several
// in one transaction, transactions that fail part-way or conflict — the
// token index answers exactly what the credentials table's token_hash
// index answers, for every hash ever used.
func TestAuthIndexMatchesTheTable(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		s, err := New()
		if err != nil {
			t.Fatal(err)
		}
		ids := []string{"c1", "c2", "c3"}
		hashes := []string{hexHash("h1"), hexHash("h2"), hexHash("h3"), hexHash("h4"), "not-a-hex-hash"}
		errAbort := errors.New("abort")
		for range rapid.IntRange(1, 30).Draw(t, "writes") {
			abort := rapid.IntRange(0, 5).Draw(t, "abort") == 0
			err := s.Write(func(w *Writer) error {
				for range rapid.IntRange(1, 3).Draw(t, "ops") {
					id := rapid.SampledFrom(ids).Draw(t, "id")
					if rapid.IntRange(0, 3).Draw(t, "delete") == 0 {
						if err := w.DeleteCredential(id); err != nil && !errors.Is(err, ErrNotFound) {
							return err
						}
						continue
					}
					c := &Credential{ID: id, TokenHash: rapid.SampledFrom(hashes).Draw(t, "hash"), Kind: KindClient,
						Namespace: "client:" + id, Client: id, State: rapid.SampledFrom([]string{StateLive, StateRevoked}).Draw(t, "state")}
					if err := w.PutCredential(c); err != nil {
						return err // a hash another row holds: the whole transaction fails
					}
				}
				if abort {
					return errAbort
				}
				return nil
			})
			if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, errAbort) {
				t.Fatalf("write: %v", err)
			}
			r := s.Read()
			for _, h := range hashes {
				want, err := r.CredentialByTokenHash(h)
				if errors.Is(err, ErrNotFound) {
					want = nil
				} else if err != nil {
					t.Fatal(err)
				}
				got := s.CredentialForToken(h)
				if h == "not-a-hex-hash" {
					want = nil // no token hashes to it: the index keeps digests
				}
				if fmt.Sprint(got) != fmt.Sprint(want) {
					t.Fatalf("token %s: index %+v, table %+v", h, got, want)
				}
			}
			rows := 0
			for _, id := range ids {
				if _, err := r.Credential(id); err == nil {
					rows++
				}
			}
			if _, err := r.CredentialByTokenHash("not-a-hex-hash"); err == nil {
				rows-- // kept by the table, not by the index
			}
			if s.auth.len() != rows {
				t.Fatalf("index holds %d credentials, the table %d", s.auth.len(), rows)
			}
		}
	})
}

// TestCredentialForTokenAllocatesNothing: the point of the index.
func TestCredentialForTokenAllocatesNothing(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Write(func(w *Writer) error {
		return w.PutCredential(&Credential{ID: "c1", TokenHash: hexHash("h1"), Kind: KindClient, Namespace: "client:c1", Client: "c1", State: StateLive})
	}); err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256([]byte("h1"))
	if n := testing.AllocsPerRun(100, func() {
		if s.CredentialForDigest(d) == nil {
			t.Fatal("not found")
		}
	}); n != 0 {
		t.Errorf("CredentialForToken allocates %v times, want 0", n)
	}
}

// hexHash is the TokenHash of token tok.
func hexHash(tok string) string {
	sum := sha256.Sum256([]byte(tok))
	return hex.EncodeToString(sum[:])
}

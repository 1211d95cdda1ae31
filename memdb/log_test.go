package memdb

import (
	"errors"
	"sync"
	"testing"
)

// fakeLog is a Log in memory: rows' revisions, one counter, and the
// store it applies its commits to. remote writes a row as another node
// would: in the log, not yet in the store.
type fakeLog struct {
	mu      sync.Mutex
	store   *Store
	rev     int64
	revs    map[string]int64 // row → revision; absent: no row
	commits []*Tx
}

func newLogStore(t *testing.T) (*Store, *fakeLog) {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	l := &fakeLog{store: s, revs: map[string]int64{}}
	s.SetLog(l)
	return s, l
}

func (l *fakeLog) Commit(tx *Tx) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range tx.Rows {
		if l.revs[revisionKey(r.Table, r.ID)] != r.Revision {
			return ErrStale
		}
	}
	l.rev++
	l.commits = append(l.commits, tx)
	return l.store.Apply(func(w *Writer) error {
		for _, wr := range tx.Writes {
			k := revisionKey(wr.Table, wr.ID)
			if wr.After == nil {
				delete(l.revs, k)
				if err := w.Delete(wr.Table, wr.ID); err != nil {
					return err
				}
				if err := w.SetRevision(wr.Table, wr.ID, 0); err != nil {
					return err
				}
				continue
			}
			l.revs[k] = l.rev
			if err := w.Put(wr.Table, wr.After); err != nil {
				return err
			}
			if err := w.SetRevision(wr.Table, wr.ID, l.rev); err != nil {
				return err
			}
		}
		return nil
	})
}

// remote moves a row's revision in the log, as another node's commit
// that this store has not applied yet.
func (l *fakeLog) remote(table, id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.rev++
	l.revs[revisionKey(table, id)] = l.rev
}

func TestWriteThroughLog(t *testing.T) {
	s, l := newLogStore(t)
	err := s.Write(func(w *Writer) error { return w.PutThread(&Thread{ID: "t1", Status: ThreadActive}) })
	if err != nil {
		t.Fatalf("Write = %v", err)
	}
	if len(l.commits) != 1 {
		t.Fatalf("commits = %d, want 1", len(l.commits))
	}
	tx := l.commits[0]
	if len(tx.Rows) != 1 || tx.Rows[0] != (RowRead{Table: TableThreads, ID: "t1"}) {
		t.Errorf("Rows = %+v, want the thread, absent (revision 0)", tx.Rows)
	}
	if len(tx.Writes) != 1 || tx.Writes[0].Before != nil || tx.Writes[0].After.(*Thread).ID != "t1" {
		t.Errorf("Writes = %+v, want one insert of t1", tx.Writes)
	}
	if _, err := s.Read().Thread("t1"); err != nil {
		t.Fatalf("read after the commit: %v (the writer must read its write)", err)
	}
	// The next write of the row compares the revision the commit applied.
	err = s.Write(func(w *Writer) error { return w.PutThread(&Thread{ID: "t1", Status: ThreadArchived}) })
	if err != nil {
		t.Fatalf("second Write = %v", err)
	}
	if got := l.commits[1].Rows; len(got) != 1 || got[0].Revision != 1 {
		t.Errorf("second commit's rows = %+v, want t1 at revision 1", got)
	}
}

// A row another node changed since this store applied it makes the
// write stale, whether the transaction wrote the row, only read it, or
// found it absent; nothing is written.
func TestWriteThroughLogStale(t *testing.T) {
	for _, test := range []struct {
		name  string
		setup func(s *Store)
		// remote is the row another node changes before fn runs.
		remoteTable, remoteID string
		fn                    func(w *Writer) error
	}{{
		name:        "written row",
		remoteTable: TableThreads, remoteID: "t1",
		fn: func(w *Writer) error { return w.PutThread(&Thread{ID: "t1", Status: ThreadArchived}) },
	}, {
		name:        "row only read",
		remoteTable: TableCredentials, remoteID: "c1",
		fn: func(w *Writer) error {
			if _, err := w.Credential("c1"); err != nil {
				return err
			}
			return w.PutThread(&Thread{ID: "t1", Status: ThreadArchived})
		},
	}, {
		name:        "row read absent",
		remoteTable: TableThreads, remoteID: "t2",
		fn: func(w *Writer) error {
			if _, err := w.Thread("t2"); !errors.Is(err, ErrNotFound) {
				return errors.New("t2 should be absent here")
			}
			return w.PutThread(&Thread{ID: "t2", Status: ThreadActive})
		},
	}, {
		name:        "row listed",
		remoteTable: TableCredentials, remoteID: "c1",
		fn: func(w *Writer) error {
			if _, err := w.CredentialsByThread("t1"); err != nil {
				return err
			}
			return w.PutThread(&Thread{ID: "t1", Status: ThreadArchived})
		},
	}} {
		t.Run(test.name, func(t *testing.T) {
			s, l := newLogStore(t)
			err := s.Write(func(w *Writer) error {
				if err := w.PutThread(&Thread{ID: "t1", Status: ThreadActive}); err != nil {
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			err = s.Write(func(w *Writer) error {
				return w.PutCredential(&Credential{ID: "c1", Kind: KindProvider, Namespace: "cred:c1", Thread: "t1", Instance: "i1", TokenHash: "h1", State: StateLive})
			})
			if err != nil {
				t.Fatal(err)
			}
			l.remote(test.remoteTable, test.remoteID)
			before := len(l.commits)
			if err := s.Write(test.fn); !errors.Is(err, ErrStale) {
				t.Fatalf("Write after a remote change of %s/%s = %v, want ErrStale", test.remoteTable, test.remoteID, err)
			}
			if len(l.commits) != before {
				t.Errorf("a stale write committed")
			}
			if th, _ := s.Read().Thread("t1"); th.Status != ThreadActive {
				t.Errorf("t1 = %+v after a stale write, want it unchanged", th)
			}
		})
	}
}

// Node-local tables commit in the store, not through the log; a
// transaction that mixes both kinds is refused whole.
func TestWriteThroughLogLocalTables(t *testing.T) {
	s, l := newLogStore(t)
	if err := s.Write(func(w *Writer) error { return w.PutInstance(&Instance{ID: "i1"}) }); err != nil {
		t.Fatalf("instance write = %v", err)
	}
	if _, err := s.Read().Instance("i1"); err != nil || len(l.commits) != 0 {
		t.Fatalf("instance: read %v, commits %d; want it in the store and no commit", err, len(l.commits))
	}
	err := s.Write(func(w *Writer) error {
		if err := w.PutInstance(&Instance{ID: "i2"}); err != nil {
			return err
		}
		return w.PutThread(&Thread{ID: "t1"})
	})
	if err == nil {
		t.Fatal("a transaction of a local and a replicated table was accepted")
	}
	if _, err := s.Read().Instance("i2"); !errors.Is(err, ErrNotFound) || len(l.commits) != 0 {
		t.Errorf("the refused transaction left i2 (%v) or a commit (%d)", err, len(l.commits))
	}
}

// Apply runs the commit hooks: on a replica the liveness monitor hears
// the changes the log brings, not the writer's own transaction.
func TestApplyRunsHooks(t *testing.T) {
	s, _ := newLogStore(t)
	var heard []string
	remove := s.OnCredentialsChanged(func(cs []*Credential) {
		for _, c := range cs {
			heard = append(heard, c.ID+":"+c.State)
		}
	})
	defer remove()
	if err := s.Write(func(w *Writer) error {
		return w.PutCredential(&Credential{ID: "c1", Kind: KindProvider, Namespace: "cred:c1", Thread: "t1", Instance: "i1", TokenHash: "h1", State: StateLive})
	}); err != nil {
		t.Fatal(err)
	}
	if len(heard) != 1 || heard[0] != "c1:"+StateLive {
		t.Fatalf("hooks heard %v, want [c1:%s] once", heard, StateLive)
	}
}

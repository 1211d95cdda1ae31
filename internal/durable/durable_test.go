package durable

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/memdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open opens path and loads it into a fresh store.
func open(t *testing.T, path string) (*Log, *memdb.Store) {
	t.Helper()
	l, err := Open(path, Options{})
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	mem, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Load(mem); err != nil {
		l.Close()
		t.Fatalf("Load(%s) = %v", path, err)
	}
	return l, mem
}

// post appends a message to thread id (created if absent), keeping at
// most keep messages, in one store write.
func post(mem *memdb.Store, id, text string, keep int) error {
	return mem.Write(func(w *memdb.Writer) error {
		t, err := w.Thread(id)
		if errors.Is(err, memdb.ErrNotFound) {
			t, err = &memdb.Thread{ID: id, Status: memdb.ThreadActive, Created: time.Unix(1, 0).UTC()}, nil
		}
		if err != nil {
			return err
		}
		t.Messages = append(t.Messages, memdb.Message{Seq: t.NextSeq, Text: text, At: time.Unix(2, 0).UTC()})
		t.NextSeq++
		if len(t.Messages) > keep {
			t.Messages = t.Messages[len(t.Messages)-keep:]
		}
		return w.PutThread(t)
	})
}

// TestMessagesReadBackInOrder: a thread's messages are rows of their own,
// the dropped ones deleted, and they come back in sequence order — also
// past the sequence numbers where a byte of the key changes (255 → 256).
func TestMessagesReadBackInOrder(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	l, mem := open(t, path)
	for i := range 600 {
		if err := post(mem, "t1", fmt.Sprintf("m%d", i), 300); err != nil {
			t.Fatal(err)
		}
	}
	if err := post(mem, "t2", "only", 300); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// On disk: 300 + 1 message rows, and thread rows without messages.
	db, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte(bucketMessages)).Stats().KeyN; n != 301 {
			t.Errorf("%d message rows on disk, want 301", n)
		}
		if v := tx.Bucket([]byte(memdb.TableThreads)).Get([]byte("t1")); strings.Contains(string(v), "m599") {
			t.Errorf("the thread's row holds its messages: %.80s", v)
		}
		return nil
	})
	db.Close()

	l, mem = open(t, path)
	defer l.Close()
	th, err := mem.Read().Thread("t1")
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 300 {
		t.Fatalf("%d messages read back, want 300", len(th.Messages))
	}
	for i, m := range th.Messages {
		if want := fmt.Sprintf("m%d", 300+i); m.Text != want || m.Seq != uint64(300+i) {
			t.Fatalf("message %d read back = seq %d %q, want seq %d %q", i, m.Seq, m.Text, 300+i, want)
		}
	}
	if th2, err := mem.Read().Thread("t2"); err != nil || len(th2.Messages) != 1 {
		t.Errorf("t2 read back = %+v, %v", th2, err)
	}
	// A deleted thread takes its messages with it.
	if err := mem.Write(func(w *memdb.Writer) error { return w.DeleteThread("t1") }); err != nil {
		t.Fatal(err)
	}
	l.Close()
	l, mem = open(t, path)
	defer l.Close()
	if _, err := mem.Read().Thread("t1"); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("deleted t1 read back: %v", err)
	}
	_ = l.db.View(func(tx *bolt.Tx) error {
		if n := tx.Bucket([]byte(bucketMessages)).Stats().KeyN; n != 1 {
			t.Errorf("%d message rows after the delete, want 1 (t2's)", n)
		}
		return nil
	})
}

// TestGroupCommit: commits queued while a round is being written share
// the next round — one bbolt transaction, one sync — and each returns
// only once it is applied.
func TestGroupCommit(t *testing.T) {
	l, mem := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer l.Close()
	hold := make(chan struct{})
	l.beforeRound = func() error { <-hold; return nil }
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = post(mem, fmt.Sprintf("t%d", i), "x", 10) })
	}
	for {
		l.mu.Lock()
		queued := len(l.queue)
		l.mu.Unlock()
		if queued == n {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if got, err := mem.Read().Threads(); err != nil || len(got) != 0 {
		t.Fatalf("before the round: %d threads readable (%v), want none: a write must not be seen before it is on disk", len(got), err)
	}
	close(hold)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("commit %d: %v", i, err)
		}
	}
	if r := l.Rounds(); r != 1 {
		t.Errorf("%d rounds for %d queued commits, want 1", r, n)
	}
	if got, _ := mem.Read().Threads(); len(got) != n {
		t.Errorf("%d threads after the round, want %d", len(got), n)
	}
}

// TestStaleRead: a transaction whose read row changed since is refused,
// and nothing of it is written.
func TestStaleRead(t *testing.T) {
	l, mem := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer l.Close()
	if err := post(mem, "t1", "a", 10); err != nil {
		t.Fatal(err)
	}
	rev, err := mem.Revision(memdb.TableThreads, "t1")
	if err != nil || rev == 0 {
		t.Fatalf("revision of t1 = %d, %v", rev, err)
	}
	err = l.Commit(&memdb.Tx{
		Rows:   []memdb.RowRead{{Table: memdb.TableThreads, ID: "t1", Revision: rev - 1}},
		Writes: []memdb.RowWrite{{Table: memdb.TableThreads, ID: "t1", After: &memdb.Thread{ID: "t1", Status: memdb.ThreadArchived}}},
	})
	if !errors.Is(err, memdb.ErrStale) {
		t.Fatalf("commit on a stale read = %v, want ErrStale", err)
	}
	if th, _ := mem.Read().Thread("t1"); th.Status != memdb.ThreadActive {
		t.Errorf("t1 after a refused commit: %+v", th)
	}
}

// TestBrokenLogFailsClosed: a write the disk refuses fails its commit and
// every later one, and Broken says so (the runtime then stops serving).
func TestBrokenLogFailsClosed(t *testing.T) {
	l, mem := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer l.Close()
	if err := post(mem, "t1", "a", 10); err != nil {
		t.Fatal(err)
	}
	disk := errors.New("no space left on device")
	l.beforeRound = func() error { return disk }
	if err := post(mem, "t1", "b", 10); !errors.Is(err, disk) {
		t.Fatalf("commit on a failing disk = %v, want its error", err)
	}
	if !l.Broken() {
		t.Fatal("Broken() = false after a failed write")
	}
	l.beforeRound = nil
	if err := post(mem, "t2", "c", 10); err == nil {
		t.Fatal("a commit after a failed write succeeded")
	}
	if th, _ := mem.Read().Thread("t1"); len(th.Messages) != 1 {
		t.Errorf("t1 has %d messages, want 1: a failed write was applied", len(th.Messages))
	}
}

// TestRefusedWriteFailsItsCommit: a commit is answered only once its rows
// are written and synced (SPEC §3.8: durable before it returns). A write
// the file itself refuses — a key longer than bbolt takes, refused inside
// the write, past every hook — fails its commit with the file's error, is
// not applied to the store, and breaks the log. A commit answered before
// its write would have returned nil, every time.
func TestRefusedWriteFailsItsCommit(t *testing.T) {
	l, mem := open(t, filepath.Join(t.TempDir(), "state.db"))
	defer l.Close()
	long := strings.Repeat("t", bolt.MaxKeySize+1)
	if err := post(mem, long, "a", 10); !errors.Is(err, bolt.ErrKeyTooLarge) {
		t.Fatalf("a commit whose row the file refuses = %v, want the file's %v", err, bolt.ErrKeyTooLarge)
	}
	if _, err := mem.Read().Thread(long); !errors.Is(err, memdb.ErrNotFound) {
		t.Errorf("the refused thread in the store: %v, want ErrNotFound", err)
	}
	if !l.Broken() {
		t.Error("Broken() = false after a refused write")
	}
}

// TestOpenRefuses: a file held by another Log, damaged, truncated, not a
// state file or of a newer format is a clear error naming it, and is left
// as it was.
func TestOpenRefuses(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.db")
	l, mem := open(t, good)
	for i := range 200 {
		if err := post(mem, fmt.Sprintf("t%d", i), strings.Repeat("x", 1000), 10); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := Open(good, Options{LockTimeout: 10 * time.Millisecond}); !errors.Is(err, ErrInUse) {
		t.Errorf("second Open of a held file = %v, want ErrInUse", err)
	}
	l.Close()
	whole, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	var used int64 // the file's high-water mark; bbolt grows the file past it
	db, err := bolt.Open(good, 0o600, &bolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil })
	db.Close()
	if used < 64*1024 {
		t.Fatalf("the good file uses %d bytes: too few pages to cut it in half meaningfully", used)
	}

	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newer := filepath.Join(dir, "newer.db")
	db, err = bolt.Open(newer, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error {
		b, _ := tx.CreateBucket([]byte(bucketMeta))
		return b.Put([]byte(keyFormat), []byte("2"))
	})
	db.Close()
	foreign := filepath.Join(dir, "foreign.db")
	db, err = bolt.Open(foreign, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	_ = db.Update(func(tx *bolt.Tx) error { _, err := tx.CreateBucket([]byte("other")); return err })
	db.Close()

	for _, tc := range []struct {
		name, path string
		want       error
	}{
		{"garbage", write("garbage.db", []byte(strings.Repeat("not a database ", 400))), ErrCorrupt},
		{"truncated to a page", write("short.db", whole[:4096]), ErrCorrupt},
		{"its pages overwritten", write("scribbled.db", scribble(whole, 2*4096, used)), ErrCorrupt},
		{"truncated to half its pages", write("half.db", whole[:used/2]), ErrCorrupt},
		{"another program's bbolt file", foreign, ErrCorrupt},
		{"a newer format", newer, ErrFormat},
	} {
		before, _ := os.ReadFile(tc.path)
		l, err := Open(tc.path, Options{})
		if err == nil {
			mem, _ := memdb.New()
			err = l.Load(mem)
			l.Close()
		}
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.path) {
			t.Errorf("%s: %v, want %v naming the file", tc.name, err, tc.want)
		}
		if after, _ := os.ReadFile(tc.path); string(after) != string(before) {
			t.Errorf("%s: the file was changed", tc.name)
		}
	}
}

// scribble returns a copy of b with the bytes from..to set to 0xff.
func scribble(b []byte, from, to int64) []byte {
	c := slices.Clone(b)
	for i := from; i < to; i++ {
		c[i] = 0xff
	}
	return c
}

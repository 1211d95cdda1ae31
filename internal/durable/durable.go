package durable

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/agenthost/mcpruntime/memdb"
)

// Errors of Open and Load. Each names the file in its message.
var (
	// ErrInUse: another process holds the file (one process per state
	// file: bbolt's lock on it).
	ErrInUse = errors.New("state file is in use by another process")
	// ErrFormat: the file was written in a format this version does not
	// read (a newer version wrote it); it is left untouched.
	ErrFormat = errors.New("state file has a format this version cannot read")
	// ErrCorrupt: the file is not a state file, or is damaged or truncated.
	ErrCorrupt = errors.New("state file is damaged or not a state file")
	// ErrClosed: the log was closed.
	ErrClosed = errors.New("state file closed")
)

// Format is the version of the layout this package writes (the meta
// bucket's format key). A file of a newer format is refused (ErrFormat);
// an older one would be migrated at Open — there is none yet.
const Format = 1

const (
	bucketMeta     = "meta"
	bucketMessages = "messages"
	keyFormat      = "format"
)

// Options tune a Log. The zero value is the default.
type Options struct {
	// LockTimeout is how long Open waits for another process to let go of
	// the file before ErrInUse. Zero: 100 ms.
	LockTimeout time.Duration
	// Observe, when set, is called with the latency of every commit (from
	// Commit's call to its return: the queue, the sync and the apply), from
	// the committing goroutine.
	Observe func(time.Duration)
}

// Log is a state file open for one store; see the package doc.
type Log struct {
	path string
	db   *bolt.DB
	opts Options
	mem  *memdb.Store // set by Load

	mu      sync.Mutex // guards the fields below
	cond    *sync.Cond // broadcast at each apply, at break and at close
	rev     int64      // the revision of the last commit queued
	applied int64      // the revision of the last commit applied to mem
	pending map[string]pendingRow
	queue   []*commit
	broken  error
	closed  bool

	isBroken atomic.Bool // broken != nil, for Broken on every request
	rounds   atomic.Uint64

	// beforeRound, when set (tests), runs in the flusher before each round
	// takes the queue; its error fails the round's write.
	beforeRound func() error

	kick chan struct{} // a commit was queued
	stop chan struct{} // Close
	done chan struct{} // the flusher has returned
}

// pendingRow is a row written by a commit not yet applied: the revision
// the store will show for it (0: deleted) and the commit's.
type pendingRow struct {
	rev, commit int64
}

// commit is one queued store transaction.
type commit struct {
	tx  *memdb.Tx
	rev int64
	err chan error
}

// Open opens (or creates, 0600) the state file at path and checks its
// format. The file's directory must exist. Load then reads it into a store.
func Open(path string, opts Options) (l *Log, err error) {
	if opts.LockTimeout <= 0 {
		opts.LockTimeout = 100 * time.Millisecond
	}
	// bbolt panics on some damage it finds while reading pages, and a
	// page it trusts past the end of the mapping would fault: both are a
	// damaged file here, not a crash.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			l, err = nil, fmt.Errorf("%s: %w: %v", path, ErrCorrupt, p)
		}
	}()
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: opts.LockTimeout, FreelistType: bolt.FreelistMapType})
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, fmt.Errorf("%s: %w", path, ErrInUse)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrVersionMismatch), errors.Is(err, berrors.ErrChecksum):
		return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	case err != nil && isDamage(err):
		return nil, fmt.Errorf("%s: %w: %w", path, ErrCorrupt, err)
	case err != nil:
		return nil, fmt.Errorf("open state file: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		db.Close()
		return nil, fmt.Errorf("open state file: %w", err)
	}
	if err := checkSize(db, path); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkFormat(db); err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	l = &Log{
		path: path, db: db, opts: opts, pending: map[string]pendingRow{},
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}),
	}
	l.cond = sync.NewCond(&l.mu)
	return l, nil
}

// isDamage reports whether an error of bolt.Open is about the file's
// contents (a truncated file, a page out of range) rather than the system.
func isDamage(err error) bool {
	var perr *os.PathError
	if errors.As(err, &perr) {
		return false
	}
	s := err.Error()
	for _, w := range []string{"file size too small", "invalid", "mmap", "page", "meta"} {
		if bytes.Contains([]byte(s), []byte(w)) {
			return true
		}
	}
	return false
}

// checkSize refuses a file shorter than its own high-water mark: a
// truncated copy, whose pages past the end would be read as zeros (or
// fault the mapping) instead of refused.
func checkSize(db *bolt.DB, path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	var need int64
	_ = db.View(func(tx *bolt.Tx) error {
		need = tx.Size()
		return nil
	})
	if fi.Size() < need {
		return fmt.Errorf("%w: %d bytes, its pages reach %d (truncated?)", ErrCorrupt, fi.Size(), need)
	}
	return nil
}

// checkFormat writes the layout into an empty file, and refuses a file
// that is not a state file or is of a newer format. A file it accepts is
// written only if it lacks a bucket of the layout.
func checkFormat(db *bolt.DB) error {
	fresh := false
	err := db.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(bucketMeta))
		if meta == nil {
			empty := true
			_ = tx.ForEach(func([]byte, *bolt.Bucket) error { empty = false; return nil })
			if !empty {
				return fmt.Errorf("%w: no format record", ErrCorrupt)
			}
			fresh = true
			return nil
		}
		raw := meta.Get([]byte(keyFormat))
		v, err := strconv.Atoi(string(raw))
		switch {
		case err != nil || v < 1:
			return fmt.Errorf("%w: format %q", ErrCorrupt, raw)
		case v > Format:
			return fmt.Errorf("%w: format %d, this version reads format %d (written by a newer version?)", ErrFormat, v, Format)
		}
		return nil
	})
	if err != nil {
		return err
	}
	complete := !fresh
	_ = db.View(func(tx *bolt.Tx) error {
		for _, name := range append([]string{bucketMessages}, memdb.DurableTables...) {
			complete = complete && tx.Bucket([]byte(name)) != nil
		}
		return nil
	})
	if complete {
		return nil
	}
	return db.Update(func(tx *bolt.Tx) error {
		for _, name := range append([]string{bucketMeta, bucketMessages}, memdb.DurableTables...) {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
		}
		if fresh {
			return tx.Bucket([]byte(bucketMeta)).Put([]byte(keyFormat), []byte(strconv.Itoa(Format)))
		}
		return nil
	})
}

// Path is the file's path.
func (l *Log) Path() string { return l.path }

// Load reads every row of the file into mem and makes l mem's log for the
// durable tables (memdb.DurableTables): from then on mem's writes to them
// are l's commits. Call it once, on a fresh store, before it is shared.
func (l *Log) Load(mem *memdb.Store) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%s: %w: %v", l.path, ErrCorrupt, p)
		}
	}()
	err = l.db.View(func(tx *bolt.Tx) error {
		msgs := tx.Bucket([]byte(bucketMessages))
		for _, table := range memdb.DurableTables {
			b := tx.Bucket([]byte(table))
			err := mem.Apply(func(w *memdb.Writer) error {
				return b.ForEach(func(k, v []byte) error {
					rec, err := decode(table, k, v)
					if err != nil {
						return err
					}
					if t, ok := rec.(*memdb.Thread); ok {
						if t.Messages, err = readMessages(msgs, t.ID); err != nil {
							return err
						}
					}
					if err := w.Put(table, rec); err != nil {
						return fmt.Errorf("%w: %s/%s: %w", ErrCorrupt, table, k, err)
					}
					return w.SetRevision(table, string(k), 1)
				})
			})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w", l.path, err)
	}
	l.mu.Lock()
	l.rev, l.applied, l.mem = 1, 1, mem
	l.mu.Unlock()
	mem.SetLog(l, memdb.DurableTables...)
	go l.flush()
	return nil
}

func decode(table string, k, v []byte) (any, error) {
	rec, err := memdb.NewRecord(table)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(v, rec); err != nil {
		return nil, fmt.Errorf("%w: %s/%s: %w", ErrCorrupt, table, k, err)
	}
	if id := memdb.RowID(rec); id != string(k) {
		return nil, fmt.Errorf("%w: %s/%s holds the record of %q", ErrCorrupt, table, k, id)
	}
	return rec, nil
}

// messagePrefix is the key prefix of thread's messages.
func messagePrefix(thread string) []byte {
	return append([]byte(thread), 0)
}

func messageKey(thread string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64(messagePrefix(thread), seq)
}

// readMessages returns thread's messages in sequence order.
func readMessages(b *bolt.Bucket, thread string) ([]memdb.Message, error) {
	prefix := messagePrefix(thread)
	var out []memdb.Message
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, v = c.Next() {
		var m memdb.Message
		if err := json.Unmarshal(v, &m); err != nil || len(k) != len(prefix)+8 || binary.BigEndian.Uint64(k[len(prefix):]) != m.Seq {
			return nil, fmt.Errorf("%w: message %q of thread %s", ErrCorrupt, k, thread)
		}
		out = append(out, m)
	}
	return out, nil
}

// TestHookCommit, when set, is called at the start of every Commit, on the
// committing goroutine: the tests check through it that no actor waits
// for a sync in its Receive. For testing.
var TestHookCommit func()

// Commit implements memdb.Log: tx is refused with memdb.ErrStale if a row
// it read changed since (once the change is applied, so that the writer
// reads it), and otherwise returns once tx is synced to the file and
// applied to the store.
func (l *Log) Commit(tx *memdb.Tx) error {
	if TestHookCommit != nil {
		TestHookCommit()
	}
	start := time.Now()
	l.mu.Lock()
	if err := l.unusable(); err != nil {
		l.mu.Unlock()
		return err
	}
	for _, r := range tx.Rows {
		k := rowKey(r.Table, r.ID)
		p, queued := l.pending[k]
		cur := p.rev
		if !queued {
			var err error
			if cur, err = l.mem.Revision(r.Table, r.ID); err != nil {
				l.mu.Unlock()
				return err
			}
		}
		if cur != r.Revision {
			for queued && l.applied < p.commit && l.unusable() == nil {
				l.cond.Wait()
			}
			l.mu.Unlock()
			return fmt.Errorf("durable: %s/%s: %w", r.Table, r.ID, memdb.ErrStale)
		}
	}
	l.rev++
	c := &commit{tx: tx, rev: l.rev, err: make(chan error, 1)}
	for _, w := range tx.Writes {
		p := pendingRow{rev: c.rev, commit: c.rev}
		if w.After == nil {
			p.rev = 0
		}
		l.pending[rowKey(w.Table, w.ID)] = p
	}
	l.queue = append(l.queue, c)
	l.mu.Unlock()
	select {
	case l.kick <- struct{}{}:
	default:
	}
	err := <-c.err
	if l.opts.Observe != nil {
		l.opts.Observe(time.Since(start))
	}
	return err
}

// unusable is why nothing more can be committed, or nil. l.mu is held.
func (l *Log) unusable() error {
	switch {
	case l.broken != nil:
		return fmt.Errorf("durable: %s: an earlier write failed, nothing more is written: %w", l.path, l.broken)
	case l.closed:
		return ErrClosed
	}
	return nil
}

func rowKey(table, id string) string { return table + "/" + id }

// flush is the one goroutine that writes: every commit queued since its
// last round in one bbolt transaction (one sync), then applied to the
// store in order, then answered.
func (l *Log) flush() {
	defer close(l.done)
	for {
		select {
		case <-l.kick:
		case <-l.stop:
			l.round() // whatever was queued before Close
			return
		}
		l.round()
	}
}

func (l *Log) round() {
	var hookErr error
	if l.beforeRound != nil {
		hookErr = l.beforeRound()
	}
	l.mu.Lock()
	batch := l.queue
	l.queue = nil
	broken := l.broken
	l.mu.Unlock()
	if len(batch) == 0 {
		return
	}
	l.rounds.Add(1)
	err := broken
	if err == nil {
		err = hookErr
	}
	if err == nil {
		err = l.write(batch)
		if err == nil {
			err = l.apply(batch)
		}
	}
	l.mu.Lock()
	if err != nil {
		if l.broken == nil {
			l.broken = err
			l.isBroken.Store(true)
		}
		err = l.unusable()
	} else {
		for _, c := range batch {
			for _, w := range c.tx.Writes {
				k := rowKey(w.Table, w.ID)
				if l.pending[k].commit == c.rev {
					delete(l.pending, k)
				}
			}
		}
		l.applied = batch[len(batch)-1].rev
	}
	l.cond.Broadcast()
	l.mu.Unlock()
	for _, c := range batch {
		c.err <- err
	}
}

// write puts batch's rows in one synced bbolt transaction.
func (l *Log) write(batch []*commit) error {
	return l.db.Update(func(tx *bolt.Tx) error {
		for _, c := range batch {
			for _, w := range c.tx.Writes {
				if err := putRow(tx, w); err != nil {
					return fmt.Errorf("write %s/%s: %w", w.Table, w.ID, err)
				}
			}
		}
		return nil
	})
}

// apply applies batch to the store in one write, with each row's new
// revision.
func (l *Log) apply(batch []*commit) error {
	return l.mem.Apply(func(w *memdb.Writer) error {
		for _, c := range batch {
			for _, rw := range c.tx.Writes {
				if rw.After == nil {
					if err := w.Delete(rw.Table, rw.ID); err != nil && !errors.Is(err, memdb.ErrNotFound) {
						return err
					}
					if err := w.SetRevision(rw.Table, rw.ID, 0); err != nil {
						return err
					}
					continue
				}
				if err := w.Put(rw.Table, rw.After); err != nil {
					return err
				}
				if err := w.SetRevision(rw.Table, rw.ID, c.rev); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// putRow writes one row's change; a thread's messages are rows of their
// own, and only those that came or went are written.
func putRow(tx *bolt.Tx, w memdb.RowWrite) error {
	b := tx.Bucket([]byte(w.Table))
	if b == nil {
		return fmt.Errorf("no bucket %s", w.Table)
	}
	if w.Table != memdb.TableThreads {
		if w.After == nil {
			return b.Delete([]byte(w.ID))
		}
		v, err := json.Marshal(w.After)
		if err != nil {
			return err
		}
		return b.Put([]byte(w.ID), v)
	}
	msgs := tx.Bucket([]byte(bucketMessages))
	before, _ := w.Before.(*memdb.Thread)
	after, _ := w.After.(*memdb.Thread)
	if after == nil {
		if err := b.Delete([]byte(w.ID)); err != nil {
			return err
		}
		return deleteMessages(msgs, w.ID)
	}
	row := *after
	row.Messages = nil
	v, err := json.Marshal(&row)
	if err != nil {
		return err
	}
	if err := b.Put([]byte(w.ID), v); err != nil {
		return err
	}
	var old []memdb.Message
	if before != nil {
		old = before.Messages
	}
	return diffMessages(msgs, w.ID, old, after.Messages)
}

// diffMessages writes the messages of after that before lacks and deletes
// those before had that after dropped. Both are in sequence order, and a
// message never changes once posted, so a merge by sequence number finds
// both.
func diffMessages(b *bolt.Bucket, thread string, before, after []memdb.Message) error {
	i, j := 0, 0
	for i < len(before) || j < len(after) {
		switch {
		case j == len(after) || (i < len(before) && before[i].Seq < after[j].Seq):
			if err := b.Delete(messageKey(thread, before[i].Seq)); err != nil {
				return err
			}
			i++
		case i == len(before) || after[j].Seq < before[i].Seq:
			v, err := json.Marshal(&after[j])
			if err != nil {
				return err
			}
			if err := b.Put(messageKey(thread, after[j].Seq), v); err != nil {
				return err
			}
			j++
		default: // the same message
			i++
			j++
		}
	}
	return nil
}

func deleteMessages(b *bolt.Bucket, thread string) error {
	prefix := messagePrefix(thread)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}

// Broken reports whether a write failed: from then on nothing more is
// written, and the runtime no longer serves. One atomic load.
func (l *Log) Broken() bool { return l.isBroken.Load() }

// Backup writes a consistent copy of the file to w (a bbolt read
// transaction: writers go on meanwhile) and returns its size.
func (l *Log) Backup(w io.Writer) (int64, error) {
	var n int64
	err := l.db.View(func(tx *bolt.Tx) error {
		var err error
		n, err = tx.WriteTo(w)
		return err
	})
	return n, err
}

// Rounds counts the bbolt transactions (syncs) that wrote commits.
func (l *Log) Rounds() uint64 { return l.rounds.Load() }

// Size is the file's size in bytes.
func (l *Log) Size() int64 {
	var n int64
	_ = l.db.View(func(tx *bolt.Tx) error {
		n = tx.Size()
		return nil
	})
	return n
}

// Close writes what was queued, stops the flusher and closes the file
// (releasing its lock). Commits after Close fail with ErrClosed.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	loaded := l.mem != nil
	l.cond.Broadcast()
	l.mu.Unlock()
	if loaded {
		close(l.stop)
		<-l.done
	}
	return l.db.Close()
}

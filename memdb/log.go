package memdb

import (
	"errors"
	"fmt"

	gomemdb "github.com/hashicorp/go-memdb"
)

// ErrStale is returned by a write of a store with a [Log] when a row the
// transaction read or wrote changed in the log since this store applied
// it: another writer got there first, and nothing was written.
var ErrStale = errors.New("memdb: a row changed since it was read")

// tableRevisions holds, for a store with a [Log], the log revision of every
// replicated row the store holds (its etcd mod revision). Internal: no
// reader outside the package sees it.
const tableRevisions = "revisions"

// Replicated reports whether table's rows are kept in the [Log] of a store
// that has one: threads, credentials and client grants, which every node
// reads. Provider instances, provider sessions and MCP sessions are not:
// they are a node's own processes and connections, and live and die with
// it (each node registers its own instances).
func Replicated(table string) bool {
	switch table {
	case TableThreads, TableCredentials, TableClientGrants:
		return true
	}
	return false
}

// DurableTables are the tables a single node's durable store keeps (SPEC
// §3.8): the replicated ones, and the provider instances, which on one
// node outlive the process as its configuration. Provider sessions and
// MCP sessions are processes and connections: they die with it.
var DurableTables = []string{TableThreads, TableCredentials, TableClientGrants, TableInstances}

// NewRecord returns a pointer to a zero record of a table a [Log] can
// keep (the replicated ones and the instances), for decoding a row of the
// log into.
func NewRecord(table string) (any, error) {
	switch table {
	case TableThreads:
		return new(Thread), nil
	case TableCredentials:
		return new(Credential), nil
	case TableClientGrants:
		return new(ClientGrant), nil
	case TableInstances:
		return new(Instance), nil
	}
	return nil, fmt.Errorf("memdb: table %q is not kept in a log", table)
}

// Log is where a store's replicated tables live when the runtime runs on
// several nodes (SPEC §5d): the store is then a replica, changed only by
// [Store.Apply] as the log's changes arrive, and [Store.Write] sends each
// transaction to the log instead of committing it.
type Log interface {
	// Commit writes tx to the log if no row it read or wrote changed since
	// the revisions it names ([ErrStale] otherwise), and returns once this
	// store has applied the commit, so that the writer reads its write.
	Commit(tx *Tx) error
}

// Tx is one write transaction as a [Log] commits it.
type Tx struct {
	// Rows are the replicated rows the transaction read or wrote, each
	// once, with the log revision the store had applied for it (0: the
	// row was absent).
	Rows []RowRead
	// Writes are its changes, in order, one per row.
	Writes []RowWrite
}

// RowRead names a row and the revision a transaction saw it at.
type RowRead struct {
	Table, ID string
	Revision  int64
}

// RowWrite is a row's change: After is the new record, nil for a delete;
// Before is the row as the transaction found it, nil when absent.
type RowWrite struct {
	Table, ID     string
	Before, After any
}

// revision is one row of tableRevisions.
type revision struct {
	ID  string // table + "/" + row id
	Rev int64
}

func revisionsTableSchema() *gomemdb.TableSchema {
	return &gomemdb.TableSchema{
		Name: tableRevisions,
		Indexes: map[string]*gomemdb.IndexSchema{
			// id: the revision a write transaction compares (Store.Write
			// with a Log) and the one Apply sets.
			IndexID: idIndex(),
		},
	}
}

func revisionKey(table, id string) string { return table + "/" + id }

// SetLog makes s a replica of l: from then on its writes to tables go
// to l — the replicated tables when none are named. Call it once, before
// the store is shared.
func (s *Store) SetLog(l Log, tables ...string) {
	if len(tables) == 0 {
		s.log, s.logged = l, Replicated
		return
	}
	set := map[string]bool{}
	for _, t := range tables {
		set[t] = true
	}
	s.log, s.logged = l, func(table string) bool { return set[table] }
}

// Logged reports whether the store's [Log] keeps table (false without a
// log).
func (s *Store) Logged(table string) bool { return s.log != nil && s.logged(table) }

// Revision is the log revision of a row as the store has applied it (0:
// absent, or not a logged row), for a [Log] that checks a transaction's
// reads against the store itself.
func (s *Store) Revision(table, id string) (int64, error) {
	raw, err := s.db.Txn(false).First(tableRevisions, IndexID, revisionKey(table, id))
	if err != nil {
		return 0, fmt.Errorf("read revision of %s/%s: %w", table, id, err)
	}
	if raw == nil {
		return 0, nil
	}
	return raw.(*revision).Rev, nil
}

// readSet records the logged rows a write transaction reads.
type readSet struct {
	logged func(table string) bool
	seen   map[string]RowRead
	keys   []string // in first-read order
}

func (rs *readSet) add(table, id string) {
	if rs == nil || !rs.logged(table) || id == "" {
		return
	}
	k := revisionKey(table, id)
	if _, ok := rs.seen[k]; ok {
		return
	}
	if rs.seen == nil {
		rs.seen = map[string]RowRead{}
	}
	rs.seen[k] = RowRead{Table: table, ID: id}
	rs.keys = append(rs.keys, k)
}

// RowID is a record's id ("" for a value that is not a record).
func RowID(obj any) string {
	switch o := obj.(type) {
	case *Thread:
		return o.ID
	case *Instance:
		return o.ID
	case *ProviderSession:
		return o.ID
	case *Credential:
		return o.ID
	case *ClientGrant:
		return o.ID
	case *MCPSession:
		return o.ID
	}
	return ""
}

// Pending is a write transaction staged against a store with a [Log]
// ([Store.Stage]) whose commit through the log is still to be made.
type Pending struct {
	s  *Store
	tx *Tx
}

// Commit commits the transaction through the store's [Log], as
// [Store.Write] would have: conditioned on every replicated row it read or
// wrote being unchanged since ([ErrStale] otherwise), and returning once
// the store has applied it. It waits for the log's round trip (an etcd
// transaction, a file's sync): call it off an actor's Receive.
func (p *Pending) Commit() error { return p.s.log.Commit(p.tx) }

// Stage runs fn in a write transaction as [Store.Write] does, but leaves
// the commit through the store's [Log] to the caller: it returns the
// staged transaction, for [Pending.Commit]. Without a log, or when fn
// changed only tables the log does not keep (or nothing), the transaction
// is committed here, as Write commits it, and Stage returns nil. fn's
// error is returned, and nothing is staged or written.
func (s *Store) Stage(fn func(w *Writer) error) (*Pending, error) {
	if s.log == nil {
		return nil, s.writeLocal(fn)
	}
	tx, err := s.stageViaLog(fn)
	if err != nil || tx == nil {
		return nil, err
	}
	return &Pending{s: s, tx: tx}, nil
}

// stageViaLog runs fn in a write transaction whose changes go to the log:
// the transaction is built against the store as it stands, then
// abandoned, and returned for a commit through the log outside the
// store's write lock (the applier needs it to apply the commit the
// committer waits for). A transaction that changes only tables the log
// does not keep commits here, as without a log, and returns nil; one that
// changes both kinds is refused.
func (s *Store) stageViaLog(fn func(w *Writer) error) (*Tx, error) {
	txn := s.db.Txn(true)
	defer txn.Abort()
	txn.TrackChanges()
	rs := &readSet{logged: s.logged}
	w := &Writer{Reader: Reader{txn: txn, reads: rs}}
	if err := fn(w); err != nil {
		return nil, err
	}
	changes := txn.Changes()
	tx := &Tx{}
	local := 0
	index := map[string]int{} // row → its write in tx.Writes
	for _, ch := range changes {
		if !s.logged(ch.Table) {
			local++
			continue
		}
		obj := ch.After
		if obj == nil {
			obj = ch.Before
		}
		id := RowID(obj)
		k := revisionKey(ch.Table, id)
		rs.add(ch.Table, id)
		if i, ok := index[k]; ok {
			tx.Writes[i].After = ch.After
			continue
		}
		index[k] = len(tx.Writes)
		tx.Writes = append(tx.Writes, RowWrite{Table: ch.Table, ID: id, Before: ch.Before, After: ch.After})
	}
	switch {
	case len(tx.Writes) == 0:
		txn.Commit() // local tables only (or nothing)
		return nil, nil
	case local > 0:
		return nil, errors.New("memdb: a transaction changes both replicated and node-local tables")
	}
	// The revisions the transaction saw: the committed ones, since the
	// transaction never writes this table.
	for _, k := range rs.keys {
		r := rs.seen[k]
		raw, err := txn.First(tableRevisions, IndexID, k)
		if err != nil {
			return nil, fmt.Errorf("read revision of %s: %w", k, err)
		}
		if raw != nil {
			r.Revision = raw.(*revision).Rev
		}
		tx.Rows = append(tx.Rows, r)
	}
	return tx, nil
}

// Apply writes changes that come from the store's [Log] (the log's
// applier is its one caller): fn's writes are committed as [Store.Write]
// commits without a log, and the commit hooks run. Each row fn puts or
// deletes should record its log revision with [Writer.SetRevision].
func (s *Store) Apply(fn func(w *Writer) error) error { return s.writeLocal(fn) }

// SetRevision records the log revision of a replicated row the
// transaction wrote; a revision of 0 forgets it (the row was deleted). For
// [Store.Apply].
func (w *Writer) SetRevision(table, id string, rev int64) error {
	k := revisionKey(table, id)
	if rev == 0 {
		if err := w.txn.Delete(tableRevisions, &revision{ID: k}); err != nil && !errors.Is(err, gomemdb.ErrNotFound) {
			return fmt.Errorf("forget revision of %s: %w", k, err)
		}
		return nil
	}
	if err := w.txn.Insert(tableRevisions, &revision{ID: k, Rev: rev}); err != nil {
		return fmt.Errorf("write revision of %s: %w", k, err)
	}
	return nil
}

// Put inserts or replaces a record of a replicated table, as the typed Put
// methods do. For [Store.Apply].
func (w *Writer) Put(table string, rec any) error {
	switch r := rec.(type) {
	case *Thread:
		return w.PutThread(r)
	case *Credential:
		return w.PutCredential(r)
	case *ClientGrant:
		return w.PutClientGrant(r)
	case *Instance:
		return w.PutInstance(r)
	}
	return fmt.Errorf("memdb: put %T into %q: not a record a log keeps", rec, table)
}

// Delete removes a row of a table a log can keep by id; a missing row is
// [ErrNotFound]. For [Store.Apply].
func (w *Writer) Delete(table, id string) error {
	if !Replicated(table) && table != TableInstances {
		return fmt.Errorf("memdb: delete from %q: not a table a log keeps", table)
	}
	return w.delete(table, id)
}

package memdb

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	gomemdb "github.com/hashicorp/go-memdb"
)

// ErrNotFound is returned by every typed read when no record matches.
var ErrNotFound = errors.New("memdb: not found")

// ErrConflict is returned by a write that would break a unique index.
var ErrConflict = errors.New("memdb: unique index conflict")

// Store is the runtime's state. Records returned by its reads are copies:
// they are read-only with respect to the store, and changing one changes
// nothing until it is written back by the table's owner.
type Store struct {
	db     *gomemdb.MemDB
	log    Log                     // nil: the store is the state itself
	logged func(table string) bool // the tables log keeps (SetLog)

	auth *authIndex // credentials by token hash (auth.go)

	hooksMu sync.Mutex // serializes changes to hooks
	// hooks is read on every write without a lock; nil when there are none,
	// so that writes track changes only when someone listens.
	hooks atomic.Pointer[[]*changeHook]
}

// New returns an empty store.
func New() (*Store, error) {
	db, err := gomemdb.NewMemDB(Schema())
	if err != nil {
		return nil, fmt.Errorf("build memdb schema: %w", err)
	}
	return &Store{db: db, auth: newAuthIndex()}, nil
}

// Read returns a consistent, lock-free snapshot of the whole store.
func (s *Store) Read() *Reader {
	return &Reader{txn: s.db.Txn(false)}
}

// Write runs fn in one write transaction and commits it if fn returns nil;
// otherwise nothing fn wrote is kept. Write transactions are serialized, so
// what fn reads through w is the latest committed state and cannot change
// before the commit.
//
// With a [Log] (several nodes), fn's changes to replicated tables are
// committed through the log instead, conditioned on every replicated row
// fn read or wrote being unchanged since ([ErrStale] otherwise), and
// Write returns once the store has applied them.
//
// Write waits for the log's round trip: an actor stages its write with
// [Store.Stage] instead and commits it off its Receive.
func (s *Store) Write(fn func(w *Writer) error) error {
	p, err := s.Stage(fn)
	if err != nil || p == nil {
		return err
	}
	return p.Commit()
}

func (s *Store) writeLocal(fn func(w *Writer) error) error {
	txn := s.db.Txn(true)
	defer txn.Abort()
	hooks := s.hooks.Load()
	txn.TrackChanges() // for the auth index, and the hooks
	w := &Writer{Reader: Reader{txn: txn}}
	if err := fn(w); err != nil {
		return err
	}
	changes := txn.Changes()
	s.auth.apply(changes) // under the write lock, before the commit: in commit order
	txn.Commit()
	if hooks != nil {
		var creds []*Credential
		var all []Change
		for _, h := range *hooks {
			switch {
			case h.creds != nil:
				if creds == nil {
					creds = credentialChanges(changes)
				}
				if len(creds) > 0 {
					h.creds(creds)
				}
			case h.all != nil:
				if all == nil {
					all = tableChanges(changes)
				}
				if len(all) > 0 {
					h.all(all)
				}
			}
		}
	}
	return nil
}

// PutMCPSession writes an MCP session's ownership record in a transaction
// of its own, as Write(w.PutMCPSession) would, for less: the session
// actor's one write as a session starts, on every initialize. It tracks no
// changes, since no record of this table is a credential. The store keeps
// m itself: the caller must not change it afterwards.
func (s *Store) PutMCPSession(m *MCPSession) error {
	txn := s.db.Txn(true)
	defer txn.Abort()
	if err := txn.Insert(TableMCPSessions, m); err != nil {
		return fmt.Errorf("write %s: %w", TableMCPSessions, err)
	}
	txn.Commit()
	return nil
}

// DeleteMCPSession removes an MCP session's ownership record in a
// transaction of its own, as Write(w.DeleteMCPSession) would, for less: by
// its id alone, without reading the record first, and tracking no changes.
// A missing record is [ErrNotFound].
func (s *Store) DeleteMCPSession(id string) error {
	if id == "" {
		return ErrNotFound // no record has it; memdb calls it a missing index
	}
	txn := s.db.Txn(true)
	defer txn.Abort()
	switch err := txn.Delete(TableMCPSessions, &MCPSession{ID: id}); {
	case errors.Is(err, gomemdb.ErrNotFound):
		return ErrNotFound
	case err != nil:
		return fmt.Errorf("delete %s %q: %w", TableMCPSessions, id, err)
	}
	txn.Commit()
	return nil
}

// changeHook is one OnCredentialsChanged or OnChanges registration: one
// of its functions is set.
type changeHook struct {
	creds func([]*Credential)
	all   func([]Change)
}

// Change is one row a committed write inserted, updated or deleted: Before
// is nil for an insert, After nil for a delete. Both are the store's own
// records (*Thread, *Credential, …), shared and not to be modified.
type Change struct {
	Table  string
	Before any
	After  any
}

// OnCredentialsChanged registers fn, called after every committed write
// that inserted, updated or deleted credentials, with those rows as they
// are after the write (a deleted row as it was). It runs on the writer's
// goroutine once the write is visible to readers, so it must be quick and
// must not write to the store; the rows are shared and must not be
// modified. Calls for different writes may run concurrently. The returned
// function unregisters fn.
func (s *Store) OnCredentialsChanged(fn func([]*Credential)) (remove func()) {
	return s.addHook(&changeHook{creds: fn})
}

// OnChanges registers fn, called after every committed write with the
// rows it changed in the replicated tables (threads, instances,
// credentials, client grants; the MCP session and provider session tables
// are the node's own and not reported), in the order the write made them.
// A write applied from the [Log] — another node's, or the state file's —
// is reported on every node that applies it. The rules of
// [Store.OnCredentialsChanged] hold: quick, no writes, rows not modified,
// calls for different writes possibly concurrent.
func (s *Store) OnChanges(fn func([]Change)) (remove func()) {
	return s.addHook(&changeHook{all: fn})
}

func (s *Store) addHook(h *changeHook) (remove func()) {
	s.hooksMu.Lock()
	defer s.hooksMu.Unlock()
	s.setHooksLocked(append(s.currentHooksLocked(), h))
	return func() {
		s.hooksMu.Lock()
		defer s.hooksMu.Unlock()
		s.setHooksLocked(slices.DeleteFunc(s.currentHooksLocked(), func(x *changeHook) bool { return x == h }))
	}
}

// currentHooksLocked returns a copy of the hooks, safe to modify.
func (s *Store) currentHooksLocked() []*changeHook {
	if p := s.hooks.Load(); p != nil {
		return slices.Clone(*p)
	}
	return nil
}

func (s *Store) setHooksLocked(hooks []*changeHook) {
	if len(hooks) == 0 {
		s.hooks.Store(nil) // writes stop tracking changes
		return
	}
	s.hooks.Store(&hooks)
}

// credentialChanges picks the credential rows out of a transaction's
// changes.
func credentialChanges(changes gomemdb.Changes) []*Credential {
	var out []*Credential
	for _, c := range changes {
		if c.Table != TableCredentials {
			continue
		}
		obj := c.After
		if obj == nil {
			obj = c.Before
		}
		if cred, ok := obj.(*Credential); ok {
			out = append(out, cred)
		}
	}
	return out
}

// tableChanges keeps a transaction's changes to the reported tables.
func tableChanges(changes gomemdb.Changes) []Change {
	out := make([]Change, 0, len(changes))
	for _, c := range changes {
		switch c.Table {
		case TableThreads, TableInstances, TableCredentials, TableClientGrants:
			out = append(out, Change{Table: c.Table, Before: c.Before, After: c.After})
		}
	}
	return out
}

// Reader answers typed queries against one snapshot (or, inside
// [Store.Write], against the transaction being written).
type Reader struct {
	txn   *gomemdb.Txn
	reads *readSet // the rows a write transaction through a Log read; nil otherwise
}

// cloner is a record type with a deep copy.
type cloner[T any] interface {
	*T
	Clone() *T
}

func first[T any, P cloner[T]](r *Reader, table, index string, args ...any) (*T, error) {
	raw, err := r.txn.First(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("read %s by %s: %w", table, index, err)
	}
	if raw == nil {
		if r.reads != nil && index == IndexID && len(args) == 1 {
			id, _ := args[0].(string)
			r.reads.add(table, id) // an absence is read too
		}
		return nil, ErrNotFound
	}
	if r.reads != nil {
		r.reads.add(table, RowID(raw))
	}
	return P(raw.(*T)).Clone(), nil
}

func list[T any, P cloner[T]](r *Reader, table, index string, args ...any) ([]*T, error) {
	it, err := r.txn.Get(table, index, args...)
	if err != nil {
		return nil, fmt.Errorf("list %s by %s: %w", table, index, err)
	}
	var out []*T
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if r.reads != nil {
			r.reads.add(table, RowID(raw))
		}
		out = append(out, P(raw.(*T)).Clone())
	}
	return out, nil
}

func count(r *Reader, table, index string, args ...any) (int, error) {
	it, err := r.txn.Get(table, index, args...)
	if err != nil {
		return 0, fmt.Errorf("count %s by %s: %w", table, index, err)
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}

// Thread returns the thread with id.
func (r *Reader) Thread(id string) (*Thread, error) {
	return first[Thread](r, TableThreads, IndexID, id)
}

// Threads returns every thread, ordered by id.
func (r *Reader) Threads() ([]*Thread, error) {
	return list[Thread](r, TableThreads, IndexID)
}

// ThreadsAfter returns at most limit threads whose id sorts after after
// ("" for the first), ordered by id: one page of a listing.
func (r *Reader) ThreadsAfter(after string, limit int) ([]*Thread, error) {
	it, err := r.txn.LowerBound(TableThreads, IndexID, after)
	if err != nil {
		return nil, fmt.Errorf("list %s from %q: %w", TableThreads, after, err)
	}
	var out []*Thread
	for raw := it.Next(); raw != nil && len(out) < limit; raw = it.Next() {
		if t := raw.(*Thread); t.ID != after {
			out = append(out, t.Clone())
		}
	}
	return out, nil
}

// Instance returns the provider instance with id.
func (r *Reader) Instance(id string) (*Instance, error) {
	return first[Instance](r, TableInstances, IndexID, id)
}

// Instances returns every provider instance, ordered by id.
func (r *Reader) Instances() ([]*Instance, error) {
	return list[Instance](r, TableInstances, IndexID)
}

// ProviderSession returns the provider session with id.
func (r *Reader) ProviderSession(id string) (*ProviderSession, error) {
	return first[ProviderSession](r, TableProviderSessions, IndexID, id)
}

// ProviderSessionsByInstance returns every provider session of instance.
func (r *Reader) ProviderSessionsByInstance(instance string) ([]*ProviderSession, error) {
	return list[ProviderSession](r, TableProviderSessions, IndexInstance, instance)
}

// ProviderSessionsByState returns the provider sessions in state.
func (r *Reader) ProviderSessionsByState(state string) ([]*ProviderSession, error) {
	return list[ProviderSession](r, TableProviderSessions, IndexState, state)
}

// Credential returns the credential with id.
func (r *Reader) Credential(id string) (*Credential, error) {
	return first[Credential](r, TableCredentials, IndexID, id)
}

// CredentialByTokenHash returns the credential whose token hashes to hash
// (hex SHA-256). It is the only read authentication makes.
func (r *Reader) CredentialByTokenHash(hash string) (*Credential, error) {
	return first[Credential](r, TableCredentials, IndexTokenHash, hash)
}

// CredentialViewByTokenHash is CredentialByTokenHash without the copy: the
// store's own record, which its caller must not change (records are never
// changed in place; a write puts a new one). It is authentication's read,
// made on every request.
func (r *Reader) CredentialViewByTokenHash(hash string) (*Credential, error) {
	raw, err := r.txn.First(TableCredentials, IndexTokenHash, hash)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read %s by %s: %w", TableCredentials, IndexTokenHash, err)
	case raw == nil:
		return nil, ErrNotFound
	}
	if r.reads != nil {
		r.reads.add(TableCredentials, RowID(raw))
	}
	return raw.(*Credential), nil
}

// CredentialsByThread returns every provider credential of thread, any state.
func (r *Reader) CredentialsByThread(thread string) ([]*Credential, error) {
	return list[Credential](r, TableCredentials, IndexThread, thread)
}

// CredentialsByThreadInstance returns the credentials of the pair (thread, instance), any state.
func (r *Reader) CredentialsByThreadInstance(thread, instance string) ([]*Credential, error) {
	return list[Credential](r, TableCredentials, IndexThreadInstance, thread, instance)
}

// CredentialsByNamespace returns the credentials of one namespace.
func (r *Reader) CredentialsByNamespace(namespace string) ([]*Credential, error) {
	return list[Credential](r, TableCredentials, IndexNamespace, namespace)
}

// EachCredentialViewByNamespace calls yield with each credential of one
// namespace until it returns false: CredentialsByNamespace without the
// copies, the store's own records, which yield must not change or keep
// (records are never changed in place; a write puts a new one). It is the
// liveness monitor's read, made as every MCP session starts.
func (r *Reader) EachCredentialViewByNamespace(namespace string, yield func(*Credential) bool) error {
	it, err := r.txn.Get(TableCredentials, IndexNamespace, namespace)
	if err != nil {
		return fmt.Errorf("list %s by %s: %w", TableCredentials, IndexNamespace, err)
	}
	for raw := it.Next(); raw != nil; raw = it.Next() {
		if r.reads != nil {
			r.reads.add(TableCredentials, RowID(raw))
		}
		if !yield(raw.(*Credential)) {
			return nil
		}
	}
	return nil
}

// CountCredentialsByState counts the credentials in state.
func (r *Reader) CountCredentialsByState(state string) (int, error) {
	return count(r, TableCredentials, IndexState, state)
}

// ClientGrant returns the client grant with id.
func (r *Reader) ClientGrant(id string) (*ClientGrant, error) {
	return first[ClientGrant](r, TableClientGrants, IndexID, id)
}

// MCPSessions returns every MCP session record, ordered by id.
// ClientGrants lists every client grant, by id.
func (r *Reader) ClientGrants() ([]*ClientGrant, error) {
	return list[ClientGrant](r, TableClientGrants, IndexID)
}

func (r *Reader) MCPSessions() ([]*MCPSession, error) {
	return list[MCPSession](r, TableMCPSessions, IndexID)
}

// Writer is a write transaction; see [Store.Write]. Its reads see its own
// uncommitted writes. Put methods store a copy of the record.
type Writer struct {
	Reader
}

func (w *Writer) insert(table string, obj any) error {
	if err := w.txn.Insert(table, obj); err != nil {
		return fmt.Errorf("write %s: %w", table, err)
	}
	return nil
}

func (w *Writer) delete(table, id string) error {
	raw, err := w.txn.First(table, IndexID, id)
	if err != nil {
		return fmt.Errorf("delete %s %q: %w", table, id, err)
	}
	if raw == nil {
		return ErrNotFound
	}
	if err := w.txn.Delete(table, raw); err != nil {
		return fmt.Errorf("delete %s %q: %w", table, id, err)
	}
	return nil
}

// PutThread inserts or replaces a thread.
func (w *Writer) PutThread(t *Thread) error { return w.insert(TableThreads, t.Clone()) }

// DeleteThread removes a thread.
func (w *Writer) DeleteThread(id string) error { return w.delete(TableThreads, id) }

// PutInstance inserts or replaces a provider instance.
func (w *Writer) PutInstance(i *Instance) error { return w.insert(TableInstances, i.Clone()) }

// PutProviderSession inserts or replaces a provider session.
func (w *Writer) PutProviderSession(p *ProviderSession) error {
	return w.insert(TableProviderSessions, p.Clone())
}

// DeleteProviderSession removes a provider session.
func (w *Writer) DeleteProviderSession(id string) error {
	return w.delete(TableProviderSessions, id)
}

// PutCredential inserts or replaces a credential. A token hash that another
// credential already has is [ErrConflict]: go-memdb does not enforce unique
// secondary indexes by itself, so this write checks.
func (w *Writer) PutCredential(c *Credential) error {
	raw, err := w.txn.First(TableCredentials, IndexTokenHash, c.TokenHash)
	if err != nil {
		return fmt.Errorf("write %s: %w", TableCredentials, err)
	}
	if raw != nil && raw.(*Credential).ID != c.ID {
		return fmt.Errorf("write credential %s: token hash: %w", c.ID, ErrConflict)
	}
	return w.insert(TableCredentials, c.Clone())
}

// PruneRevoked deletes the oldest revoked credentials among creds (by
// revocation time) so that at most keep revoked ones remain. Live ones are
// never touched.
func (w *Writer) PruneRevoked(creds []*Credential, keep int) error {
	revoked := make([]*Credential, 0, len(creds))
	for _, c := range creds {
		if c.State == StateRevoked {
			revoked = append(revoked, c)
		}
	}
	if len(revoked) <= keep {
		return nil
	}
	slices.SortFunc(revoked, func(x, y *Credential) int { return x.Revoked.Compare(y.Revoked) })
	for _, c := range revoked[:len(revoked)-keep] {
		if err := w.DeleteCredential(c.ID); err != nil {
			return err
		}
	}
	return nil
}

// DeleteCredential removes a credential row.
func (w *Writer) DeleteCredential(id string) error { return w.delete(TableCredentials, id) }

// PutClientGrant inserts or replaces a client grant.
func (w *Writer) PutClientGrant(g *ClientGrant) error {
	return w.insert(TableClientGrants, g.Clone())
}

// DeleteClientGrant removes a client grant.
func (w *Writer) DeleteClientGrant(id string) error { return w.delete(TableClientGrants, id) }

// PutMCPSession inserts or replaces an MCP session record.
func (w *Writer) PutMCPSession(m *MCPSession) error {
	return w.insert(TableMCPSessions, m.Clone())
}

// DeleteMCPSession removes an MCP session record.
func (w *Writer) DeleteMCPSession(id string) error { return w.delete(TableMCPSessions, id) }

package mcpruntime_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/memdb"
)

// logNode is a membership.Node over a shared log in memory — rows'
// revisions and one counter, the store its commits are applied to — for
// a node whose other members never act, except through rival: called
// with each commit before it is checked, it may write rows as another
// node would (applied at once).
type logNode struct {
	id      string
	members []membership.Member
	store   *memdb.Store
	gone    chan struct{}
	stopped chan struct{}

	mu      sync.Mutex // guards the fields below
	rev     int64
	revs    map[string]int64 // table/id → revision; absent: no row
	commits []*memdb.Tx      // every commit, refused ones included
	rival   func(n *logNode, tx *memdb.Tx)
}

func newLogNode(t *testing.T, id string, members ...string) *logNode {
	t.Helper()
	s, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	n := &logNode{id: id, store: s, revs: map[string]int64{}, gone: make(chan struct{}, 1), stopped: make(chan struct{})}
	for _, m := range append([]string{id}, members...) {
		n.members = append(n.members, membership.Member{ID: m})
	}
	s.SetLog(n)
	return n
}

// Join makes the node a mcpruntime.Cluster.
func (n *logNode) Join(membership.Options) (membership.Node, error) { return n, nil }

// Commit implements memdb.Log.
func (n *logNode) Commit(tx *memdb.Tx) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.commits = append(n.commits, tx)
	if n.rival != nil {
		n.rival(n, tx)
	}
	for _, r := range tx.Rows {
		if n.revs[r.Table+"/"+r.ID] != r.Revision {
			return memdb.ErrStale
		}
	}
	rows := make([]any, 0, len(tx.Writes))
	for _, w := range tx.Writes {
		if w.After == nil {
			return fmt.Errorf("logNode: delete of %s/%s: not needed by these tests", w.Table, w.ID)
		}
		rows = append(rows, w.After)
	}
	return n.putLocked(rows...)
}

// put writes rows to the log as another node (or an earlier life of the
// cluster) would.
func (n *logNode) put(t *testing.T, rows ...any) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.putLocked(rows...); err != nil {
		t.Fatal(err)
	}
}

func (n *logNode) putLocked(rows ...any) error {
	n.rev++
	return n.store.Apply(func(w *memdb.Writer) error {
		for _, rec := range rows {
			table := tableOf(rec)
			id := memdb.RowID(rec)
			n.revs[table+"/"+id] = n.rev
			if err := w.Put(table, rec); err != nil {
				return err
			}
			if err := w.SetRevision(table, id, n.rev); err != nil {
				return err
			}
		}
		return nil
	})
}

func tableOf(rec any) string {
	switch rec.(type) {
	case *memdb.Thread:
		return memdb.TableThreads
	case *memdb.Credential:
		return memdb.TableCredentials
	case *memdb.ClientGrant:
		return memdb.TableClientGrants
	}
	panic(fmt.Sprintf("tableOf(%T)", rec))
}

func (n *logNode) Store() *memdb.Store                      { return n.store }
func (n *logNode) ID() string                               { return n.id }
func (n *logNode) Secret() string                           { return "" }
func (n *logNode) ClientTLS() *tls.Config                   { return nil }
func (n *logNode) Fence() time.Duration                     { return time.Second }
func (n *logNode) WaitApplied(context.Context, int64) error { return nil }
func (n *logNode) Serving() bool                            { return true }
func (n *logNode) Status() membership.Status                { return membership.Status{Serving: true} }
func (n *logNode) Members() []membership.Member             { return n.members }
func (n *logNode) MemberGone() <-chan struct{}              { return n.gone }
func (n *logNode) ConfirmHandler() http.Handler             { return http.NotFoundHandler() }
func (n *logNode) NodeAuth(h http.Handler) http.Handler     { return http.NotFoundHandler() }
func (n *logNode) Stopped() <-chan struct{}                 { return n.stopped }
func (n *logNode) Close() error                             { return nil }

func (n *logNode) Member(id string) (membership.Member, bool) {
	for _, m := range n.members {
		if m.ID == id {
			return m, true
		}
	}
	return membership.Member{}, false
}

func (n *logNode) ThreadExists(_ context.Context, id string) bool {
	_, err := n.store.Read().Thread(id)
	return err == nil
}

// TestAdoptionInBatches: a node adopts the threads and client grants of
// a departed home, and its own from before a restart, in writes of at
// most 128 compared rows (etcd's default limit on a transaction, the
// membership's compare included), far fewer writes than rows; a batch
// that another adopter's write made stale is written again without the
// rows that adopter took, so every row ends with exactly one of them.
// Adopted threads have their live credentials revoked (node_lost) and
// their actors running here; the rival's keep theirs; a live member's
// thread is left alone.
func TestAdoptionInBatches(t *testing.T) {
	const threads, grants = 300, 130
	n := newLogNode(t, "n1", "n2")
	now := time.Now()
	var rows []any
	threadID := func(i int) string { return fmt.Sprintf("t%03d", i) }
	liveCred := func(i int) string { return fmt.Sprintf("cred_live_%03d", i) }
	for i := range threads {
		home := "gone" // a node that left
		if i%10 == 0 {
			home = "n1" // this node, before its restart
		}
		rows = append(rows, &memdb.Thread{ID: threadID(i), Home: home, Status: memdb.ThreadActive, Instance: "codex",
			Run: &memdb.Run{ID: "run", Instance: "codex", Started: now}, Created: now})
		for j, state := range []string{memdb.StateLive, memdb.StateRevoked, memdb.StateRevoked} {
			id := fmt.Sprintf("cred_%03d_%d", i, j)
			if j == 0 {
				id = liveCred(i)
			}
			rows = append(rows, &memdb.Credential{ID: id, TokenHash: "hash-" + id, Kind: memdb.KindProvider,
				Namespace: "cred:" + id, Thread: threadID(i), Instance: "codex", Issued: now, LastLive: now, State: state})
		}
	}
	rows = append(rows, &memdb.Thread{ID: "alive", Home: "n2", Status: memdb.ThreadActive, Created: now})
	for i := range grants {
		id := fmt.Sprintf("c%03d", i)
		rows = append(rows, &memdb.ClientGrant{ID: id, Home: "gone", Label: id, Access: memdb.AccessReadOnly, State: memdb.StateLive, Created: now},
			&memdb.Credential{ID: "ctok_" + id, TokenHash: "hash-ctok-" + id, Kind: memdb.KindClient,
				Namespace: "client:" + id, Client: id, Access: memdb.AccessReadOnly, Issued: now, LastLive: now, State: memdb.StateLive})
	}
	n.put(t, rows...)

	// The rival takes the first and the last row of the first thread batch
	// and of the first grant batch, as another survivor would, just before
	// that batch commits.
	stolen := map[string]bool{}
	batches := map[string]int{}
	n.rival = func(n *logNode, tx *memdb.Tx) {
		kind := tx.Writes[0].Table
		if tx.Writes[0].Before == nil {
			return // a new row: not an adoption
		}
		batches[kind]++
		if batches[kind] != 1 {
			return
		}
		var ids []string
		for _, w := range tx.Writes {
			if w.Table == kind {
				ids = append(ids, w.ID)
			}
		}
		for _, id := range []string{ids[0], ids[len(ids)-1]} {
			stolen[id] = true
			var err error
			switch kind {
			case memdb.TableThreads:
				var th *memdb.Thread
				th, err = n.store.Read().Thread(id)
				if err == nil {
					th.Home = "n2"
					err = n.putLocked(th)
				}
			case memdb.TableClientGrants:
				var g *memdb.ClientGrant
				g, err = n.store.Read().ClientGrant(id)
				if err == nil {
					g.Home = "n2"
					err = n.putLocked(g)
				}
			}
			if err != nil {
				panic(err)
			}
		}
	}

	rt, err := mcpruntime.New(mcpruntime.Config{Cluster: n, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()

	n.mu.Lock()
	adoptions := 0
	for _, tx := range n.commits {
		if len(tx.Rows)+1 > 128 {
			t.Errorf("a write compares %d rows and the membership: more than etcd's 128", len(tx.Rows))
		}
		if tx.Writes[0].Before != nil && (tx.Writes[0].Table == memdb.TableThreads || tx.Writes[0].Table == memdb.TableClientGrants) {
			adoptions++
		}
	}
	n.mu.Unlock()
	if len(stolen) != 4 {
		t.Fatalf("the rival took %d rows, want 4: the test's adoption batches are not what it expects", len(stolen))
	}
	if adoptions > (threads+grants)/10 {
		t.Errorf("adopting %d threads and %d grants took %d writes, want batches", threads, grants, adoptions)
	}

	rd := n.store.Read()
	adopted := 0
	for i := range threads {
		id := threadID(i)
		th, err := rd.Thread(id)
		if err != nil {
			t.Fatalf("thread %s: %v", id, err)
		}
		cred, err := rd.Credential(liveCred(i))
		if err != nil {
			t.Fatal(err)
		}
		if stolen[id] {
			if th.Home != "n2" || cred.State != memdb.StateLive {
				t.Errorf("thread %s that the rival took: home %q, its credential %s; want n2's, live", id, th.Home, cred.State)
			}
			continue
		}
		adopted++
		if th.Home != "n1" || th.Run != nil {
			t.Errorf("thread %s after the adoption: home %q, run %+v; want n1's, no run", id, th.Home, th.Run)
		}
		if cred.State != memdb.StateRevoked || cred.RevokeReason != "node_lost" {
			t.Errorf("thread %s's live credential after the adoption: %s (%s), want revoked (node_lost)", id, cred.State, cred.RevokeReason)
		}
	}
	if th, err := rd.Thread("alive"); err != nil || th.Home != "n2" {
		t.Errorf("the live member's thread: %+v, %v; want it left at n2", th, err)
	}
	grantsAdopted := 0
	for i := range grants {
		id := fmt.Sprintf("c%03d", i)
		g, err := rd.ClientGrant(id)
		if err != nil {
			t.Fatal(err)
		}
		want := "n1"
		if stolen[id] {
			want = "n2"
		} else {
			grantsAdopted++
		}
		if g.Home != want {
			t.Errorf("client grant %s: home %q, want %q", id, g.Home, want)
		}
		if tok, err := rd.Credential("ctok_" + id); err != nil || tok.State != memdb.StateLive {
			t.Errorf("client grant %s's token after the adoption: %+v, %v; want it live", id, tok, err)
		}
	}
	if st := rt.Stats(); st.Threads != adopted || st.Clients != grantsAdopted {
		t.Errorf("actors after the adoption: %d threads, %d grants; want %d and %d", st.Threads, st.Clients, adopted, grantsAdopted)
	}
}

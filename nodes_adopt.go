package mcpruntime

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// Adoption writes its rows in batches (SPEC §5d.5). A batch stays below
// what etcd accepts in one transaction by default — 128 compares
// (--max-txn-ops), and a commit compares every row its transaction read:
// a thread and each of its credentials, and the writer's membership — and
// 1.5 MiB (--max-request-bytes); a batch etcd refuses all the same is
// split.
const (
	adoptBatchRows  = 120       // rows one batch reads: a thread and its credentials, or a grant
	adoptBatchBytes = 512 << 10 // the estimated size of a batch's rows
	adoptInFlight   = 4         // batches committing at once
	adoptAttempts   = 8         // commits of a batch while other adopters' writes make it stale
)

// adoptLoop adopts the threads and client grants of each member that
// leaves (SPEC §5d.5), until the runtime closes; New has made the first
// pass (this node's own from before a restart, and those of members gone
// while nobody watched). It runs on the runtime's work group.
func (r *Runtime) adoptLoop() {
	defer r.work.Done()
	gone := r.cluster.MemberGone()
	for {
		select {
		case <-r.base.Done():
			return
		case <-gone:
		}
		r.adopt()
	}
}

// adoptee is a thread or client grant to adopt, as listed: its home then
// (and a grant's label and access, for its actor).
type adoptee struct {
	id, from      string
	label, access string
}

// adopt takes over every thread and client grant whose home is this node
// without an actor here, or a node that is no longer a member. The take-
// over is written in batches, each one write conditioned (as every write
// is) on its rows and on this node's membership, and taking only the
// rows that still name the home they were listed with; so of several
// nodes adopting at once exactly one wins each row, and none can while
// the old home is still a member: a thread has one writer in the cluster.
// A batch made stale by another adopter's write is written again without
// the rows that one took. Each node starts at its own point of the list
// (by its rank among the members), so that survivors adopting the same
// departed node mostly take different rows.
func (r *Runtime) adopt() {
	self := r.node()
	members := map[string]bool{self: true}
	for _, m := range r.cluster.Members() {
		members[m.ID] = true
	}
	ranked := slices.Sorted(func(yield func(string) bool) {
		for id := range members {
			if !yield(id) {
				return
			}
		}
	})
	rank := slices.Index(ranked, self)
	rd := r.store.Read()
	threads, err := rd.Threads()
	if err != nil {
		r.cfg.Logger.Error("adopt: list threads", "err", err)
		return
	}
	var tb batcher
	for _, t := range threads {
		if t.Home == "" || (t.Home != self && members[t.Home]) || r.hasThread(t.ID) {
			continue
		}
		creds, err := rd.CredentialsByThread(t.ID)
		if err != nil {
			r.cfg.Logger.Error("adopt: list credentials", "thread", t.ID, "err", err)
			return
		}
		tb.add(adoptee{id: t.ID, from: t.Home}, 1+len(creds), threadSize(t)+len(creds)*credentialSize)
	}
	now := r.cfg.Now()
	r.adoptAll(tb.rotated(rank, len(ranked)), "thread", func(w *memdb.Writer, a adoptee) (bool, error) {
		t, err := w.Thread(a.id)
		switch {
		case errors.Is(err, memdb.ErrNotFound):
			return false, nil // gone since it was listed
		case err != nil:
			return false, err
		case t.Home != a.from:
			return false, nil // another node took it
		}
		t.Home, t.Run = self, nil
		if err := w.PutThread(t); err != nil {
			return false, err
		}
		_, err = credential.RevokeThread(w, a.id, credential.ReasonNodeLost, now)
		return err == nil, err
	}, r.startAdoptedThreads)

	grants, err := rd.ClientGrants()
	if err != nil {
		r.cfg.Logger.Error("adopt: list client grants", "err", err)
		return
	}
	var gb batcher
	for _, g := range grants {
		if g.Home == "" || g.State != memdb.StateLive || (g.Home != self && members[g.Home]) || r.hasGrant(g.ID) {
			continue
		}
		gb.add(adoptee{id: g.ID, from: g.Home, label: g.Label, access: g.Access}, 1, credentialSize)
	}
	r.adoptAll(gb.rotated(rank, len(ranked)), "client grant", func(w *memdb.Writer, a adoptee) (bool, error) {
		cur, err := w.ClientGrant(a.id)
		switch {
		case errors.Is(err, memdb.ErrNotFound):
			return false, nil
		case err != nil:
			return false, err
		case cur.Home != a.from:
			return false, nil
		}
		cur.Home = self
		return true, w.PutClientGrant(cur)
	}, r.startAdoptedGrants)
}

// credentialSize is an estimate of a credential row's size in etcd (its
// JSON), and of a client grant's.
const credentialSize = 1 << 10

// threadSize is an estimate of a thread row's size in etcd (its JSON).
func threadSize(t *memdb.Thread) int {
	n := 512
	for _, m := range t.Messages {
		n += 2*len(m.Text) + len(m.Author) + len(m.Instance) + 128 // escaping at worst doubles the text
	}
	return n
}

// batcher packs adoptees into batches of at most adoptBatchRows rows and
// adoptBatchBytes (a single adoptee above either is a batch of its own).
type batcher struct {
	batches     [][]adoptee
	rows, bytes int // of the last batch
}

func (b *batcher) add(a adoptee, rows, bytes int) {
	last := len(b.batches) - 1
	if last < 0 || b.rows+rows > adoptBatchRows || b.bytes+bytes > adoptBatchBytes {
		b.batches = append(b.batches, nil)
		last++
		b.rows, b.bytes = 0, 0
	}
	b.batches[last] = append(b.batches[last], a)
	b.rows += rows
	b.bytes += bytes
}

// rotated returns the batches starting at the rank-th of k equal parts,
// wrapping around.
func (b *batcher) rotated(rank, k int) [][]adoptee {
	if len(b.batches) == 0 || k <= 0 || rank < 0 {
		return b.batches
	}
	at := rank * len(b.batches) / k
	return append(slices.Clone(b.batches[at:]), b.batches[:at]...)
}

// adoptAll writes the batches, adoptInFlight at once, each taking the
// rows take says it took, and hands each batch's taken rows to started.
func (r *Runtime) adoptAll(batches [][]adoptee, kind string, take func(*memdb.Writer, adoptee) (bool, error), started func([]adoptee)) {
	next := make(chan []adoptee)
	var wg sync.WaitGroup
	for range min(adoptInFlight, len(batches)) {
		wg.Go(func() {
			for batch := range next {
				if taken := r.adoptBatch(kind, batch, take); len(taken) > 0 {
					started(taken)
				}
			}
		})
	}
	for _, batch := range batches {
		if !r.adopting() {
			break
		}
		next <- batch
	}
	close(next)
	wg.Wait()
}

// adoptBatch writes one batch: again while it is stale (another adopter
// took some of its rows, which the next attempt finds and leaves), and
// in halves when it fails otherwise (etcd refused a transaction that
// large) — unless the write ran out of time (etcd unreachable: halves
// would only wait longer) or the node stopped adopting; a row that fails
// alone is logged and left. It returns the rows taken.
func (r *Runtime) adoptBatch(kind string, batch []adoptee, take func(*memdb.Writer, adoptee) (bool, error)) []adoptee {
	var taken []adoptee
	var err error
	for range adoptAttempts {
		err = r.store.Write(func(w *memdb.Writer) error {
			taken = taken[:0]
			for _, a := range batch {
				ok, err := take(w, a)
				if err != nil {
					return err
				}
				if ok {
					taken = append(taken, a)
				}
			}
			return nil
		})
		if !errors.Is(err, memdb.ErrStale) || !r.adopting() {
			break
		}
	}
	switch {
	case err == nil:
		return taken
	case !r.adopting():
		return nil
	case len(batch) > 1 && !errors.Is(err, context.DeadlineExceeded):
		half := len(batch) / 2
		return append(r.adoptBatch(kind, batch[:half], take), r.adoptBatch(kind, batch[half:], take)...)
	}
	r.cfg.Logger.Warn("adopt "+kind, kind, batch[0].id, "rows", len(batch), "from", batch[0].from, "err", err)
	return nil
}

// adopting reports whether adoption goes on: the runtime is open and the
// node has not stopped for good (a node that lost its membership can
// write nothing).
func (r *Runtime) adopting() bool {
	if r.base.Err() != nil {
		return false
	}
	select {
	case <-r.cluster.Stopped():
		return false
	default:
		return true
	}
}

func (r *Runtime) hasThread(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.threads[id] != nil
}

func (r *Runtime) hasGrant(id string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.clients[id] != nil
}

// startAdoptedThreads starts the actors of threads this node has just
// adopted: their rows name it the home, their runs ended and their
// credentials revoked (credential.ReasonNodeLost: the provider sessions
// of the old home are gone, whether a node left or this node restarted).
func (r *Runtime) startAdoptedThreads(taken []adoptee) {
	started := 0
	r.mu.Lock()
	for _, a := range taken {
		if r.closed {
			break
		}
		if r.threads[a.id] != nil {
			continue
		}
		pid, err := r.root.SpawnNamed(r.threadProps(a.id, ""), names.Thread(a.id))
		if err != nil {
			r.cfg.Logger.Error("start adopted thread", "thread", a.id, "err", err)
			continue
		}
		r.threads[a.id] = pid
		started++
		r.cfg.Logger.Debug("thread adopted", "thread", a.id, "from", a.from)
	}
	r.mu.Unlock()
	r.cfg.Logger.Info("threads adopted", "count", started, "first", taken[0].id, "from", taken[0].from)
}

// startAdoptedGrants starts the actors of client grants this node has
// just adopted. Their tokens stay live: a grant holds no process of its
// old node.
func (r *Runtime) startAdoptedGrants(taken []adoptee) {
	started := 0
	for _, a := range taken {
		if r.hasGrant(a.id) {
			continue
		}
		if _, err := r.spawnGrant(a.id, a.label, a.access, "adopted"); err != nil {
			if !errors.Is(err, ErrClosed) {
				r.cfg.Logger.Error("start adopted client grant", "client", a.id, "err", err)
			}
			continue
		}
		started++
		r.cfg.Logger.Debug("client grant adopted", "client", a.id, "from", a.from)
	}
	r.cfg.Logger.Info("client grants adopted", "count", started, "first", taken[0].id, "from", taken[0].from)
}

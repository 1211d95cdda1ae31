package mcpruntime

import (
	"errors"
	"fmt"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/memdb"
)

// errMoved: a thread or grant to adopt has changed hands since it was
// read; the adoption is dropped.
var errMoved = errors.New("moved since read")

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

// adopt takes over every thread and client grant whose home is this node
// without an actor here, or a node that is no longer a member. The take-
// over is one write per row, conditioned (as every write is) on the row
// and on this node's membership, so that of several nodes adopting at
// once exactly one wins each row, and none can while the old home is
// still a member: a thread has one writer in the cluster.
func (r *Runtime) adopt() {
	self := r.node()
	members := map[string]bool{self: true}
	for _, m := range r.cluster.Members() {
		members[m.ID] = true
	}
	rd := r.store.Read()
	threads, err := rd.Threads()
	if err != nil {
		r.cfg.Logger.Error("adopt: list threads", "err", err)
		return
	}
	for _, t := range threads {
		if r.base.Err() != nil {
			return
		}
		if t.Home == "" || (t.Home != self && members[t.Home]) || r.hasThread(t.ID) {
			continue
		}
		if err := r.adoptThread(t.ID, t.Home); err != nil && !errors.Is(err, errMoved) && !errors.Is(err, memdb.ErrStale) {
			r.cfg.Logger.Warn("adopt thread", "thread", t.ID, "from", t.Home, "err", err)
		}
	}
	grants, err := rd.ClientGrants()
	if err != nil {
		r.cfg.Logger.Error("adopt: list client grants", "err", err)
		return
	}
	for _, g := range grants {
		if r.base.Err() != nil {
			return
		}
		if g.Home == "" || g.State != memdb.StateLive || (g.Home != self && members[g.Home]) || r.hasGrant(g.ID) {
			continue
		}
		if err := r.adoptGrant(g); err != nil && !errors.Is(err, errMoved) && !errors.Is(err, memdb.ErrStale) {
			r.cfg.Logger.Warn("adopt client grant", "client", g.ID, "from", g.Home, "err", err)
		}
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

// adoptThread makes this node thread id's home in one write, if its home
// is still from: the provider sessions of its old home are gone (a node
// left, or this node restarted), so the write also revokes the thread's
// live credentials and ends its run (credential.ReasonNodeLost). Then it
// starts the thread's actor here.
func (r *Runtime) adoptThread(id, from string) error {
	now := r.cfg.Now()
	err := r.store.Write(func(w *memdb.Writer) error {
		t, err := w.Thread(id)
		if err != nil {
			return err
		}
		if t.Home != from {
			return errMoved
		}
		t.Home, t.Run = r.node(), nil
		if err := w.PutThread(t); err != nil {
			return err
		}
		_, err = credential.RevokeThread(w, id, credential.ReasonNodeLost, now)
		return err
	})
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed || r.threads[id] != nil {
		return nil
	}
	pid, err := r.root.SpawnNamed(r.threadProps(id, ""), names.Thread(id))
	if err != nil {
		return fmt.Errorf("start thread %s: %w", id, err)
	}
	r.threads[id] = pid
	r.cfg.Logger.Info("thread adopted", "thread", id, "from", from)
	return nil
}

// adoptGrant makes this node client grant g's home, if its home is still
// g.Home, and starts its actor here. Its tokens stay live: a grant holds
// no process of its old node.
func (r *Runtime) adoptGrant(g *memdb.ClientGrant) error {
	from := g.Home
	err := r.store.Write(func(w *memdb.Writer) error {
		cur, err := w.ClientGrant(g.ID)
		if err != nil {
			return err
		}
		if cur.Home != from {
			return errMoved
		}
		cur.Home = r.node()
		return w.PutClientGrant(cur)
	})
	if err != nil {
		return err
	}
	if _, err := r.spawnGrant(g.ID, g.Label, g.Access, "adopted"); err != nil {
		return err
	}
	r.cfg.Logger.Info("client grant adopted", "client", g.ID, "from", from)
	return nil
}

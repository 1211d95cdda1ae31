package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/memdb"
)

var _ memdb.Log = (*Node)(nil)

// TestHookCommit, when set, is called at the start of every Commit, on the
// committing goroutine: the multi-node tests (tests/cluster) check through
// it that no actor waits for a commit in its Receive. For testing.
var TestHookCommit func()

// ErrNotMember is returned by a commit of a node that is not (or no
// longer) a member of the cluster: its writes are refused.
var ErrNotMember = errors.New("replica: node is not a member")

// Commit implements [memdb.Log]: one etcd transaction, conditioned on
// every row tx read or wrote still having the revision the replica had
// applied for it (absent rows: still absent), that writes tx's rows. It
// returns once this node's replica has applied the commit; one that finds
// a row changed ([memdb.ErrStale]) returns once the replica has applied
// that change, or F has passed. A commit that changes a credential (a mint, a refresh, a
// revoke, a delete) also lists the serving nodes in the same transaction
// and returns only once each has confirmed the revision or the fence bound
// has passed (see [Node.Revoke]): from then on every serving node
// authenticates a token exactly as the commit left it — a revoked one
// nowhere, a minted one everywhere. The whole is bounded by Config.Commit.
func (n *Node) Commit(tx *memdb.Tx) error {
	if TestHookCommit != nil {
		TestHookCommit()
	}
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Commit)
	defer cancel()
	lease := n.lease.Load()
	if lease == 0 {
		return fmt.Errorf("replica: commit: %w", ErrNotMember)
	}
	cmps := make([]clientv3.Cmp, 0, len(tx.Rows)+1)
	// The fencing token: a node writes only while it is a member, so that
	// once its key is gone (and others may have taken its threads over)
	// no write of its can land.
	cmps = append(cmps, clientv3.Compare(clientv3.LeaseValue(n.servingKey), "=", lease))
	for _, r := range tx.Rows {
		key := TableKey(r.Table, r.ID)
		if r.Revision == 0 {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(key), "=", 0))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(key), "=", r.Revision))
		}
	}
	ops := make([]clientv3.Op, 0, len(tx.Writes)+1)
	barrier := false
	for _, w := range tx.Writes {
		key := TableKey(w.Table, w.ID)
		barrier = barrier || w.Table == memdb.TableCredentials
		if w.After == nil {
			ops = append(ops, clientv3.OpDelete(key))
			continue
		}
		val, err := json.Marshal(w.After)
		if err != nil {
			return fmt.Errorf("replica: commit %s: %w", key, err)
		}
		ops = append(ops, clientv3.OpPut(key, string(val)))
	}
	if barrier {
		ops = append(ops, clientv3.OpGet(ServingPrefix, clientv3.WithPrefix()))
	}
	resp, err := n.cli.Txn(ctx).If(cmps...).Then(ops...).Else(clientv3.OpGet(n.servingKey)).Commit()
	if err != nil {
		// The commit may or may not have happened: the replica will say.
		return fmt.Errorf("replica: commit: %w", err)
	}
	committedAt := time.Now() // after the answer: the fence bound is measured from here
	if !resp.Succeeded {
		if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) != 1 || kvs[0].Lease != lease {
			return fmt.Errorf("replica: commit: %w", ErrNotMember)
		}
		// Another writer got there first, at or before the answer's
		// revision: wait until this replica has it too, so that whoever was
		// told ErrStale reads the row that made it stale (a CreateThread
		// that lost the race finds the winner's thread), not the old one.
		// Bounded by F: a replica that cannot catch up within it no longer
		// serves anyway, and the writer must not wait the whole commit
		// bound for it.
		wctx, wcancel := context.WithTimeout(ctx, n.cfg.Fence)
		defer wcancel()
		if err := n.WaitApplied(wctx, resp.Header.Revision); err != nil {
			return fmt.Errorf("replica: commit: %w (own replica: %w)", memdb.ErrStale, err)
		}
		return fmt.Errorf("replica: commit: %w", memdb.ErrStale)
	}
	rev := resp.Header.Revision
	if barrier {
		serving := servingNodes(resp.Responses[len(resp.Responses)-1].GetResponseRange().Kvs)
		_, err := n.barrier(ctx, RevokeResult{Revision: rev, Revoked: true}, committedAt, serving)
		return err
	}
	if err := n.WaitApplied(ctx, rev); err != nil {
		return fmt.Errorf("replica: commit at %d: own replica: %w", rev, err)
	}
	return nil
}

package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

// ErrExists is returned by [Node.Create] when a credential with that id is
// already in etcd.
var ErrExists = errors.New("replica: credential exists")

// maxAttempts bounds Revoke's optimistic retries against concurrent writes
// of the same row.
const maxAttempts = 16

// Confirmer asks a node to confirm that its replica has applied a
// revision: the barrier of a revoke.
type Confirmer interface {
	// ConfirmApplied returns nil once node's replica has applied rev, or
	// an error if it cannot say so before ctx ends.
	ConfirmApplied(ctx context.Context, node string, rev int64) error
}

// Directory is an in-process [Confirmer] over the nodes added to it: a
// confirmation is the node's own [Node.WaitApplied]. For tests of several
// nodes in one process; across processes a node confirms over HTTP
// ([Config.Secret], [ConfirmPath]).
type Directory struct {
	mu    sync.RWMutex // guards nodes
	nodes map[string]*Node
}

// NewDirectory returns an empty directory.
func NewDirectory() *Directory { return &Directory{nodes: map[string]*Node{}} }

// Add makes n reachable by its id.
func (d *Directory) Add(n *Node) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nodes[n.ID()] = n
}

// Remove makes the node with id unreachable.
func (d *Directory) Remove(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.nodes, id)
}

// ConfirmApplied implements [Confirmer].
func (d *Directory) ConfirmApplied(ctx context.Context, node string, rev int64) error {
	d.mu.RLock()
	n := d.nodes[node]
	d.mu.RUnlock()
	if n == nil {
		return fmt.Errorf("confirm %s: unknown node", node)
	}
	return n.WaitApplied(ctx, rev)
}

// Create writes c as a new credential and returns once this node's replica
// has applied the write (read-your-writes), with the write's revision. An
// id already present is ErrExists.
func (n *Node) Create(ctx context.Context, c *memdb.Credential) (int64, error) {
	val, err := json.Marshal(c)
	if err != nil {
		return 0, fmt.Errorf("create credential %s: %w", c.ID, err)
	}
	key := CredentialsPrefix + c.ID
	resp, err := n.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
		Then(clientv3.OpPut(key, string(val))).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("create credential %s: %w", c.ID, err)
	}
	if !resp.Succeeded {
		return 0, fmt.Errorf("create credential %s: %w", c.ID, ErrExists)
	}
	rev := resp.Header.Revision
	if err := n.WaitApplied(ctx, rev); err != nil {
		return rev, fmt.Errorf("create credential %s: own replica to %d: %w", c.ID, rev, err)
	}
	return rev, nil
}

// RevokeResult says how a revoke returned.
type RevokeResult struct {
	// Revision is R: the revoke's commit, or the revision of the row's
	// earlier revocation when it was already revoked.
	Revision int64
	// Revoked is false when the row was already revoked.
	Revoked bool
	// Confirmed lists the serving nodes that confirmed R; Waited those
	// that did not, for which the revoke waited out the fence bound.
	Confirmed, Waited []string
}

// Revoke revokes the credential with id, with reason at now (a row whose
// expiry has passed records credential.ReasonExpired, as
// credential.Revoke does), and returns once no serving node's replica
// authenticates it: every node serving at the commit revision R confirmed
// R, or F(1+ρ)+margin passed since the commit answered. It also waits for
// this node's replica (read-your-writes). A row already revoked is not
// written again, but the revoke still waits for its revision, so that it
// never returns before the revoke that did write. A missing row is
// memdb.ErrNotFound.
func (n *Node) Revoke(ctx context.Context, id, reason string, now time.Time) (RevokeResult, error) {
	key := CredentialsPrefix + id
	for range maxAttempts {
		// The row and the serving list at one revision.
		read, err := n.cli.Txn(ctx).Then(clientv3.OpGet(key), clientv3.OpGet(ServingPrefix, clientv3.WithPrefix())).Commit()
		if err != nil {
			return RevokeResult{}, fmt.Errorf("revoke %s: read: %w", id, err)
		}
		readAt := time.Now()
		rows := read.Responses[0].GetResponseRange().Kvs
		if len(rows) == 0 {
			return RevokeResult{}, fmt.Errorf("revoke %s: %w", id, memdb.ErrNotFound)
		}
		var c memdb.Credential
		if err := json.Unmarshal(rows[0].Value, &c); err != nil {
			return RevokeResult{}, fmt.Errorf("revoke %s: decode: %w", id, err)
		}
		if c.State != memdb.StateLive {
			res := RevokeResult{Revision: rows[0].ModRevision}
			return n.barrier(ctx, res, readAt, servingNodes(read.Responses[1].GetResponseRange().Kvs))
		}
		if !c.LiveAt(now) {
			reason = credential.ReasonExpired
		}
		c.State, c.RevokeReason, c.Revoked = memdb.StateRevoked, reason, now
		val, err := json.Marshal(&c)
		if err != nil {
			return RevokeResult{}, fmt.Errorf("revoke %s: %w", id, err)
		}
		resp, err := n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", rows[0].ModRevision)).
			Then(clientv3.OpPut(key, string(val)), clientv3.OpGet(ServingPrefix, clientv3.WithPrefix())).
			Commit()
		if err != nil {
			// The commit may or may not have happened; the caller retries.
			return RevokeResult{}, fmt.Errorf("revoke %s: commit: %w", id, err)
		}
		committedAt := time.Now() // after the commit: the bound is measured from here
		if !resp.Succeeded {
			continue // the row changed since the read
		}
		res := RevokeResult{Revision: resp.Header.Revision, Revoked: true}
		return n.barrier(ctx, res, committedAt, servingNodes(resp.Responses[1].GetResponseRange().Kvs))
	}
	return RevokeResult{}, fmt.Errorf("revoke %s: row kept changing after %d attempts", id, maxAttempts)
}

// servingNodes are the node ids of serving keys.
func servingNodes(kvs []*mvccpb.KeyValue) []string {
	var out []string
	for _, kv := range kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), ServingPrefix))
	}
	slices.Sort(out)
	return out
}

// barrier waits until every node in serving confirmed res.Revision, or,
// for those that did not, until F(1+ρ)+margin after since (a time taken
// after revision R was committed), and until this node's replica applied
// it.
func (n *Node) barrier(ctx context.Context, res RevokeResult, since time.Time, serving []string) (RevokeResult, error) {
	rev := res.Revision
	bound := time.Duration(float64(n.cfg.Fence)*(1+n.cfg.Drift)) + n.cfg.Margin
	bctx, cancel := context.WithDeadline(ctx, since.Add(bound))
	defer cancel()

	ok := make([]bool, len(serving))
	var wg sync.WaitGroup
	for i, node := range serving {
		if node == n.cfg.Node {
			ok[i] = n.WaitApplied(bctx, rev) == nil
			continue
		}
		if n.cfg.Confirmer == nil {
			continue
		}
		wg.Go(func() { ok[i] = n.cfg.Confirmer.ConfirmApplied(bctx, node, rev) == nil })
	}
	wg.Wait()
	for i, node := range serving {
		if ok[i] {
			res.Confirmed = append(res.Confirmed, node)
		} else {
			res.Waited = append(res.Waited, node)
		}
	}
	if len(res.Waited) > 0 {
		<-bctx.Done()
		if ctx.Err() != nil {
			return res, fmt.Errorf("revoke at %d: fence bound not reached: %w", rev, ctx.Err())
		}
	}
	if err := n.WaitApplied(ctx, rev); err != nil {
		return res, fmt.Errorf("revoke at %d: own replica: %w", rev, err)
	}
	return res, nil
}

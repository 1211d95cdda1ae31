package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A node id held by another registration (SPEC §5d.8): a live member
// with the same id, or this node's own previous process that crashed and
// whose lease has not lapsed yet. Both hold the serving key under a lease
// that is not ours, and nothing in etcd tells them apart but time: a
// crashed process renews nothing, so its key goes within its lease's TTL;
// a live member's key never goes. So a starting node waits for the key to
// go, at most the holder's TTL (1 + ρ) plus TakeoverGrace from the moment
// it first saw it, and refuses to start (ErrNodeInUse) if it is still
// there. It never takes a key that is still under another lease: that
// lease's holder may still serve, unlisted by the revokes that list the
// newcomer in its place.

// ErrNodeInUse is returned by [Start] when a live member holds the node's
// id: its serving key outlived its lease's TTL under another lease, so
// that lease is being renewed.
var ErrNodeInUse = errors.New("node id in use by a live member")

// TakeoverGrace is how long past the TTL of the lease holding its id a
// starting node waits for the key to go: etcd revokes an expired lease
// within its lessor's check (500 ms) and one commit.
const TakeoverGrace = 2 * time.Second

// awaitID returns once the node's serving key is absent, or ErrNodeInUse
// once it has outlived *deadline, which is set when a holder is first seen.
func (n *Node) awaitID(ctx context.Context, deadline *int64) error {
	for {
		resp, err := n.cli.Get(ctx, n.servingKey)
		if err != nil {
			return fmt.Errorf("register: read %s: %w", n.servingKey, err)
		}
		if len(resp.Kvs) == 0 {
			return nil
		}
		kv := resp.Kvs[0]
		if *deadline == 0 {
			ttl := n.heldTTL(ctx, clientv3.LeaseID(kv.Lease))
			wait := time.Duration(float64(ttl)*(1+n.cfg.Drift)) + TakeoverGrace
			*deadline = n.mono() + int64(wait)
			n.cfg.Logger.Warn("node id held by another registration; waiting for it to lapse before joining",
				"node", n.cfg.Node, "holder", memberURL(kv), "at_most", wait)
		}
		changed, err := n.awaitKeyChange(ctx, resp.Header.Revision, *deadline)
		if err != nil {
			return err
		}
		if !changed {
			return n.inUse(kv)
		}
	}
}

// heldTTL is the TTL granted to the lease that holds the key: the longest
// a holder that renews nothing keeps it. A key under no lease, or one
// whose lease cannot be read, is given this node's own TTL.
func (n *Node) heldTTL(ctx context.Context, id clientv3.LeaseID) time.Duration {
	own := time.Duration(n.cfg.LeaseTTL) * time.Second
	if id == clientv3.NoLease {
		return own
	}
	resp, err := n.cli.TimeToLive(ctx, id)
	if err != nil || resp.GrantedTTL <= 0 {
		return own
	}
	return time.Duration(resp.GrantedTTL) * time.Second
}

// awaitKeyChange watches the serving key from the revision after rev and
// reports whether it changed (deleted, or put by another holder) before
// deadline.
func (n *Node) awaitKeyChange(ctx context.Context, rev, deadline int64) (bool, error) {
	left := time.Duration(deadline - n.mono())
	if left <= 0 {
		return false, nil
	}
	wctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	for wr := range n.cli.Watch(clientv3.WithRequireLeader(wctx), n.servingKey, clientv3.WithRev(rev+1)) {
		if wr.Err() != nil {
			break
		}
		if len(wr.Events) > 0 {
			return true, nil
		}
	}
	switch {
	case ctx.Err() != nil:
		return false, fmt.Errorf("register: wait for %s: %w", n.servingKey, ctx.Err())
	case n.mono() >= deadline:
		return false, nil
	}
	// The watch broke (etcd lost its leader): read the key again, after a pause.
	select {
	case <-ctx.Done():
		return false, fmt.Errorf("register: wait for %s: %w", n.servingKey, ctx.Err())
	case <-time.After(n.cfg.Interval):
		return true, nil
	}
}

// inUse is the error of an id held by a live member.
func (n *Node) inUse(kv *mvccpb.KeyValue) error {
	holder := "another member"
	if u := memberURL(kv); u != "" {
		holder += " (internal listener " + u + ")"
	}
	return fmt.Errorf("node id %q is in use: %s holds it and keeps renewing its registration; give this node an id of its own (cluster.Config.Node, runtime serve --node), or stop that member first: %w",
		n.cfg.Node, holder, ErrNodeInUse)
}

// memberURL is the internal URL a serving key's value publishes, "" if none.
func memberURL(kv *mvccpb.KeyValue) string {
	var m Member
	if json.Unmarshal(kv.Value, &m) != nil {
		return ""
	}
	return m.URL
}

// revokeQuietly revokes a lease this node granted and no longer needs; a
// failure leaves it to lapse.
func (n *Node) revokeQuietly(id clientv3.LeaseID) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = n.cli.Revoke(ctx, id)
}

package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration, the fence and membership.

// register makes the node a member: once no other lease holds its serving
// key (awaitID), it grants a new lease and creates the key under it, in a
// Txn conditioned on the key's absence, so that it never takes the id
// from a live member.
func (n *Node) register(ctx context.Context) error {
	val, err := json.Marshal(Member{ID: n.cfg.Node, URL: n.cfg.URL})
	if err != nil {
		return fmt.Errorf("register: %w", err)
	}
	var deadline int64 // mono by which the holder seen first must be gone; 0: none seen
	for {
		if err := n.awaitID(ctx, &deadline); err != nil {
			return err
		}
		s := n.mono()
		g, err := n.cli.Grant(ctx, n.cfg.LeaseTTL)
		if err != nil {
			return fmt.Errorf("register: grant: %w", err)
		}
		resp, err := n.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.CreateRevision(n.servingKey), "=", 0)).
			Then(clientv3.OpPut(n.servingKey, string(val), clientv3.WithLease(g.ID))).
			Commit()
		if err != nil || !resp.Succeeded {
			n.revokeQuietly(g.ID)
			if err != nil {
				return fmt.Errorf("register: %w", err)
			}
			continue // another took the key in between: wait for it as well
		}
		n.lease.Store(int64(g.ID))
		n.leaseUntil.Store(n.leaseDeadline(s, g.TTL))
		return nil
	}
}

// leaseDeadline is s + TTL(1−ρ) − margin: the lease, renewed for ttl by a
// request sent at s, is surely valid before it.
func (n *Node) leaseDeadline(s, ttl int64) int64 {
	d := time.Duration(float64(time.Duration(ttl)*time.Second)*(1-n.cfg.Drift)) - n.cfg.Margin
	return s + int64(d)
}

// watchLoop calls OnUnavailable at each change from serving to not.
func (n *Node) watchLoop() {
	defer n.wg.Done()
	t := time.NewTicker(max(n.cfg.Interval/2, time.Millisecond))
	defer t.Stop()
	was := false
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := n.Serving()
		if was && !now {
			n.cfg.Logger.Warn("node stopped serving", "node", n.cfg.Node, "applied", n.applied.Load())
			if n.cfg.OnUnavailable != nil {
				n.cfg.OnUnavailable()
			}
		}
		was = now
	}
}

func (n *Node) fenceLoop() {
	defer n.wg.Done()
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-n.stopped:
			return
		case <-t.C:
		}
		n.fenceGate.RLock()
		if err := n.check(); err != nil && n.ctx.Err() == nil {
			n.cfg.Logger.Debug("fence check failed", "node", n.cfg.Node, "err", err)
		}
		n.fenceGate.RUnlock()
	}
}

// check renews the lease, then proves the replica current: a
// linearizable read of the serving key at revision Q, then the replica at
// ≥ Q. On success the confirmation time is t0, taken before the read.
func (n *Node) check() error {
	ctx, cancel := context.WithTimeout(n.ctx, n.cfg.Fence)
	defer cancel()
	id := clientv3.LeaseID(n.lease.Load())
	s := n.mono()
	ka, err := n.cli.KeepAliveOnce(ctx, id)
	switch {
	case errors.Is(err, rpctypes.ErrLeaseNotFound):
		n.lost()
		return fmt.Errorf("lease lapsed: %w", err)
	case err != nil:
		return fmt.Errorf("renew lease: %w", err)
	case ka.TTL > 0:
		n.leaseUntil.Store(n.leaseDeadline(s, ka.TTL))
	}
	t0 := n.mono()
	resp, err := n.cli.Get(ctx, n.servingKey)
	if err != nil {
		return fmt.Errorf("read serving key: %w", err)
	}
	if len(resp.Kvs) != 1 || clientv3.LeaseID(resp.Kvs[0].Lease) != id {
		n.lost()
		return errors.New("serving key gone")
	}
	q := resp.Header.Revision
	n.latest.Store(q)
	if n.applied.Load() < q {
		if err := n.cli.RequestProgress(n.watchContext()); err != nil {
			return fmt.Errorf("request progress: %w", err)
		}
		if err := n.WaitApplied(ctx, q); err != nil {
			return fmt.Errorf("replica to %d: %w", q, err)
		}
	}
	if t0 > n.confirmed.Load() {
		n.confirmed.Store(t0) // only this loop writes it
	}
	return nil
}

// lost ends the node's membership for good: its lease lapsed, or its
// serving key is gone, so a revoker may already have left it out of a
// barrier. The node fails closed and stays so; it rejoins only as a new
// [Node] (a restart), which loads its replica afresh (SPEC §5d.2).
func (n *Node) lost() {
	n.confirmed.Store(0)
	n.leaseUntil.Store(0)
	n.fail(errors.New("membership lost"))
}

// Stopped is closed once the node no longer serves for good: it was
// closed, its watch failed, or it lost its membership.
func (n *Node) Stopped() <-chan struct{} { return n.stopped }

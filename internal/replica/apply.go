package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/memdb"
)

// The applier: the snapshot at R0, then one watch into the store.

// loadSnapshot reads every replicated row and registration at one
// revision R0 into the store and returns R0.
func (n *Node) loadSnapshot(ctx context.Context) (int64, error) {
	resp, err := n.cli.Get(ctx, Prefix, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("load snapshot: %w", err)
	}
	err = n.store.Apply(func(w *memdb.Writer) error {
		for _, kv := range resp.Kvs {
			if err := n.applyKV(w, clientv3.EventTypePut, kv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("load snapshot at %d: %w", resp.Header.Revision, err)
	}
	n.advance(resp.Header.Revision)
	return resp.Header.Revision, nil
}

func (n *Node) applyLoop(wch clientv3.WatchChan) {
	defer n.wg.Done()
	backoff := n.cfg.Interval
	for {
		err := n.applyWatch(wch)
		if n.ctx.Err() != nil {
			return
		}
		var wr *watchError
		if !errors.As(err, &wr) || wr.compacted {
			// The replica cannot be brought up to date from here (an
			// event the store refused, or history compacted away): fail
			// closed for good; a new Node loads a fresh snapshot.
			n.fail(err)
			return
		}
		// The watch ended (etcd lost its leader, the connection broke):
		// watch again from the next revision. Meanwhile the fence cannot
		// confirm, so the node does not serve.
		n.cfg.Logger.Warn("replica watch ended; watching again", "node", n.cfg.Node, "applied", n.applied.Load(), "err", err)
		select {
		case <-n.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
		wch = n.watch(n.applied.Load() + 1)
	}
}

// watch watches every key of the layout from rev, in a context of its
// own.
func (n *Node) watch(rev int64) clientv3.WatchChan {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	if n.wcancel != nil {
		n.wcancel()
	}
	ctx, cancel := context.WithCancel(n.ctx)
	n.wctx, n.wcancel = clientv3.WithRequireLeader(ctx), cancel
	return n.cli.Watch(n.wctx, Prefix, clientv3.WithPrefix(), clientv3.WithRev(rev),
		clientv3.WithPrevKV(), clientv3.WithProgressNotify())
}

// watchContext is the current watch's context.
func (n *Node) watchContext() context.Context {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	return n.wctx
}

// CancelWatch ends the replica's watch as a lost etcd leader or a broken
// stream would; the applier watches again from the revision after the
// one it applied. For testing.
func (n *Node) CancelWatch() {
	n.wmu.Lock()
	defer n.wmu.Unlock()
	n.wcancel()
}

// watchError is a watch that ended; compacted when the revisions it
// needed are gone.
type watchError struct {
	err       error
	compacted bool
}

func (e *watchError) Error() string { return "watch: " + e.err.Error() }
func (e *watchError) Unwrap() error { return e.err }

// applyWatch applies wch until it ends: a *watchError when the watch
// ended, another error when a response could not be applied.
func (n *Node) applyWatch(wch clientv3.WatchChan) error {
	for wr := range wch {
		if err := wr.Err(); err != nil {
			return &watchError{err: err, compacted: wr.CompactRevision != 0}
		}
		n.applyGate.RLock()
		err := n.apply(wr)
		n.applyGate.RUnlock()
		if err != nil {
			return err
		}
	}
	return &watchError{err: errors.New("watch channel closed")}
}

// apply applies one watch response: its events in one store write, then
// the applied revision.
func (n *Node) apply(wr clientv3.WatchResponse) error {
	if wr.IsProgressNotify() {
		n.advance(wr.Header.Revision)
		return nil
	}
	if len(wr.Events) == 0 {
		return nil
	}
	// etcd sends the events of one revision in one response (its watch
	// batches by revision, and fragmenting is off), so the last event's
	// revision is applied whole.
	err := n.store.Apply(func(w *memdb.Writer) error {
		for _, ev := range wr.Events {
			if err := n.applyKV(w, ev.Type, ev.Kv); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("apply revision %d: %w", wr.Events[len(wr.Events)-1].Kv.ModRevision, err)
	}
	n.advance(wr.Events[len(wr.Events)-1].Kv.ModRevision)
	return nil
}

// applyKV applies one key's put or delete: a replicated row into the
// store with its revision, or a registration into the member list. Keys
// of neither kind are ignored (a later version's tables).
func (n *Node) applyKV(w *memdb.Writer, typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) error {
	rest, ok := strings.CutPrefix(string(kv.Key), Prefix)
	if !ok {
		return nil
	}
	table, id, ok := strings.Cut(rest, "/")
	if !ok || id == "" {
		return nil
	}
	if table == "serving" {
		n.applyMember(typ, id, kv.Value)
		return nil
	}
	if !memdb.Replicated(table) {
		return nil
	}
	if typ == clientv3.EventTypeDelete {
		if err := w.Delete(table, id); err != nil && !errors.Is(err, memdb.ErrNotFound) {
			return err
		}
		return w.SetRevision(table, id, 0)
	}
	rec, err := decodeRow(table, id, kv.Value)
	if err != nil {
		return err
	}
	if err := w.Put(table, rec); err != nil {
		return err
	}
	return w.SetRevision(table, id, kv.ModRevision)
}

// decodeRow decodes a row's value and checks that it is the row its key
// names.
func decodeRow(table, id string, value []byte) (any, error) {
	rec, err := memdb.NewRecord(table)
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(value, rec); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", table, id, err)
	}
	if got := memdb.RowID(rec); got != id {
		return nil, fmt.Errorf("decode %s/%s: row id %q does not match its key", table, id, got)
	}
	return rec, nil
}

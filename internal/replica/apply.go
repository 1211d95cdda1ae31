package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/segmentio/encoding/json"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/memdb"
)

// The applier: the snapshot at R0, then one watch into the store.

// snapshotPage is how many keys one read of the snapshot returns. The
// snapshot is read in pages, all at one revision R0, so that neither etcd
// nor the node holds it whole as one message (hundreds of MB at a
// long-running host's size), and each page is read and decoded while the
// store takes the one before. A first read of the keys alone (at R0)
// cuts the key space into the pages' exact ranges: etcd counts every key
// from a range's start to its end on each read, so pages of one open
// range with a limit would cost it O(N²/snapshotPage) index visits. Should
// etcd compact R0 away before the last page is read (auto-compaction by
// revision, under a heavy write load), the load fails, and with it the
// node's start.
const snapshotPage = 2048

// snapshotRow is one decoded row of the snapshot.
type snapshotRow struct {
	table, id string
	rec       any
	rev       int64
}

// loadSnapshot reads every replicated row and registration at one
// revision R0 into the store, in one store write, and returns R0: a
// goroutine of its own reads and decodes the pages (registrations go to
// the member list at once), and the write takes the rows as they come.
// Nothing is written unless every page was read.
func (n *Node) loadSnapshot(ctx context.Context) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan []snapshotRow, 2)
	var (
		r0       int64
		fetchErr error // r0 and fetchErr are written before pages is closed
	)
	go func() {
		defer close(pages)
		keys, err := n.cli.Get(ctx, Prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		if err != nil {
			fetchErr = fmt.Errorf("load snapshot: %w", err)
			return
		}
		r0 = keys.Header.Revision
		end := clientv3.GetPrefixRangeEnd(Prefix)
		for i := 0; i < len(keys.Kvs); i += snapshotPage {
			to := end
			if j := i + snapshotPage; j < len(keys.Kvs) {
				to = string(keys.Kvs[j].Key)
			}
			resp, err := n.cli.Get(ctx, string(keys.Kvs[i].Key), clientv3.WithRange(to), clientv3.WithRev(r0))
			if err != nil {
				fetchErr = fmt.Errorf("load snapshot at %d: %w", r0, err)
				return
			}
			rows, err := n.decodePage(resp.Kvs)
			if err != nil {
				fetchErr = fmt.Errorf("load snapshot at %d: %w", r0, err)
				return
			}
			select {
			case pages <- rows:
			case <-ctx.Done():
				fetchErr = ctx.Err()
				return
			}
		}
	}()
	err := n.store.Apply(func(w *memdb.Writer) error {
		for rows := range pages {
			for _, r := range rows {
				if err := w.Put(r.table, r.rec); err != nil {
					return fmt.Errorf("load snapshot: %s/%s: %w", r.table, r.id, err)
				}
				if err := w.SetRevision(r.table, r.id, r.rev); err != nil {
					return fmt.Errorf("load snapshot: %w", err)
				}
			}
		}
		return fetchErr
	})
	if err != nil {
		cancel()
		for range pages { // until the reader has stopped
		}
		return 0, err
	}
	n.advance(r0)
	return r0, nil
}

// decodePage decodes a page of the snapshot: its replicated rows, in
// order; registrations go to the member list, and keys of neither kind
// are left out (a later version's tables).
func (n *Node) decodePage(kvs []*mvccpb.KeyValue) ([]snapshotRow, error) {
	rows := make([]snapshotRow, 0, len(kvs))
	for _, kv := range kvs {
		table, id, ok := splitKey(kv.Key)
		switch {
		case !ok:
			continue
		case table == "serving":
			n.applyMember(clientv3.EventTypePut, id, kv.Value)
			continue
		case !memdb.Replicated(table):
			continue
		}
		rec, err := decodeRow(table, id, kv.Value)
		if err != nil {
			return nil, err
		}
		rows = append(rows, snapshotRow{table: table, id: id, rec: rec, rev: kv.ModRevision})
	}
	return rows, nil
}

// splitKey splits a key of the layout into its table and id.
func splitKey(key []byte) (table, id string, ok bool) {
	rest, ok := strings.CutPrefix(string(key), Prefix)
	if !ok {
		return "", "", false
	}
	table, id, ok = strings.Cut(rest, "/")
	return table, id, ok && id != ""
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

// applyCoalesce bounds the events one store write applies. The watch
// responses already waiting when the applier takes one are applied with
// it, in one write: a replica that lags (a burst of writes, an adoption)
// catches up in fewer and larger writes, each of which costs go-memdb
// much less per row than many small ones.
const applyCoalesce = 4096

// applyWatch applies wch until it ends: a *watchError when the watch
// ended, another error when a response could not be applied.
func (n *Node) applyWatch(wch clientv3.WatchChan) error {
	closed := &watchError{err: errors.New("watch channel closed")}
	for wr := range wch {
		batch := []clientv3.WatchResponse{wr}
		events, open := len(wr.Events), true
	coalesce:
		for wr.Err() == nil && events < applyCoalesce {
			select {
			case wr, open = <-wch:
				if !open {
					break coalesce
				}
				batch = append(batch, wr)
				events += len(wr.Events)
			default:
				break coalesce
			}
		}
		n.applyGate.RLock()
		err := n.apply(batch)
		n.applyGate.RUnlock()
		if err != nil {
			return err
		}
		if !open {
			return closed
		}
	}
	return closed
}

// apply applies watch responses, in order, up to the first that reports
// the watch's end: their events in one store write, then the applied
// revision (the last event's, or a progress notification's, whichever is
// later); then it returns that end as a *watchError.
func (n *Node) apply(batch []clientv3.WatchResponse) error {
	var (
		events []*clientv3.Event
		rev    int64
		ended  error
	)
	for _, wr := range batch {
		if err := wr.Err(); err != nil {
			ended = &watchError{err: err, compacted: wr.CompactRevision != 0}
			break
		}
		if wr.IsProgressNotify() {
			rev = max(rev, wr.Header.Revision)
			continue
		}
		if len(wr.Events) > 0 {
			// etcd sends the events of one revision in one response (its
			// watch batches by revision, and fragmenting is off), so the
			// last event's revision is applied whole.
			events = append(events, wr.Events...)
			rev = max(rev, wr.Events[len(wr.Events)-1].Kv.ModRevision)
		}
	}
	if len(events) > 0 {
		err := n.store.Apply(func(w *memdb.Writer) error {
			for _, ev := range events {
				if err := n.applyKV(w, ev.Type, ev.Kv); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("apply revisions %d to %d: %w", events[0].Kv.ModRevision, rev, err)
		}
	}
	if rev != 0 {
		n.advance(rev)
	}
	return ended
}

// applyKV applies one key's put or delete: a replicated row into the
// store with its revision, or a registration into the member list. Keys
// of neither kind are ignored (a later version's tables).
func (n *Node) applyKV(w *memdb.Writer, typ mvccpb.Event_EventType, kv *mvccpb.KeyValue) error {
	table, id, ok := splitKey(kv.Key)
	if !ok {
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
// names. It decodes with segmentio/encoding/json, which reads what
// encoding/json wrote as encoding/json would (TestDecodeRowAsEncodingJSON)
// at a tenth of its cost: decoding is most of what loading a replica of
// hundreds of thousands of rows costs besides the store's inserts.
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

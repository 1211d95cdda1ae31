package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
)

// TestSnapshotInPages: a node starting on a store larger than one read
// of the snapshot (it is read in pages, at one revision) loads every row
// and every registration, whichever page they are on: the credentials
// written before it started authenticate on it as soon as it started, a
// revoked one does not, and it knows the member registered after them in
// key order.
func TestSnapshotInPages(t *testing.T) {
	const creds = 4200 // over two pages of 2048
	endpoint := startEtcd(t)
	first := startCluster(t, endpoint, 1, replica.Config{})
	admin := newClient(t, endpoint)
	defer admin.Close()

	scratch, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var kvs []scaleKV
	var tokens []string
	err = scratch.Write(func(w *memdb.Writer) error {
		for i := range creds {
			row, tok, err := credential.MintProvider(w, fmt.Sprintf("t%d", i%50), "codex", nil, now, 0)
			if err != nil {
				return err
			}
			if i == creds-1 {
				if _, err := credential.Revoke(w, row, credential.ReasonReleased, now); err != nil {
					return err
				}
			}
			val, err := json.Marshal(row)
			if err != nil {
				return err
			}
			kvs = append(kvs, scaleKV{replica.TableKey(memdb.TableCredentials, row.ID), string(val)})
			tokens = append(tokens, tok)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	bulkPut(t, admin, kvs, 8)

	cli := newClient(t, endpoint)
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	node, err := replica.Start(ctx, replica.Config{Client: cli, Node: "joiner"})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	// Checked at once, before the watch could have brought anything: what
	// the node has is its snapshot.
	rd := node.Store().Read()
	live, err := rd.CountCredentialsByState(memdb.StateLive)
	if err != nil || live != creds-1 {
		t.Errorf("live credentials in the joiner's snapshot = %d, %v; want %d", live, err, creds-1)
	}
	for i, tok := range tokens {
		if i%50 != 0 && i < creds-100 {
			continue // the count says the rest are there; these say they are the right ones
		}
		_, err := credential.Authenticate(rd, tok, now)
		if ok := err == nil; ok != (i < creds-1) {
			t.Fatalf("token %d of %d on the joiner: %v; want live %v", i, creds, err, i < creds-1)
		}
	}
	ids := func(ms []replica.Member) []string {
		var out []string
		for _, m := range ms {
			out = append(out, m.ID)
		}
		return out
	}
	if got := ids(node.Members()); !slices.Contains(got, first.nodes[0].ID()) {
		t.Errorf("members the joiner loaded = %v, want %s among them", got, first.nodes[0].ID())
	}
}

// scaleKV is one row as internal/replica keeps it.
type scaleKV struct{ key, val string }

// bulkPut writes kvs in transactions of 128 puts (etcd's default
// --max-txn-ops), inFlight at a time, and returns the revision of the last.
func bulkPut(b tb, cli *clientv3.Client, kvs []scaleKV, inFlight int) int64 {
	const perTxn = 128
	var (
		mu   sync.Mutex
		last int64
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, inFlight)
	for lo := 0; lo < len(kvs); lo += perTxn {
		batch := kvs[lo:min(lo+perTxn, len(kvs))]
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			ops := make([]clientv3.Op, len(batch))
			for i, kv := range batch {
				ops[i] = clientv3.OpPut(kv.key, kv.val)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			resp, err := cli.Txn(ctx).Then(ops...).Commit()
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			last = max(last, resp.Header.Revision)
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		b.Fatalf("bulk put: %v", errs[0])
	}
	return last
}

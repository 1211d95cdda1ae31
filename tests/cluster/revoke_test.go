package cluster

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/liveness"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
)

// fastFence keeps the tests with a paused node short: F = 150 ms.
var fastFence = replica.Config{Fence: 150 * time.Millisecond, Interval: 20 * time.Millisecond}

// A minted token authenticates on the writer's replica as soon as Create
// returns (read-your-writes), and on every node once it applied the write.
func TestCreateIsReadYourWrites(t *testing.T) {
	c := startCluster(t, startEtcd(t), 3, fastFence)
	for _, writer := range c.nodes {
		row, tok, rev := mint(t, writer, "t-"+writer.ID())
		if !authenticates(writer, tok) {
			t.Fatalf("%s: token of %s does not authenticate on its writer once Create returned", writer.ID(), row.ID)
		}
		for _, n := range c.nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			err := n.WaitApplied(ctx, rev)
			cancel()
			if err != nil {
				t.Fatalf("%s: WaitApplied(%d): %v", n.ID(), rev, err)
			}
			if !authenticates(n, tok) {
				t.Errorf("%s applied %d but does not authenticate %s", n.ID(), rev, row.ID)
			}
		}
	}
}

// With three healthy nodes, once Revoke returns no node's replica
// authenticates the token, every node confirmed the revision, and each
// node's liveness monitor — the store's real commit hook — has already
// told its watcher (the streams of that credential would be closed).
func TestRevokeHoldsOnEveryNode(t *testing.T) {
	c := startCluster(t, startEtcd(t), 3, replica.Config{})
	waitServing(t, c.nodes...)
	row, tok, rev := mint(t, c.nodes[0], "t1")
	dead := make([]chan struct{}, len(c.nodes))
	for i, n := range c.nodes {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := n.WaitApplied(ctx, rev)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		m := liveness.New(n.Store(), time.Now)
		t.Cleanup(m.Close)
		ch := make(chan struct{})
		dead[i] = ch
		m.WatchCredential(row.ID, func() { close(ch) })
	}

	res := revoke(t, c.nodes[1], row.ID)

	want := []string{"n0", "n1", "n2"}
	if diff := cmp.Diff(want, res.Confirmed); diff != "" {
		t.Errorf("confirmed nodes (-want +got):\n%s", diff)
	}
	if len(res.Waited) != 0 || !res.Revoked {
		t.Errorf("result = %+v, want revoked and no node waited for", res)
	}
	for i, n := range c.nodes {
		if authenticates(n, tok) {
			t.Errorf("%s still authenticates %s after Revoke returned", n.ID(), row.ID)
		}
		if n.Applied() < res.Revision {
			t.Errorf("%s applied %d < revoke revision %d", n.ID(), n.Applied(), res.Revision)
		}
		select {
		case <-dead[i]:
		default:
			t.Errorf("%s: the liveness watcher of %s was not called before Revoke returned", n.ID(), row.ID)
		}
	}

	// Revoking again writes nothing and still returns at the first revoke's revision.
	again := revoke(t, c.nodes[2], row.ID)
	if again.Revoked || again.Revision != res.Revision {
		t.Errorf("second revoke = %+v, want Revoked false at revision %d", again, res.Revision)
	}
}

// A paused node (applier and fence loop stopped) has not applied the
// revocation, so its replica still authenticates the token; the revoke
// waits for it only until the fence bound, after which the node no longer
// serves — also when asking it fails at once (unreachable: not in the
// directory). Once resumed, it applies the revocation and serves again.
func TestRevokeWithPausedNode(t *testing.T) {
	for _, test := range []struct {
		name        string
		unreachable bool
	}{{"paused", false}, {"paused and unreachable", true}} {
		t.Run(test.name, func(t *testing.T) {
			c := startCluster(t, startEtcd(t), 3, fastFence)
			waitServing(t, c.nodes...)
			row, tok, rev := mint(t, c.nodes[0], "t1")
			for _, n := range c.nodes {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := n.WaitApplied(ctx, rev)
				cancel()
				if err != nil {
					t.Fatal(err)
				}
			}
			paused := c.nodes[2]
			paused.Pause()
			if test.unreachable {
				c.dir.Remove(paused.ID())
			}

			res := revoke(t, c.nodes[0], row.ID)

			if diff := cmp.Diff([]string{"n2"}, res.Waited); diff != "" {
				t.Errorf("nodes waited for (-want +got):\n%s", diff)
			}
			if paused.Serving() {
				t.Errorf("paused %s still serves after Revoke returned", paused.ID())
			}
			if !authenticates(paused, tok) {
				t.Errorf("paused %s no longer authenticates: it applied a revocation while paused", paused.ID())
			}
			for _, n := range c.nodes[:2] {
				if authenticates(n, tok) {
					t.Errorf("%s still authenticates %s after Revoke returned", n.ID(), row.ID)
				}
			}

			paused.Resume()
			waitServing(t, paused)
			if paused.Applied() < res.Revision || authenticates(paused, tok) {
				t.Errorf("resumed %s serves at applied %d with revoke revision %d (authenticates: %v)",
					paused.ID(), paused.Applied(), res.Revision, authenticates(paused, tok))
			}
		})
	}
}

// A node whose applier stalls while its fence loop runs keeps its lease,
// so the revoke lists it and waits for it until the fence bound; its
// checks fail, since its replica cannot reach the revision they read, so
// by then it no longer serves, though its replica still authenticates the
// token.
func TestRevokeWithStalledApplier(t *testing.T) {
	c := startCluster(t, startEtcd(t), 3, fastFence)
	waitServing(t, c.nodes...)
	row, tok, rev := mint(t, c.nodes[0], "t1")
	stalled := c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := stalled.WaitApplied(ctx, rev); err != nil {
		t.Fatal(err)
	}
	stalled.StallApplier()

	res := revoke(t, c.nodes[2], row.ID)

	if diff := cmp.Diff([]string{"n1"}, res.Waited); diff != "" {
		t.Errorf("nodes waited for (-want +got):\n%s", diff)
	}
	if stalled.Serving() {
		t.Errorf("%s, its applier stalled, still serves after Revoke returned", stalled.ID())
	}
	if !authenticates(stalled, tok) {
		t.Errorf("%s applied the revocation with its applier stalled", stalled.ID())
	}
	stalled.Resume()
	waitServing(t, stalled)
	if authenticates(stalled, tok) {
		t.Errorf("%s serves again but authenticates %s, revoked at %d", stalled.ID(), row.ID, res.Revision)
	}
}

// A node whose serving lease lapsed (paused past its TTL) is not listed
// by the revoke, which therefore does not wait for it; its lease condition
// has already stopped it serving, and once it runs again it finds its
// membership lost and stops for good (it rejoins only as a new node).
//
// F is longer than the lease here, so when the key is gone only the lease
// condition can have stopped the node serving.
func TestLapsedNodeIsNotWaitedFor(t *testing.T) {
	cfg := replica.Config{Fence: 5 * time.Second, Interval: 20 * time.Millisecond}
	cfg.LeaseTTL = 2 // etcd's minimum with the embedded defaults
	endpoint := startEtcd(t)
	c := startCluster(t, endpoint, 3, cfg)
	waitServing(t, c.nodes...)
	row, _, rev := mint(t, c.nodes[0], "t1")
	paused := c.nodes[1]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := paused.WaitApplied(ctx, rev); err != nil {
		t.Fatal(err)
	}
	paused.Pause()
	cli := c.clients[0]
	waitFor(t, "n1's serving key gone", func() bool {
		resp, err := cli.Get(context.Background(), replica.ServingPrefix+paused.ID())
		return err == nil && len(resp.Kvs) == 0
	})

	res := revoke(t, c.nodes[0], row.ID)

	listed := append(slices.Clone(res.Confirmed), res.Waited...)
	if slices.Contains(listed, paused.ID()) {
		t.Errorf("revoke listed %s, whose lease lapsed: %+v", paused.ID(), res)
	}
	if paused.Serving() {
		t.Errorf("%s serves with a lapsed lease", paused.ID())
	}
	paused.Resume()
	select {
	case <-paused.Stopped():
	case <-ctx.Done():
		t.Fatalf("%s lost its lease but did not stop for good", paused.ID())
	}
	if paused.Serving() {
		t.Errorf("%s serves again after losing its membership", paused.ID())
	}
}

// A revoke that finds the row already revoked does not return before the
// revoke that wrote it could: it waits for the same revision, so a node
// paused since before the first revoke no longer serves when the second
// returns.
func TestSecondRevokeWaitsForTheFirst(t *testing.T) {
	c := startCluster(t, startEtcd(t), 3, fastFence)
	waitServing(t, c.nodes...)
	row, _, rev := mint(t, c.nodes[0], "t1")
	paused := c.nodes[2]
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := paused.WaitApplied(ctx, rev); err != nil {
		t.Fatal(err)
	}
	paused.Pause()
	first := make(chan replica.RevokeResult, 1)
	go func() {
		res, err := c.nodes[0].Revoke(ctx, row.ID, credential.ReasonArchived, time.Now())
		if err != nil {
			t.Errorf("first revoke: %v", err)
		}
		first <- res
	}()
	waitFor(t, "n1 applied the first revoke", func() bool {
		got, err := c.nodes[1].Store().Read().Credential(row.ID)
		return err == nil && got.State != memdb.StateLive
	})

	second := revoke(t, c.nodes[1], row.ID)

	if second.Revoked {
		t.Errorf("second revoke wrote the row again: %+v", second)
	}
	if paused.Serving() {
		t.Errorf("second revoke returned at %d while paused %s still serves", second.Revision, paused.ID())
	}
	if res := <-first; res.Revision != second.Revision {
		t.Errorf("first revoke at %d, second at %d: want the same revision", res.Revision, second.Revision)
	}
}

// With etcd gone, no node can prove its replica current, so every node
// stops serving: the fence fails closed. (etcd's Close waits for the open
// watch streams, so it runs beside the wait and the nodes are closed
// before it is awaited.)
func TestEtcdGoneFencesEveryNode(t *testing.T) {
	e := startEtcdServer(t)
	c := startCluster(t, e.Clients[0].Addr().String(), 3, fastFence)
	waitServing(t, c.nodes...)
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		e.Close()
	}()
	for _, n := range c.nodes {
		waitFor(t, n.ID()+" no longer serving", func() bool { return !n.Serving() })
	}
	c.stop()
	<-closed
}

// TestWatchResumes: a replica whose watch ends (etcd lost its leader, the
// stream broke) watches again from the revision after the one it
// applied: what was written meanwhile is applied, nothing is lost, and the
// node serves again.
func TestWatchResumes(t *testing.T) {
	c := startCluster(t, startEtcd(t), 2, fastFence)
	waitServing(t, c.nodes...)
	n := c.nodes[1]
	n.StallApplier() // the cancel and the mints land while it applies nothing
	n.CancelWatch()
	var toks []string
	var last int64
	for i := range 3 {
		_, tok, rev := mint(t, c.nodes[0], fmt.Sprintf("t%d", i))
		toks, last = append(toks, tok), rev
	}
	n.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.WaitApplied(ctx, last); err != nil {
		t.Fatalf("%s after its watch ended: replica to %d: %v", n.ID(), last, err)
	}
	waitServing(t, n)
	for i, tok := range toks {
		if !authenticates(n, tok) {
			t.Errorf("%s lost write %d made while its watch was down", n.ID(), i)
		}
	}
}

package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	rtcluster "github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/metrics"
)

// testSecret is the node-to-node secret of the test clusters.
const testSecret = "cluster-test-secret-0123456789abcdef"

// rtNode is one runtime node of an in-process cluster: the runtime, its
// MCP endpoint and listener, and its internal listener.
type rtNode struct {
	// internalIn counts the MCP requests other nodes forwarded here (its
	// internal listener's requests but the revokers' confirmations).
	internalIn   atomic.Int64
	id           string
	rt           *mcpruntime.Runtime
	ep           *mcpruntime.MCPEndpoint
	mcpURL       string // http://127.0.0.1:port/mcp
	internalAddr string
	internal     *http.Server
	public       *http.Server
}

// startRuntimes starts n runtime nodes on one etcd, each with an MCP
// listener and an internal listener on loopback, and waits until every
// node serves and sees every other as a member. cfg is each node's Config
// with its Cluster section filled in.
func startRuntimes(t testing.TB, endpoint string, n int, cfg mcpruntime.Config) []*rtNode {
	t.Helper()
	nodes := make([]*rtNode, n)
	for i := range nodes {
		id := fmt.Sprintf("n%d", i+1)
		internalLn := listen(t)
		publicLn := listen(t)
		c := cfg
		var fence time.Duration
		if cc, ok := cfg.Cluster.(rtcluster.Config); ok {
			fence = cc.Fence // a test's own F; the rest is the node's
		}
		c.Cluster = rtcluster.Config{
			Etcd: []string{endpoint}, Node: id, URL: "http://" + internalLn.Addr().String(),
			Secret: testSecret, Fence: fence,
		}
		c.Endpoint = "http://" + publicLn.Addr().String() + "/mcp"
		rt, err := mcpruntime.New(c)
		if err != nil {
			t.Fatalf("node %s: New: %v", id, err)
		}
		ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
		if err != nil {
			t.Fatalf("node %s: MCPHandler: %v", id, err)
		}
		node := &rtNode{
			id: id, rt: rt, ep: ep, mcpURL: c.Endpoint, internalAddr: internalLn.Addr().String(),
			public: &http.Server{Handler: ep, ReadHeaderTimeout: 10 * time.Second},
		}
		inner := rt.InternalHandler()
		node.internal = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/internal/confirm" {
				node.internalIn.Add(1)
			}
			inner.ServeHTTP(w, r)
		}), ReadHeaderTimeout: 10 * time.Second}
		go node.internal.Serve(internalLn)
		go node.public.Serve(publicLn)
		t.Cleanup(func() {
			node.public.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := rt.Shutdown(ctx); err != nil {
				t.Errorf("node %s: Shutdown: %v", id, err)
			}
			node.internal.Close()
		})
		nodes[i] = node
	}
	rts := make([]*mcpruntime.Runtime, len(nodes))
	for i, node := range nodes {
		rts[i] = node.rt
	}
	waitAllServing(t, rts...)
	return nodes
}

// waitAllServing waits until every runtime serves and sees all of them
// as members.
func waitAllServing(t tb, rts ...*mcpruntime.Runtime) {
	t.Helper()
	waitFor(t, "every node serving and seeing all members", func() bool {
		for _, rt := range rts {
			st := rt.Node()
			if !st.Serving || len(st.Members) != len(rts) {
				return false
			}
		}
		return true
	})
}

func listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	return ln
}

// mintOn registers an in-process instance and a thread on node and opens
// a provider session, returning the credential's raw token.
func mintOn(t testing.TB, node *rtNode, thread, instance string) (mcpruntime.ProviderSession, string) {
	t.Helper()
	ctx := context.Background()
	if err := node.rt.RegisterInstance(ctx, instance, mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil && !errors.Is(err, mcpruntime.ErrInstanceExists) {
		t.Fatalf("RegisterInstance(%s) on %s: %v", instance, node.id, err)
	}
	if _, err := node.rt.CreateThread(ctx, thread, mcpruntime.ThreadOptions{}); err != nil && !errors.Is(err, mcpruntime.ErrThreadExists) {
		t.Fatalf("CreateThread(%s) on %s: %v", thread, node.id, err)
	}
	ps, err := node.rt.OpenProviderSession(ctx, thread, instance)
	if err != nil {
		t.Fatalf("OpenProviderSession(%s, %s) on %s: %v", thread, instance, node.id, err)
	}
	tok, ok := strings.CutPrefix(ps.Authorization, "Bearer ")
	if !ok {
		t.Fatalf("OpenProviderSession on %s = %+v, want a minted credential", node.id, ps)
	}
	return ps, tok
}

// TestRuntimeCredentialOnEveryNode: a credential minted on one node
// authenticates on every node as soon as the mint returns, as the same
// principal, and once its release returns it authenticates on none.
func TestRuntimeCredentialOnEveryNode(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ps, tok := mintOn(t, nodes[0], "t1", "codex")
	for _, n := range nodes {
		p, err := n.rt.Authenticate(tok)
		if err != nil {
			t.Fatalf("Authenticate on %s right after the mint on n1: %v", n.id, err)
		}
		if p.Thread != "t1" || p.Instance != "codex" || p.CredentialID != ps.CredentialID {
			t.Fatalf("Authenticate on %s = %+v, want thread t1, instance codex, credential %s", n.id, p, ps.CredentialID)
		}
	}
	if err := nodes[0].rt.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatalf("ReleaseProviderSession: %v", err)
	}
	for _, n := range nodes {
		if _, err := n.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Fatalf("Authenticate on %s right after the release returned = %v, want ErrUnauthenticated", n.id, err)
		}
	}
}

// TestRuntimeThreadHasOneHome: a thread lives on the node that created
// it; the others refuse it as another node's (ErrNotHome naming the home)
// and refuse to create it again.
func TestRuntimeThreadHasOneHome(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{})
	ctx := context.Background()
	if _, err := nodes[0].rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatalf("CreateThread on n1: %v", err)
	}
	waitFor(t, "n2 to apply the thread", func() bool {
		_, err := nodes[1].rt.Thread(ctx, "t1")
		return err == nil
	})
	if _, err := nodes[1].rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); !errors.Is(err, mcpruntime.ErrThreadExists) {
		t.Fatalf("CreateThread(t1) on n2 = %v, want ErrThreadExists", err)
	}
	_, err := nodes[1].rt.StartRun(ctx, "t1", "codex")
	var nh *mcpruntime.NotHomeError
	if !errors.As(err, &nh) || nh.Home != "n1" || !errors.Is(err, mcpruntime.ErrNotHome) {
		t.Fatalf("StartRun(t1) on n2 = %v, want a *NotHomeError naming n1", err)
	}
}

// TestRuntimeThreadOutlivesItsHome: when a thread's home node leaves the
// cluster, exactly one surviving node adopts the thread — its record and
// messages intact, its credentials revoked with the old home's provider
// sessions — and serves it from then on; the other refuses it as the new
// home's.
func TestRuntimeThreadOutlivesItsHome(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ctx := context.Background()
	home := nodes[1]
	ps, tok := mintOn(t, home, "t1", "codex")
	// t2 lives on n1, which stays: no survivor may take it.
	_, tok2stays := mintOn(t, nodes[0], "t2", "codex")
	if _, err := home.rt.StartRun(ctx, "t1", "codex"); err != nil {
		t.Fatalf("StartRun on n2: %v", err)
	}
	caller, err := home.rt.Authenticate(tok)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := home.rt.Post(ctx, caller, "t1", "before"); err != nil {
		t.Fatalf("Post on n2: %v", err)
	}
	if err := nodes[2].rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
		t.Fatalf("RegisterInstance on n3: %v", err)
	}
	if err := home.rt.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown n2: %v", err)
	}

	adopter := waitAdopted(t, "t1", nodes[0], nodes[2])
	other := nodes[0]
	if adopter == nodes[0] {
		other = nodes[2]
	}
	th, err := adopter.rt.Thread(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 1 || th.Messages[0].Text != "before" || th.Run != nil {
		t.Errorf("adopted t1 = %+v, want its one message and no run", th)
	}
	if _, err := adopter.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
		t.Errorf("the old home's credential %s on the adopter = %v, want ErrUnauthenticated", ps.CredentialID, err)
	}
	_, tok2 := mintOn(t, adopter, "t1", "codex")
	if _, err := adopter.rt.StartRun(ctx, "t1", "codex"); err != nil {
		t.Fatalf("StartRun on the adopter %s: %v", adopter.id, err)
	}
	caller2, err := other.rt.Authenticate(tok2)
	if err != nil {
		t.Fatalf("the adopter's new credential on %s: %v", other.id, err)
	}
	if _, err := adopter.rt.Post(ctx, caller2, "t1", "after"); err != nil {
		t.Fatalf("Post on the adopter: %v", err)
	}
	_, err = other.rt.StartRun(ctx, "t1", "codex")
	var nh *mcpruntime.NotHomeError
	if !errors.As(err, &nh) || nh.Home != adopter.id {
		t.Fatalf("StartRun(t1) on %s = %v, want a *NotHomeError naming %s", other.id, err, adopter.id)
	}
	for _, n := range []*rtNode{nodes[0], nodes[2]} {
		if th, err := n.rt.Thread(ctx, "t2"); err != nil || th.Home != "n1" {
			t.Errorf("t2 of the live n1 on %s after n2 left = %+v, %v; want it still at n1", n.id, th, err)
		}
		if _, err := n.rt.Authenticate(tok2stays); err != nil {
			t.Errorf("t2's credential on %s after n2 left: %v; a live home's thread keeps its credentials", n.id, err)
		}
	}
}

// TestRuntimeNodeMetrics: a node of several exports its fence state,
// member count and replica revision; a paused node's gauges say it does
// not serve.
func TestRuntimeNodeMetrics(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{})
	reg := prometheus.NewRegistry()
	metrics.New(reg, nodes[0].rt)
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	if got := gauge("mcpruntime_node_serving"); got != 1 {
		t.Errorf("node_serving = %v, want 1", got)
	}
	if got := gauge("mcpruntime_node_members"); got != 2 {
		t.Errorf("node_members = %v, want 2", got)
	}
	if got := gauge("mcpruntime_node_applied_revision"); got <= 0 {
		t.Errorf("node_applied_revision = %v, want > 0", got)
	}
	first := rep("n1")
	first.Pause()
	defer first.Resume()
	waitFor(t, "n1's gauge to say it does not serve", func() bool { return gauge("mcpruntime_node_serving") == 0 })
	if got := gauge("mcpruntime_node_fence_age_seconds"); got*float64(time.Second) < float64(rtcluster.DefaultFence) {
		t.Errorf("fence age of a node that stopped serving = %vs, want at least the fence", got)
	}
}

// waitAdopted waits until one of survivors has adopted thread: its own
// replica names it the home and its actors are as many as the threads its
// replica homes there (the adopted one's started); it returns that node.
func waitAdopted(t testing.TB, thread string, survivors ...*rtNode) *rtNode {
	t.Helper()
	var adopter *rtNode
	waitFor(t, "a survivor to adopt "+thread, func() bool {
		for _, n := range survivors {
			th, err := n.rt.Thread(context.Background(), thread)
			if err != nil || th.Home != n.id {
				continue
			}
			all, err := n.rt.Threads(context.Background())
			if err != nil {
				continue
			}
			homed := 0
			for _, th := range all {
				if th.Home == n.id {
					homed++
				}
			}
			if n.rt.Stats().Threads != homed {
				continue
			}
			adopter = n
			return true
		}
		return false
	})
	return adopter
}

// replicas collects the replica of every runtime node started while it is
// installed (replica.TestHookStarted), by node id.
func replicas(t testing.TB) func(id string) *replica.Node {
	t.Helper()
	var mu sync.Mutex
	byID := map[string]*replica.Node{}
	replica.TestHookStarted = func(n *replica.Node) {
		mu.Lock()
		defer mu.Unlock()
		byID[n.ID()] = n
	}
	t.Cleanup(func() { replica.TestHookStarted = nil })
	return func(id string) *replica.Node {
		mu.Lock()
		defer mu.Unlock()
		return byID[id]
	}
}

// TestRuntimeReleaseWaitsForAStalledNode: a node whose replica stalls
// (its watch delivers nothing, its fence keeps trying) may still hold a
// credential as live; a release on another node returns only once that
// node no longer serves, so from then on it authenticates nothing — it
// answers ErrNodeUnavailable, not the principal.
func TestRuntimeReleaseWaitsForAStalledNode(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ps, tok := mintOn(t, nodes[0], "t1", "codex")
	stalled := nodes[2]
	waitFor(t, "n3 to authenticate the token", func() bool {
		_, err := stalled.rt.Authenticate(tok)
		return err == nil
	})
	rep(stalled.id).StallApplier()
	defer rep(stalled.id).Resume()
	if err := nodes[0].rt.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatalf("ReleaseProviderSession: %v", err)
	}
	if _, err := stalled.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrNodeUnavailable) {
		t.Fatalf("Authenticate on the stalled n3 right after the release returned = %v, want ErrNodeUnavailable", err)
	}
	if st := stalled.rt.Node(); st.Serving {
		t.Fatalf("stalled n3 still serves after the release returned: %+v", st)
	}
}

// TestNonMemberCannotWrite: a node paused past its lease has lost its
// membership; once it runs again, nothing it writes lands in etcd (every
// write is conditioned on the writer's lease), whatever its replica says.
func TestNonMemberCannotWrite(t *testing.T) {
	cfg := replica.Config{Fence: 150 * time.Millisecond, Interval: 20 * time.Millisecond, LeaseTTL: 2}
	endpoint := startEtcd(t)
	c := startCluster(t, endpoint, 2, cfg)
	waitServing(t, c.nodes...)
	lapsed := c.nodes[1]
	lapsed.Pause()
	cli := c.clients[0]
	waitFor(t, lapsed.ID()+"'s serving key gone", func() bool {
		resp, err := cli.Get(context.Background(), replica.ServingPrefix+lapsed.ID())
		return err == nil && len(resp.Kvs) == 0
	})
	lapsed.Resume()
	err := lapsed.Store().Write(func(w *memdb.Writer) error {
		return w.PutThread(&memdb.Thread{ID: "zombie", Home: lapsed.ID(), Status: memdb.ThreadActive})
	})
	if !errors.Is(err, replica.ErrNotMember) {
		t.Errorf("write of a node without membership = %v, want ErrNotMember", err)
	}
	resp, err := cli.Get(context.Background(), replica.TableKey(memdb.TableThreads, "zombie"))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Fatalf("a node without membership wrote %s", resp.Kvs[0].Key)
	}
}

// TestRuntimeClientGrantOutlivesItsHome: a client grant lives on the node
// that issued it (others refuse to revoke it, naming the home); when that
// node dies (stopped dead, its lease lapsed), a survivor adopts the grant
// with its tokens still live, and revoking it there holds on every node.
func TestRuntimeClientGrantOutlivesItsHome(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ctx := context.Background()
	ct, err := nodes[0].rt.IssueClient(ctx, "dashboard", memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if p, err := n.rt.Authenticate(ct.Token); err != nil || p.Client != ct.ClientID {
			t.Fatalf("the client token on %s right after the issue = %+v, %v", n.id, p, err)
		}
	}
	err = nodes[1].rt.RevokeClient(ctx, ct.ClientID)
	var nh *mcpruntime.NotHomeError
	if !errors.As(err, &nh) || nh.Home != "n1" || nh.Kind != "client" {
		t.Fatalf("RevokeClient on n2 = %v, want a *NotHomeError naming n1", err)
	}
	rep("n1").Pause() // n1 dies: its lease lapses, the others adopt
	defer rep("n1").Resume()
	var adopter *rtNode
	waitFor(t, "a survivor to adopt the grant", func() bool {
		for _, n := range nodes[1:] {
			if err := n.rt.RevokeClient(ctx, ct.ClientID); err == nil {
				adopter = n
				return true
			} else if !errors.Is(err, mcpruntime.ErrNotHome) && !errors.Is(err, mcpruntime.ErrUnknownClient) &&
				!errors.Is(err, mcpruntime.ErrUnavailable) { // being adopted by n: its actor is not started yet
				t.Fatalf("RevokeClient on %s while the grant's home died: %v", n.id, err)
			}
		}
		return false
	})
	for _, n := range nodes[1:] {
		if _, err := n.rt.Authenticate(ct.Token); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Errorf("the client token on %s after %s revoked the adopted grant = %v, want ErrUnauthenticated", n.id, adopter.id, err)
		}
	}
}

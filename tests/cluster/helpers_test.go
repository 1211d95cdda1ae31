package cluster

import (
	"context"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
)

// startEtcd starts a one-member embedded etcd on free loopback ports with
// its data in a temporary directory, closed at cleanup, and returns its
// client endpoint.
func startEtcd(t testing.TB) string {
	t.Helper()
	return startEtcdServer(t).Clients[0].Addr().String()
}

// startEtcdServer is startEtcd returning the server, for a test that stops
// it early (Close is idempotent).
func startEtcdServer(t testing.TB) *etcdServer {
	t.Helper()
	return startEtcdIn(t, t.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
}

// startEtcdIn starts the embedded etcd with its data in dir, its client
// and peer listeners at the given loopback addresses: a test restarts a
// server with the dir and addresses of one it closed.
func startEtcdIn(t testing.TB, dir, clientAddr, peerAddr string) *etcdServer {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = "test"
	cfg.Dir = dir
	cfg.UnsafeNoFsync = true                                       // test data only
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop()) // its shutdown logs errors by design
	client := url.URL{Scheme: "http", Host: clientAddr}
	peer := url.URL{Scheme: "http", Host: peerAddr}
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{peer}
	cfg.AdvertisePeerUrls = []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	closeOnce := sync.OnceFunc(e.Close)
	t.Cleanup(closeOnce)
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		t.Fatalf("etcd: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("etcd not ready within 30 s")
	}
	return &etcdServer{Etcd: e, Close: closeOnce}
}

// etcdServer is an embedded etcd whose Close may be called more than once.
type etcdServer struct {
	*embed.Etcd
	Close func()
}

func newClient(t tb, endpoint string) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 5 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		t.Fatalf("etcd client: %v", err)
	}
	return cli
}

// tb is what the helpers need of a test: a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// cluster is n in-process nodes, each with its own etcd client, reachable
// through one in-process directory.
type cluster struct {
	dir     *replica.Directory
	nodes   []*replica.Node
	clients []*clientv3.Client
}

// startCluster starts n nodes ("n0", "n1", …) configured by cfg (Client,
// Node and Confirmer are set here). stop closes them; it is also a cleanup.
func startCluster(t tb, endpoint string, n int, cfg replica.Config) *cluster {
	t.Helper()
	c := &cluster{dir: replica.NewDirectory()}
	t.Cleanup(c.stop)
	for i := range n {
		cli := newClient(t, endpoint)
		c.clients = append(c.clients, cli)
		cfg := cfg
		cfg.Client, cfg.Node, cfg.Confirmer = cli, "n"+string(rune('0'+i)), c.dir
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		node, err := replica.Start(ctx, cfg)
		cancel()
		if err != nil {
			t.Fatalf("start node %d: %v", i, err)
		}
		c.dir.Add(node)
		c.nodes = append(c.nodes, node)
	}
	return c
}

// stop closes the nodes (at once: each may wait up to 1 s to revoke its
// lease when etcd is gone), then their clients.
func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Go(func() { n.Close() })
	}
	wg.Wait()
	for _, cli := range c.clients {
		cli.Close()
	}
	c.nodes, c.clients = nil, nil
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t tb, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		<-tick.C
	}
}

func waitServing(t tb, nodes ...*replica.Node) {
	t.Helper()
	for _, n := range nodes {
		waitFor(t, n.ID()+" serving", n.Serving)
	}
}

// mint builds a provider credential exactly as the runtime mints one (on a
// scratch store) and creates it through node. It returns the row and the
// token.
func mint(t tb, node *replica.Node, thread string) (*memdb.Credential, string, int64) {
	t.Helper()
	scratch, err := memdb.New()
	if err != nil {
		t.Fatal(err)
	}
	var row *memdb.Credential
	var tok string
	err = scratch.Write(func(w *memdb.Writer) error {
		row, tok, err = credential.MintProvider(w, thread, "codex", nil, time.Now(), 0)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rev, err := node.Create(ctx, row)
	if err != nil {
		t.Fatalf("create %s on %s: %v", row.ID, node.ID(), err)
	}
	return row, tok, rev
}

func revoke(t tb, node *replica.Node, id string) replica.RevokeResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := node.Revoke(ctx, id, credential.ReasonArchived, time.Now())
	if err != nil {
		t.Fatalf("revoke %s on %s: %v", id, node.ID(), err)
	}
	return res
}

// authenticates reports whether node's replica authenticates tok now.
func authenticates(node *replica.Node, tok string) bool {
	_, err := credential.Authenticate(node.Store().Read(), tok, time.Now())
	return err == nil
}

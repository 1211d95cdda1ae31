package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime"
	rtcluster "github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/internal/tlstest"
)

// Faults of several nodes (SPEC §5d.8): a node id that a live member
// holds, a restart within the lease, and the internal listener's mutual
// TLS. The quorum loss of a three-member etcd is in quorum_test.go.

// nodeOptions are what a test changes in a node's cluster settings.
type nodeOptions struct {
	// internalTLS is a node's mutual TLS on the internal listener; nil (or
	// a nil func): plain HTTP.
	internalTLS func(id string) *rtcluster.InternalTLS
	// wrapInternal, when set, wraps the internal listener's handler: a test
	// sees what reaches it.
	wrapInternal func(id string, h http.Handler) http.Handler
}

// startNode starts one runtime node as startRuntimes does, with id on the
// etcd endpoints, and returns New's error instead of failing when the
// node does not start. The node is shut down at cleanup.
func startNode(t testing.TB, etcd []string, id string, opts nodeOptions) (*rtNode, error) {
	t.Helper()
	internalLn, publicLn := listen(t), listen(t)
	var itls *rtcluster.InternalTLS
	if opts.internalTLS != nil {
		itls = opts.internalTLS(id)
	}
	scheme := "http://"
	if itls != nil {
		scheme = "https://"
	}
	cc := rtcluster.Config{
		Etcd: etcd, Node: id, URL: scheme + internalLn.Addr().String(), Secret: testSecret,
		InternalTLS: itls,
	}
	cfg := mcpruntime.Config{Cluster: cc, Endpoint: "http://" + publicLn.Addr().String() + "/mcp"}
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		internalLn.Close()
		publicLn.Close()
		return nil, err
	}
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		rt.Close()
		t.Fatalf("node %s: MCPHandler: %v", id, err)
	}
	internal := rt.InternalHandler()
	if opts.wrapInternal != nil {
		internal = opts.wrapInternal(id, internal)
	}
	node := &rtNode{
		id: id, rt: rt, ep: ep, mcpURL: cfg.Endpoint, internalAddr: internalLn.Addr().String(),
		internal: &http.Server{Handler: internal, ReadHeaderTimeout: 10 * time.Second, TLSConfig: cc.InternalServerTLS(), ErrorLog: quietLog},
		public:   &http.Server{Handler: ep, ReadHeaderTimeout: 10 * time.Second},
	}
	if itls != nil {
		go node.internal.ServeTLS(internalLn, "", "")
	} else {
		go node.internal.Serve(internalLn)
	}
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
	return node, nil
}

// mustStartNodes starts one node per id and waits until all serve and see
// each other.
func mustStartNodes(t testing.TB, etcd []string, opts nodeOptions, ids ...string) []*rtNode {
	t.Helper()
	nodes := make([]*rtNode, len(ids))
	rts := make([]*mcpruntime.Runtime, len(ids))
	for i, id := range ids {
		n, err := startNode(t, etcd, id, opts)
		if err != nil {
			t.Fatalf("node %s: New: %v", id, err)
		}
		nodes[i], rts[i] = n, n.rt
	}
	waitAllServing(t, rts...)
	return nodes
}

// servingLease is the lease the serving key of id is under now; 0 when
// the key is absent.
func servingLease(t testing.TB, cli *clientv3.Client, id string) int64 {
	t.Helper()
	resp, err := cli.Get(context.Background(), replica.ServingPrefix+id)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].Lease
}

// lost reports whether a runtime's Lost channel is closed.
func lost(rt *mcpruntime.Runtime) bool {
	select {
	case <-rt.Lost():
		return true
	default:
		return false
	}
}

// TestDuplicateNodeIsRefused: a node started with the id of a live member
// does not start: New fails with ErrNodeInUse, naming the id and what to
// do, and the member keeps its registration (the same lease), serves,
// authenticates and writes as before.
func TestDuplicateNodeIsRefused(t *testing.T) {
	endpoint := startEtcd(t)
	nodes := mustStartNodes(t, []string{endpoint}, nodeOptions{}, "n1", "n2")
	cli := newClient(t, endpoint)
	defer cli.Close()
	ps, tok := mintOn(t, nodes[0], "t1", "codex")
	before := servingLease(t, cli, "n1")

	dup, err := startNode(t, []string{endpoint}, "n1", nodeOptions{})
	if dup != nil || !errors.Is(err, rtcluster.ErrNodeInUse) {
		t.Fatalf("New with the live n1's id = %v, %v; want ErrNodeInUse", dup, err)
	}
	for _, want := range []string{`node id "n1" is in use`, "give this node an id of its own", "--node", nodes[0].internalAddr} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not say %q", err, want)
		}
	}
	if got := servingLease(t, cli, "n1"); got != before {
		t.Fatalf("n1's serving key is under lease %x after the refused start, want its own %x", got, before)
	}
	if lost(nodes[0].rt) || !nodes[0].rt.Node().Serving {
		t.Fatalf("n1 after a duplicate was refused: lost %v, node %+v; want it serving", lost(nodes[0].rt), nodes[0].rt.Node())
	}
	for _, n := range nodes {
		if st := n.rt.Node(); len(st.Members) != 2 {
			t.Errorf("%s sees members %v after the refused start, want n1 and n2", n.id, st.Members)
		}
	}
	if _, err := nodes[1].rt.Authenticate(tok); err != nil {
		t.Errorf("n1's credential on n2 after the refused start: %v", err)
	}
	if err := nodes[0].rt.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatalf("a write of n1 after the refused start: %v", err)
	}
	for _, n := range nodes {
		if _, err := n.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Errorf("n1's released credential on %s = %v, want ErrUnauthenticated", n.id, err)
		}
	}
}

// TestRestartWithinTheLease: a node that crashed (its process stopped
// dead: nothing renews its lease, its listeners are gone) and starts
// again with its own id while its old lease still holds the id waits the
// old lease out and joins: it serves, adopts its own thread again (the
// old provider sessions' credentials revoked, node_lost), and the old
// process, were it to run again, has lost its membership.
func TestRestartWithinTheLease(t *testing.T) {
	rep := replicas(t)
	endpoint := startEtcd(t)
	old := mustStartNodes(t, []string{endpoint}, nodeOptions{}, "n1")[0]
	cli := newClient(t, endpoint)
	defer cli.Close()
	_, tok := mintOn(t, old, "t1", "codex")
	crashed := rep("n1")
	crashed.Pause()
	defer crashed.Resume() // also when the test fails early: its cleanup shuts it down
	old.public.Close()
	old.internal.Close()
	held := servingLease(t, cli, "n1")
	if held == 0 {
		t.Fatal("the crashed n1's serving key is gone already: the test would not restart within the lease")
	}

	restarted, err := startNode(t, []string{endpoint}, "n1", nodeOptions{})
	if err != nil {
		t.Fatalf("restart of n1 within its old lease: %v", err)
	}
	if got := servingLease(t, cli, "n1"); got == 0 || got == held {
		t.Fatalf("n1's serving key after the restart is under lease %x, want a new one (the old was %x)", got, held)
	}
	waitAllServing(t, restarted.rt)
	waitAdopted(t, "t1", restarted)
	if _, err := restarted.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
		t.Errorf("the old process's credential after the restart adopted t1 = %v, want ErrUnauthenticated (node_lost)", err)
	}
	if _, tok2 := mintOn(t, restarted, "t1", "codex"); tok2 == "" {
		t.Fatal("no credential from the restarted n1")
	}
	crashed.Resume()
	waitFor(t, "the old n1 process to know it lost its membership", func() bool { return lost(old.rt) })
	if lost(restarted.rt) || !restarted.rt.Node().Serving {
		t.Errorf("the restarted n1 after the old process ran again: lost %v, node %+v; want it serving", lost(restarted.rt), restarted.rt.Node())
	}
}

// quietLog drops an internal listener's own messages: the handshakes the
// TLS tests make fail on purpose.
var quietLog = log.New(io.Discard, "", 0)

// TestInternalMutualTLS: three nodes whose internal listeners are mutual
// TLS work end to end — a mint's and a release's barrier confirmations
// reach the other nodes over it (each listener sees the revoker's client
// certificate), a request through another node is forwarded to the home
// over it — and the listener refuses in the handshake a client without a
// certificate, or with another CA's, although it sends the cluster secret;
// a certificate without the secret is still 403, and the handler served
// without TLS refuses the secret alone.
func TestInternalMutualTLS(t *testing.T) {
	ca, rogue := tlstest.NewCA(t, "cluster CA"), tlstest.NewCA(t, "rogue CA")
	var mu sync.Mutex
	seen := map[string][]string{} // node → "path from CN" of each request its internal listener admitted
	opts := nodeOptions{
		internalTLS: func(id string) *rtcluster.InternalTLS {
			cert, _, _ := ca.Issue(t, id, tlstest.Node, "127.0.0.1")
			return &rtcluster.InternalTLS{Certificate: cert, CA: ca.Pool}
		},
		wrapInternal: func(id string, h http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				from := "no certificate"
				if r.TLS != nil && len(r.TLS.PeerCertificates) > 0 {
					from = r.TLS.PeerCertificates[0].Subject.CommonName
				}
				mu.Lock()
				seen[id] = append(seen[id], r.URL.Path+" from "+from)
				mu.Unlock()
				h.ServeHTTP(w, r)
			})
		},
	}
	saw := func(id, what string) bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Contains(seen[id], what)
	}
	reset := func() {
		mu.Lock()
		defer mu.Unlock()
		clear(seen)
	}
	nodes := mustStartNodes(t, []string{startEtcd(t)}, opts, "n1", "n2", "n3")

	ps, tok := mintOn(t, nodes[0], "t1", "codex")
	reset()
	if err := nodes[0].rt.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatalf("ReleaseProviderSession on n1: %v", err)
	}
	for _, n := range nodes {
		if _, err := n.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Errorf("the released credential on %s = %v, want ErrUnauthenticated", n.id, err)
		}
	}
	for _, n := range nodes[1:] {
		if !saw(n.id, "/internal/confirm from n1") {
			t.Errorf("%s's internal listener saw no confirmation from n1's certificate for the release: %v", n.id, seen[n.id])
		}
	}

	_, tok = mintOn(t, nodes[0], "t1", "codex")
	if _, err := nodes[0].rt.StartRun(context.Background(), "t1", "codex"); err != nil {
		t.Fatal(err)
	}
	reset()
	resp, body := mcpPost(t, nodes[1].mcpURL, modernHeaders(tok, "tools/call", "thread_post"),
		`{"jsonrpc":"2.0","id":"p1","method":"tools/call","params":{"name":"thread_post","arguments":{"text":"via n2 over mTLS"},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"resultType":"complete"`) || strings.Contains(string(body), `"isError":true`) {
		t.Fatalf("thread_post through n2 over mTLS: %d %s", resp.StatusCode, body)
	}
	if !saw("n1", "/mcp from n2") {
		t.Errorf("n1's internal listener saw no forwarded request from n2's certificate: %v", seen["n1"])
	}
	if th, err := nodes[0].rt.Thread(context.Background(), "t1"); err != nil || len(th.Messages) != 1 {
		t.Fatalf("t1 after a post through n2 = %+v, %v; want its message", th, err)
	}

	// A client at n1's internal listener, with the secret, as a node's
	// confirmation would be.
	confirm := func(cert *tls.Certificate, secret string) (int, error) {
		tc := &tls.Config{RootCAs: ca.Pool}
		if cert != nil {
			tc.Certificates = []tls.Certificate{*cert}
		}
		tr := &http.Transport{TLSClientConfig: tc}
		defer tr.CloseIdleConnections()
		req, err := http.NewRequest(http.MethodGet, "https://"+nodes[0].internalAddr+"/internal/confirm?rev=1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if secret != "" {
			req.Header.Set(membership.NodeAuthHeader, secret)
		}
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	reset()
	foreign, _, _ := rogue.Issue(t, "n9", tlstest.Node, "127.0.0.1")
	if code, err := confirm(nil, testSecret); err == nil {
		t.Errorf("a client without a certificate, with the secret: %d, want refused in the TLS handshake", code)
	}
	if code, err := confirm(&foreign, testSecret); err == nil {
		t.Errorf("a client with another CA's certificate, with the secret: %d, want refused in the TLS handshake", code)
	}
	if len(seen["n1"]) != 0 {
		t.Errorf("requests refused in the handshake reached n1's handler: %v", seen["n1"])
	}
	own, _, _ := ca.Issue(t, "n9", tlstest.Node, "127.0.0.1")
	if code, err := confirm(&own, ""); err != nil || code != http.StatusForbidden {
		t.Errorf("a client with the CA's certificate, without the secret: %d, %v; want 403 (the secret is still required)", code, err)
	}
	if code, err := confirm(&own, testSecret); err != nil || code != http.StatusNoContent {
		t.Errorf("a client with the CA's certificate and the secret: %d, %v; want 204", code, err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/internal/confirm?rev=1", nil)
	req.Header.Set(membership.NodeAuthHeader, testSecret)
	nodes[0].rt.InternalHandler().ServeHTTP(rec, req)
	if rec.Code != http.StatusForbidden {
		t.Errorf("the internal handler under mutual TLS, served without TLS, with the secret: %d, want 403", rec.Code)
	}
}

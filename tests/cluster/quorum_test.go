package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/replica"
)

// etcdMember is one member of a multi-member embedded etcd: its name,
// data directory and loopback addresses stay across a stop and a start.
type etcdMember struct {
	name, dir, client, peer string
	cluster                 string // the initial cluster, name=peerURL,…
	srv                     *etcdServer
}

// startEtcdCluster starts an n-member etcd in this process (each member
// its own data directory and loopback ports) and waits until every
// member is ready. Each is closed at cleanup.
func startEtcdCluster(t *testing.T, n int) []*etcdMember {
	t.Helper()
	ports := freePorts(t, 2*n)
	members := make([]*etcdMember, n)
	var initial []string
	for i := range members {
		m := &etcdMember{
			name: fmt.Sprintf("m%d", i+1), dir: t.TempDir(),
			client: "127.0.0.1:" + ports[2*i], peer: "127.0.0.1:" + ports[2*i+1],
		}
		members[i] = m
		initial = append(initial, m.name+"=http://"+m.peer)
	}
	for _, m := range members {
		m.cluster = strings.Join(initial, ",")
		m.start(t)
	}
	// Whichever servers the members run at the end, closed after the nodes
	// started later are (cleanups run last-in first-out), one by one; then
	// etcd's peer connections, whose server side ends only at its read
	// timeout, are waited for (goleak).
	t.Cleanup(func() {
		for _, m := range members {
			m.srv.Close()
		}
		deadline := time.Now().Add(10 * time.Second)
		buf := make([]byte, 1<<20)
		for time.Now().Before(deadline) && strings.Contains(string(buf[:runtime.Stack(buf, true)]), "cmux.(*MuxConn).Read") {
			time.Sleep(50 * time.Millisecond)
		}
	})
	return members
}

// start starts the member (again: with its data directory, it rejoins
// the cluster it was in); waitReady waits for it. startEtcdCluster's
// cleanup closes it.
func (m *etcdMember) start(t *testing.T) {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.UnsafeNoFsync = true // test data only
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	client := url.URL{Scheme: "http", Host: m.client}
	peer := url.URL{Scheme: "http", Host: m.peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = m.cluster
	cfg.InitialClusterToken = "quorum-test"
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatalf("start etcd member %s: %v", m.name, err)
	}
	if m.srv != nil {
		m.srv.Close() // stopped already; a no-op, for the record
	}
	m.srv = &etcdServer{Etcd: e, Close: sync.OnceFunc(e.Close)}
}

func (m *etcdMember) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-m.srv.Server.ReadyNotify():
	case err := <-m.srv.Err():
		t.Fatalf("etcd member %s: %v", m.name, err)
	case <-time.After(30 * time.Second): // detects a hang only
		t.Fatalf("etcd member %s not ready within 30 s", m.name)
	}
}

// stop closes the member in the background (etcd's Close waits up to its
// request timeout, 7 s, for the streams open on it); the channel closes
// once it has.
func (m *etcdMember) stop() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.srv.Close()
	}()
	return done
}

func endpointsOf(members []*etcdMember) []string {
	var eps []string
	for _, m := range members {
		eps = append(eps, m.client)
	}
	return eps
}

// getStream opens a 2025 GET stream of session through url and returns a
// channel that closes once the stream has ended.
func getStream(t *testing.T, ctx context.Context, url, tok, session string) <-chan struct{} {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sessionHeaders(tok, session) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET stream through %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("GET stream through %s: %d", url, resp.StatusCode)
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, bufio.NewReader(resp.Body))
	}()
	return ended
}

// TestQuorumLoss: three runtime nodes on a three-member etcd. A
// credential is revoked, then two members stop: etcd has no quorum. Every
// node stops serving (Serving false, Authenticate ErrNodeUnavailable, the
// MCP endpoint 503 + Retry-After "node unavailable", its GET streams
// closed, also one forwarded through another node), and stays so while
// the quorum is lost, past the lease TTL. The two members start again:
// every node serves again as the same member (no Lost, the same members,
// homes unchanged) — etcd keeps the leases of a cluster without a leader
// and its next leader extends them, so the nodes' renewals succeed again
// (SPEC §5d.8). All the while, the revoked credential is accepted by no
// node (polled throughout); the live one is accepted again, its session
// kept, and a revoke after the loss holds on every node.
func TestQuorumLoss(t *testing.T) {
	members := startEtcdCluster(t, 3)
	nodes := mustStartNodes(t, endpointsOf(members), nodeOptions{}, "n1", "n2", "n3")
	rts := []*mcpruntime.Runtime{nodes[0].rt, nodes[1].rt, nodes[2].rt}
	ctx := context.Background()
	live, tokLive := mintOn(t, nodes[0], "t1", "codex")
	revoked, tokRevoked := mintOn(t, nodes[1], "t2", "codex")
	session := initialize(t, nodes[0].mcpURL, tokLive)
	other := initialize(t, nodes[2].mcpURL, tokLive) // one GET stream per session
	streamCtx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	streams := map[string]<-chan struct{}{
		"on the home n1":  getStream(t, streamCtx, nodes[0].mcpURL, tokLive, session),
		"forwarded by n3": getStream(t, streamCtx, nodes[2].mcpURL, tokLive, other),
	}

	if err := nodes[1].rt.ReleaseProviderSession(ctx, revoked.ID); err != nil {
		t.Fatalf("ReleaseProviderSession on n2: %v", err)
	}
	// From the release on, no node may accept the revoked token: poll every
	// node until the end of the test.
	var accepted atomic.Value // the first acceptance seen, a string
	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	var polls atomic.Int64
	go func() {
		defer close(polled)
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, n := range nodes {
				if p, err := n.rt.Authenticate(tokRevoked); err == nil {
					accepted.CompareAndSwap(nil, fmt.Sprintf("%s accepted the revoked token as %+v", n.id, p))
				}
				polls.Add(1)
			}
			select {
			case <-stopPoll:
				return
			case <-tick.C:
			}
		}
	}()
	defer func() {
		close(stopPoll)
		<-polled
		if a := accepted.Load(); a != nil {
			t.Errorf("revoked before the quorum loss, yet: %s", a)
		}
		t.Logf("the revoked token polled %d times on the nodes", polls.Load())
	}()

	// Quorum lost: the two followers stop (a leader's Close would first
	// hand its leadership over). A member's raft stops at the end of its
	// Close, which first waits for the streams open on it.
	var followers []*etcdMember
	for _, m := range members {
		if m.srv.Server.Leader() != m.srv.Server.MemberID() {
			followers = append(followers, m)
		}
	}
	if len(followers) != 2 {
		t.Fatalf("%d followers in a three-member etcd, want 2", len(followers))
	}
	for _, ch := range []<-chan struct{}{followers[0].stop(), followers[1].stop()} {
		select {
		case <-ch:
		case <-time.After(30 * time.Second): // detects a hang only
			t.Fatal("an etcd member did not close within 30 s")
		}
	}
	lossAt := time.Now()
	for _, n := range nodes {
		waitFor(t, n.id+" to stop serving once etcd lost its quorum", func() bool { return !n.rt.Node().Serving })
	}
	for what, ended := range streams {
		select {
		case <-ended:
		case <-time.After(10 * time.Second): // detects a hang only
			t.Fatalf("the GET stream %s did not end once the nodes stopped serving", what)
		}
	}
	wantUnavailable := func(when string) {
		t.Helper()
		for _, n := range nodes {
			for _, tok := range []string{tokLive, tokRevoked} {
				if _, err := n.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrNodeUnavailable) {
					t.Errorf("Authenticate on %s %s = %v, want ErrNodeUnavailable", n.id, when, err)
				}
			}
			resp, body := mcpPost(t, n.mcpURL, modernHeaders(tokLive, "tools/list", ""), `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
			var msg struct {
				Error struct{ Message string } `json:"error"`
			}
			if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
				json.Unmarshal(body, &msg) != nil || msg.Error.Message != "node unavailable" {
				t.Errorf("the MCP endpoint of %s %s: %d (Retry-After %q) %s, want 503 + Retry-After, \"node unavailable\"",
					n.id, when, resp.StatusCode, resp.Header.Get("Retry-After"), body)
			}
		}
	}
	wantUnavailable("without quorum")
	// Hold the loss past the lease TTL: each node's own lease deadline
	// passes, and etcd has no leader to expire anything.
	time.Sleep(time.Until(lossAt.Add(replica.DefaultLeaseTTL*time.Second + time.Second)))
	wantUnavailable("past the lease TTL without quorum")

	// Quorum regained.
	for _, m := range followers {
		m.start(t)
	}
	for _, m := range followers {
		m.waitReady(t)
	}
	waitAllServing(t, rts...)
	// From here on a node may still stop serving for a moment (etcd's
	// members settle their leadership): a revoked token must be refused,
	// as unknown or as unavailable, and what must be accepted is waited
	// for.
	refused := func(err error) bool {
		return errors.Is(err, mcpruntime.ErrUnauthenticated) || errors.Is(err, mcpruntime.ErrNodeUnavailable)
	}
	for _, n := range nodes {
		if lost(n.rt) {
			t.Errorf("%s lost its membership over the quorum loss; want it kept (etcd extends the leases)", n.id)
		}
		waitFor(t, "the live credential accepted on "+n.id+" once the quorum is back", func() bool {
			p, err := n.rt.Authenticate(tokLive)
			return err == nil && p.CredentialID == live.CredentialID
		})
		if _, err := n.rt.Authenticate(tokRevoked); !refused(err) {
			t.Errorf("the revoked credential on %s once the quorum is back = %v, want it refused", n.id, err)
		}
		resp, body := mcpPost(t, n.mcpURL, modernHeaders(tokRevoked, "tools/list", ""), `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{}}`)
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("the revoked token at %s's MCP endpoint once the quorum is back: %d %s, want 401 (or 503)", n.id, resp.StatusCode, body)
		}
		waitFor(t, "the session kept over the loss answering through "+n.id, func() bool {
			resp, _ := mcpPost(t, n.mcpURL, sessionHeaders(tokLive, session), `{"jsonrpc":"2.0","id":5,"method":"ping"}`)
			return resp.StatusCode == http.StatusOK
		})
	}
	for _, th := range []struct{ id, home string }{{"t1", "n1"}, {"t2", "n2"}} {
		for _, n := range nodes {
			if got, err := n.rt.Thread(ctx, th.id); err != nil || got.Home != th.home {
				t.Errorf("%s on %s once the quorum is back = %+v, %v; want its home %s kept", th.id, n.id, got, err, th.home)
			}
		}
	}
	if err := nodes[0].rt.ReleaseProviderSession(ctx, live.ID); err != nil {
		t.Fatalf("a release once the quorum is back: %v", err)
	}
	for _, n := range nodes {
		if _, err := n.rt.Authenticate(tokLive); !refused(err) {
			t.Errorf("the credential released once the quorum is back, on %s = %v, want it refused", n.id, err)
		}
	}
}

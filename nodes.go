package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// ErrNotHome is returned for a thread or client grant whose actor runs on
// another node of the cluster (SPEC §5d): call the runtime on its home
// node. The error is a *NotHomeError, which names it.
var ErrNotHome = errors.New("runtime: on another node")

// ErrNodeUnavailable is returned by Authenticate while this node cannot
// prove its replica current (SPEC §5d.2): it serves nothing until it can.
var ErrNodeUnavailable = errors.New("runtime: node unavailable")

// NotHomeError says which node a thread or client grant lives on.
type NotHomeError struct {
	Kind, ID string // "thread" or "client", and its id
	Home     string // the node its actor runs on
}

func (e *NotHomeError) Error() string {
	return fmt.Sprintf("%s %s lives on node %s", e.Kind, e.ID, e.Home)
}

// Is makes a *NotHomeError match ErrNotHome.
func (e *NotHomeError) Is(target error) bool { return target == ErrNotHome }

// Cluster makes the runtime one node of several (SPEC §5d). The package
// [github.com/agenthost/mcpruntime/cluster] implements it on etcd: set
// Config.Cluster to a cluster.Config. Nil, the default, is one node, in
// memory, and links no etcd client.
type Cluster interface {
	// Join starts this node's membership, whose store the runtime then
	// uses. New calls it once, and closes the node when the runtime
	// closes.
	Join(membership.Options) (membership.Node, error)
}

// clusterNode is the runtime's membership of several nodes.
type clusterNode struct {
	membership.Node
	rt   atomic.Pointer[Runtime] // set once the runtime is built
	http *http.Client            // OAuth's requests to other nodes (nodes_oauth.go)

	// wrote holds, by principal namespace, when the answer of a request
	// this node forwarded to the principal's home (a write, perhaps) ended:
	// until the node's replica is proven current since then, the
	// principal's reads go to the home too (read-your-writes, SPEC §5d.6).
	// Entries older than the latest proof are dropped as others come.
	wroteMu sync.Mutex
	wrote   map[string]time.Time
}

// joinCluster starts the node's membership of c.
func joinCluster(c Cluster, cfg Config) (*clusterNode, error) {
	if err := checkClusterOAuth(cfg.OAuth); err != nil {
		return nil, err
	}
	n := &clusterNode{}
	m, err := c.Join(membership.Options{OnUnavailable: n.unavailable, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	n.Node = m
	n.http = newNodeClient(m.ClientTLS())
	return n, nil
}

// Close leaves the cluster and closes the idle connections to the other
// nodes.
func (n *clusterNode) Close() error {
	n.http.CloseIdleConnections()
	return n.Node.Close()
}

// unavailable is the membership's OnUnavailable: every stream of the
// node's endpoints closes (SPEC §5d.2); their sessions stay.
func (n *clusterNode) unavailable() {
	if r := n.rt.Load(); r != nil {
		r.mu.Lock()
		eps := slices.Clone(r.servers)
		r.mu.Unlock()
		for _, ep := range eps {
			ep.srv.CloseStreamsUnavailable()
		}
	}
}

// node is this node's id; "" on one node.
func (r *Runtime) node() string {
	if r.cluster == nil {
		return ""
	}
	return r.cluster.ID()
}

// serving reports whether the node may serve: on one node, unless its
// state file refused a write (SPEC §3.8).
func (r *Runtime) serving() bool {
	return (r.cluster == nil || r.cluster.Serving()) && (r.state == nil || !r.state.Broken())
}

// notHome explains a thread without an actor here, on several nodes: a
// *NotHomeError when it lives on another node, ErrUnavailable while this
// node is adopting it (its row names this node, its actor is not started
// yet), nil when it does not exist.
func (r *Runtime) notHome(id string) error {
	if r.cluster == nil {
		return nil
	}
	t, err := r.store.Read().Thread(id)
	switch {
	case err != nil:
		return nil
	case t.Home == r.node():
		return fmt.Errorf("thread %s is being adopted by this node: %w", id, ErrUnavailable)
	}
	return &NotHomeError{Kind: "thread", ID: id, Home: t.Home}
}

// noGrant explains a client grant without an actor here: a *NotHomeError
// when it lives on another node (several nodes), ErrUnavailable while this
// node is adopting it (its row names this node, its actor is not started
// yet), else ErrUnknownClient.
func (r *Runtime) noGrant(id string) error {
	if r.cluster != nil {
		if g, err := r.store.Read().ClientGrant(id); err == nil && g.State == memdb.StateLive {
			if g.Home != r.node() {
				return &NotHomeError{Kind: "client", ID: id, Home: g.Home}
			}
			return fmt.Errorf("client %s is being adopted by this node: %w", id, ErrUnavailable)
		}
	}
	return fmt.Errorf("client %q: %w", id, ErrUnknownClient)
}

// dropThread stops a thread actor that CreateThread started for a thread
// another node created first.
func (r *Runtime) dropThread(id string, pid *actor.PID) {
	r.mu.Lock()
	if r.threads[id] == pid {
		delete(r.threads, id)
	}
	r.mu.Unlock()
	_ = r.root.StopFuture(pid).Wait()
}

// route is the base of the endpoint's Route (SPEC §5d.6): a request of a
// principal whose thread (or client grant) lives on another node goes to
// that node's internal listener, whose base URL it returns — unless it is
// a read this node answers itself (readHere); nil when it is served here.
// A home that is no member is an error, but for a read answered here.
// here is true for a read answered here though its home is another node
// (or gone: a read needs no home).
func (r *Runtime) route(p Principal, req transport.RouteRequest) (home *url.URL, here bool, err error) {
	home, err = r.homeOf(p)
	switch {
	case home == nil && err == nil:
		return nil, false, nil
	case r.readHere(p, req):
		return nil, true, nil
	}
	return home, false, err
}

// readMethods are the 2026-07-28 methods that only read: a node answers
// them from its replica wherever the caller's home is. tools/call is one
// when its tool is not a mutation (readTool).
var readMethods = map[string]bool{
	"tools/list": true, "resources/list": true, "resources/templates/list": true,
	"resources/read": true, "prompts/list": true, "prompts/get": true,
	"completion/complete": true, "server/discover": true, "ping": true,
}

// isRead reports whether req names a 2026-07-28 read: a method of
// readMethods, or a tools/call of a tool that is not a mutation (read,
// readAsCaller, act: none writes a thread). A request of a 2025 session
// never is: its session lives on its home.
func (r *Runtime) isRead(req transport.RouteRequest) bool {
	if req.Method == "tools/call" {
		t, ok := r.tools.get(req.Name)
		return ok && t.Access != AccessMutate
	}
	return readMethods[req.Method]
}

// readHere reports whether this node answers a read of p itself, from its
// replica, though p's home is another node (SPEC §5d.6): req is a read
// (isRead) and the replica holds every write p may read back — the
// revision the request asks for (Mcp-Runtime-Revision, waited for at most
// F), and p's writes this node forwarded to its home (its replica proven
// current since their answers ended). Otherwise the home answers it.
func (r *Runtime) readHere(p Principal, req transport.RouteRequest) bool {
	if !r.isRead(req) {
		return false
	}
	n := r.cluster
	if req.Revision > 0 && n.Status().Applied < req.Revision {
		ctx, cancel := context.WithTimeout(r.base, n.Fence())
		defer cancel()
		if n.WaitApplied(ctx, req.Revision) != nil {
			return false
		}
	}
	n.wroteMu.Lock()
	at, ok := n.wrote[p.Namespace]
	n.wroteMu.Unlock()
	return !ok || n.confirmedSince(at)
}

// confirmedSince reports whether the replica was proven current (the
// fence) after t: every write whose answer ended before t is applied.
func (n *clusterNode) confirmedSince(t time.Time) bool {
	st := n.Status()
	return st.SinceConfirmed >= 0 && time.Since(t) > st.SinceConfirmed
}

// forwarded is the endpoint's Forwarded: a request of p that is not a
// read went to its home, and its answer has ended; p's reads here wait
// for the replica to be proven current since.
func (r *Runtime) forwarded(p Principal, req transport.RouteRequest) {
	if r.isRead(req) {
		return
	}
	n := r.cluster
	now := time.Now()
	n.wroteMu.Lock()
	defer n.wroteMu.Unlock()
	if n.wrote == nil {
		n.wrote = map[string]time.Time{}
	}
	if len(n.wrote) >= maxWrote {
		for ns, at := range n.wrote {
			if n.confirmedSince(at) {
				delete(n.wrote, ns)
			}
		}
	}
	n.wrote[p.Namespace] = now
}

// maxWrote is how many principals' forwarded writes a node remembers
// before it drops those its replica has caught up with. Past that many
// still pending (more principals writing through this node within one
// fence than this), it remembers them all: the map holds at most the
// principals that wrote through the node within about F.
const maxWrote = 1024

// homeOf is the internal listener of p's home node; nil when it is this
// node (or p's thread or grant is gone: served here, where the request
// fails as it would anywhere).
func (r *Runtime) homeOf(p Principal) (*url.URL, error) {
	if r.cluster == nil {
		return nil, nil
	}
	rd := r.store.Read()
	var home string
	switch {
	case p.Provider():
		t, err := rd.Thread(p.Thread)
		if err != nil {
			return nil, nil // gone since: served here, where the request fails as it would anywhere
		}
		home = t.Home
	default:
		g, err := rd.ClientGrant(p.Client)
		if err != nil {
			return nil, nil
		}
		home = g.Home
	}
	if home == "" || home == r.node() {
		return nil, nil
	}
	m, ok := r.cluster.Member(home)
	if !ok || m.URL == "" {
		return nil, fmt.Errorf("node %s is not a member", home)
	}
	u, err := url.Parse(m.URL)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", home, err)
	}
	return u, nil
}

// InternalHandler is the node's internal listener (several nodes, SPEC
// §5d): the revokers' confirmations (at /internal/confirm) and the MCP
// requests other nodes forward here (at the MCP endpoint's path), both
// only with the cluster's secret. Serve it on an
// address the other nodes reach (cluster.Config.URL) and no client does.
// On one node it answers 404 to everything.
func (r *Runtime) InternalHandler() http.Handler {
	if r.cluster == nil {
		return http.NotFoundHandler()
	}
	mux := http.NewServeMux()
	mux.Handle(membership.ConfirmPath, r.cluster.ConfirmHandler())
	mux.HandleFunc("/internal/oauth/", r.serveOAuthInternal)
	mux.HandleFunc("/", r.serveForwarded)
	return r.cluster.NodeAuth(mux)
}

// serveForwarded serves a forwarded MCP request on the runtime's first
// MCP endpoint (a node of several serves one).
func (r *Runtime) serveForwarded(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	var ep *MCPEndpoint
	if len(r.servers) > 0 {
		ep = r.servers[0]
	}
	r.mu.Unlock()
	if ep == nil {
		http.Error(w, "no MCP endpoint", http.StatusServiceUnavailable)
		return
	}
	ep.srv.ServeForwarded(w, req)
}

// Lost is closed once this node has stopped serving for good: it lost its
// membership of the cluster (its lease lapsed: a pause or a partition
// longer than the lease), its replica's watch failed, or the runtime shut
// down. A node that lost its membership must not linger: shut the runtime
// down and start a new one, which joins as a new member with a fresh
// replica (cmd/runtime exits, for its supervisor to restart it). On one
// node it is never closed.
func (r *Runtime) Lost() <-chan struct{} {
	if r.cluster == nil {
		return nil
	}
	return r.cluster.Stopped()
}

// Node describes this node of a cluster, for operators.
type Node struct {
	ID      string // "" on one node
	Serving bool   // whether it serves now (always on one node)
	Applied int64  // the etcd revision its replica has applied; 0 on one node
	// Lag is how many etcd revisions the replica was behind at the fence's
	// latest read.
	Lag int64
	// SinceConfirmed is the age of the latest proof that the replica is
	// current (the fence); negative when there is none, 0 on one node.
	SinceConfirmed time.Duration
	Members        []string // the members this node sees, itself included, by id
}

// Node returns this node's state.
func (r *Runtime) Node() Node {
	if r.cluster == nil {
		return Node{Serving: true}
	}
	st := r.cluster.Status()
	n := Node{ID: r.node(), Serving: st.Serving, Applied: st.Applied, Lag: st.Lag, SinceConfirmed: st.SinceConfirmed}
	for _, m := range r.cluster.Members() {
		n.Members = append(n.Members, m.ID)
	}
	return n
}

// Package membership is what the runtime needs of its membership of
// several nodes (SPEC §5d), as an interface: the replicated store, this
// node's id and fence, the other members, and the node-to-node
// listener's pieces. The package cluster implements it on etcd
// (internal/replica); the module root uses only this package, so that a
// runtime on one node links no etcd client.
//
// It imports nothing but memdb and the standard library: keep it a leaf.
package membership

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"time"

	"github.com/agenthost/mcpruntime/memdb"
)

// Paths and headers of the node-to-node (internal) listener.
const (
	// ConfirmPath answers a revoker's barrier: GET ConfirmPath?rev=R.
	ConfirmPath = "/internal/confirm"
	// NodeAuthHeader carries the cluster's node-to-node secret on every
	// request between nodes.
	NodeAuthHeader = "Mcpruntime-Node-Auth"
)

// Member is a node's registration: its id and its internal listener.
type Member struct {
	ID  string `json:"id"`
	URL string `json:"url,omitempty"` // its internal listener; "" when it has none
}

// Status is a node's replica and fence, for operators' metrics.
type Status struct {
	Serving bool
	Applied int64 // the revision the replica has applied
	// Lag is how many revisions the replica was behind the shared log at
	// the latest fence read (0 when it had caught up by then).
	Lag int64
	// SinceConfirmed is the age of the latest proof that the replica is
	// current; negative when there is none.
	SinceConfirmed time.Duration
}

// Options are what the runtime hands to a join.
type Options struct {
	// OnUnavailable, when set, is called (on a goroutine of the node's)
	// each time the node stops serving: the runtime closes its streams.
	OnUnavailable func()
	// Logger receives the node's events. Nil: discarded.
	Logger *slog.Logger
}

// Node is one node's membership of a cluster. Its methods are safe for
// concurrent use.
type Node interface {
	// Store is the node's replica: the runtime's store, whose writes
	// commit through the cluster.
	Store() *memdb.Store
	// ID is this node's id, unique in the cluster.
	ID() string
	// Secret is the node-to-node secret, sent in NodeAuthHeader on every
	// request to another node.
	Secret() string
	// ClientTLS is the TLS configuration of this node's requests to the
	// other nodes' internal listeners (mutual TLS: its certificate, the
	// cluster's CA); nil when they speak plain HTTP.
	ClientTLS() *tls.Config
	// Serving reports whether the node may serve now: its replica proved
	// current within the fence.
	Serving() bool
	// Status returns the node's replica and fence now.
	Status() Status
	// Fence is F: how long a proof that the replica is current lets the
	// node serve.
	Fence() time.Duration
	// WaitApplied returns once the replica has applied rev (a revision of
	// the shared log), or ctx's error, or an error once the replica
	// stopped.
	WaitApplied(ctx context.Context, rev int64) error
	// Member returns the member with id as this node last saw it; ok is
	// false when it is not a member.
	Member(id string) (m Member, ok bool)
	// Members lists the members this node sees, itself included, by id.
	Members() []Member
	// MemberGone receives a value after a member left; several departures
	// may share one value.
	MemberGone() <-chan struct{}
	// ThreadExists reports whether thread id's row is in the shared log
	// now (a linearizable read), whatever this node's replica has applied.
	ThreadExists(ctx context.Context, id string) bool
	// ConfirmHandler answers other nodes' confirmations at ConfirmPath.
	// Mount it behind NodeAuth.
	ConfirmHandler() http.Handler
	// NodeAuth admits only requests that carry the secret in
	// NodeAuthHeader (and, under mutual TLS, a verified client
	// certificate); others get 403.
	NodeAuth(next http.Handler) http.Handler
	// Stopped is closed once the node has stopped serving for good: it
	// lost its membership, its replica's watch failed, or it was closed.
	Stopped() <-chan struct{}
	// Close leaves the cluster and releases the node's connections.
	Close() error
}

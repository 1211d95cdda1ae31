package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
)

// Defaults and bounds of [Config].
const (
	// DefaultFence is Config.Fence's default.
	DefaultFence = replica.DefaultFence
	// DefaultDialTimeout is Config.DialTimeout's default.
	DefaultDialTimeout = 5 * time.Second
	// MinSecret is the shortest node-to-node secret accepted, in bytes.
	MinSecret = 32
)

// Config makes the runtime one node of several that share an etcd
// cluster (SPEC §5d): set it as mcpruntime.Config.Cluster. Every field
// but the TLS and auth to etcd, Fence and DialTimeout is required.
type Config struct {
	// Etcd are the etcd endpoints: host:port or http(s)://host:port.
	Etcd []string
	// EtcdTLS, when set, is the TLS configuration for etcd (a CA, and a
	// client certificate for etcd's client-certificate auth).
	EtcdTLS *tls.Config
	// EtcdUsername and EtcdPassword authenticate to etcd when its auth is
	// on. Empty: none.
	EtcdUsername, EtcdPassword string
	// Node is this node's id, unique in the cluster: letters, digits, '.',
	// '_' and '-', at most 64.
	Node string
	// URL is where the other nodes reach this node's internal listener
	// (Runtime.InternalHandler), scheme://host:port without a path, e.g.
	// "http://10.0.0.5:7441".
	URL string
	// Secret is the node-to-node secret, the same on every node, at least
	// MinSecret bytes. Every internal request carries it.
	Secret string
	// Fence is F: how long one proof that the replica is current lets the
	// node serve, and so how long a revoke waits at most for a node that
	// does not answer. Below 1 s, so that streams close within 1 s. Zero:
	// DefaultFence (500 ms).
	Fence time.Duration
	// DialTimeout bounds connecting to etcd at start. Zero:
	// DefaultDialTimeout.
	DialTimeout time.Duration
}

// Validate reports the first setting of c that is missing or malformed;
// the error matches mcpruntime.ErrInvalidArgument. Join validates first.
func (c Config) Validate() error {
	if len(c.Etcd) == 0 {
		return fmt.Errorf("cluster: no etcd endpoints: %w", fault.ErrInvalidArgument)
	}
	if !validNode(c.Node) {
		return fmt.Errorf("cluster: node id %q: letters, digits, '.', '_', '-', at most 64: %w", c.Node, fault.ErrInvalidArgument)
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return fmt.Errorf("cluster: URL %q: want the internal listener's scheme://host:port, no path: %w", c.URL, fault.ErrInvalidArgument)
	}
	if len(c.Secret) < MinSecret {
		return fmt.Errorf("cluster: secret: at least %d bytes: %w", MinSecret, fault.ErrInvalidArgument)
	}
	if c.Fence < 0 || c.Fence >= time.Second {
		return fmt.Errorf("cluster: fence %v: want below 1s: %w", c.Fence, fault.ErrInvalidArgument)
	}
	return nil
}

// validNode reports whether id is a node id: 1 to 64 letters, digits,
// '.', '_' and '-', not only dots.
func validNode(id string) bool {
	if len(id) == 0 || len(id) > 64 {
		return false
	}
	dots := true
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
		dots = dots && c == '.'
	}
	return !dots
}

// Join validates c, connects to etcd and starts this node's replica,
// whose store the runtime then uses. mcpruntime.New calls it, once; an
// embedder does not.
func (c Config) Join(opts membership.Options) (membership.Node, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	dial := c.DialTimeout
	if dial <= 0 {
		dial = DefaultDialTimeout
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Etcd, TLS: c.EtcdTLS, Username: c.EtcdUsername, Password: c.EtcdPassword,
		DialTimeout: dial, Logger: zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("cluster: connect to etcd: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dial)
	defer cancel()
	rep, err := replica.Start(ctx, replica.Config{
		Client: cli, Node: c.Node, Fence: c.Fence, URL: c.URL, Secret: c.Secret,
		OnUnavailable: opts.OnUnavailable, Logger: opts.Logger,
	})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &node{Node: rep, cli: cli, secret: c.Secret}, nil
}

// node is a replica with the etcd client it owns.
type node struct {
	*replica.Node
	cli    *clientv3.Client
	secret string
}

var _ membership.Node = (*node)(nil)

func (n *node) Secret() string { return n.secret }

func (n *node) NodeAuth(next http.Handler) http.Handler { return replica.NodeAuth(n.secret, next) }

// ThreadExists reads thread id's row from etcd (a linearizable read): for
// a create whose write was refused before this node's replica applied
// the row that refused it.
func (n *node) ThreadExists(ctx context.Context, id string) bool {
	resp, err := n.cli.Get(ctx, replica.TableKey(memdb.TableThreads, id), clientv3.WithCountOnly())
	return err == nil && resp.Count > 0
}

// Close stops the replica (its lease is revoked: the node leaves) and
// closes the etcd client.
func (n *node) Close() error {
	err := n.Node.Close()
	return errors.Join(err, n.cli.Close())
}

package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
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

// ErrNodeInUse is returned by Join (and so by mcpruntime.New) when a live
// member already holds the node's id: its registration outlived its
// lease's TTL, so that member keeps renewing it (SPEC §5d.8). A node
// restarting after a crash with its own id waits out its old lease
// instead, and joins.
var ErrNodeInUse = replica.ErrNodeInUse

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
	// MinSecret bytes. Every internal request carries it, with InternalTLS
	// too.
	Secret string
	// InternalTLS, when set, makes the internal listener mutual TLS: it
	// serves TLS (InternalServerTLS) and admits only clients with a
	// certificate of the cluster's CA, and every request this node sends
	// to another's internal listener presents this node's certificate and
	// verifies the other's (InternalClientTLS). URL is then https://. Nil:
	// plain HTTP, for a private network.
	InternalTLS *InternalTLS
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
	if err := c.InternalTLS.validate(u); err != nil {
		return err
	}
	if len(c.Secret) < MinSecret {
		return fmt.Errorf("cluster: secret: at least %d bytes: %w", MinSecret, fault.ErrInvalidArgument)
	}
	if c.Fence < 0 || c.Fence >= time.Second {
		return fmt.Errorf("cluster: fence %v: want below 1s: %w", c.Fence, fault.ErrInvalidArgument)
	}
	return nil
}

// InternalTLS is the mutual TLS of the internal listener (SPEC §5d.8).
// Each node has a certificate of the cluster's CA, which it presents both
// as the listener's server certificate and as its client certificate to
// the other nodes; a peer whose certificate does not chain to the CA is
// refused in the handshake, either way. The cluster secret is still
// required on every request: a certificate admits a node of this CA, the
// secret a node of this cluster.
type InternalTLS struct {
	// Certificate is this node's certificate (leaf first, then any
	// intermediates) and its private key. Its names must cover the host of
	// Config.URL, and its extended key usages, if it has any, must include
	// both server and client authentication (etcd's peer certificates are
	// made so). Read once, at Join: a new certificate takes a restart.
	Certificate tls.Certificate
	// CA holds the cluster's CA certificates: every other node's
	// certificate must chain to one of them.
	CA *x509.CertPool
}

// validate checks t against the internal listener's URL u: the
// certificate chains to the CA for both uses and names u's host, so that
// a wrong file fails at start rather than in every handshake.
func (t *InternalTLS) validate(u *url.URL) error {
	if t == nil {
		return nil
	}
	switch {
	case u.Scheme != "https":
		return fmt.Errorf("cluster: URL %q: the internal listener speaks TLS (InternalTLS): want https://: %w", u, fault.ErrInvalidArgument)
	case t.CA == nil:
		return fmt.Errorf("cluster: internal TLS: no CA: %w", fault.ErrInvalidArgument)
	case len(t.Certificate.Certificate) == 0 || t.Certificate.PrivateKey == nil:
		return fmt.Errorf("cluster: internal TLS: no certificate and key: %w", fault.ErrInvalidArgument)
	}
	leaf, err := x509.ParseCertificate(t.Certificate.Certificate[0])
	if err != nil {
		return fmt.Errorf("cluster: internal TLS: certificate: %v: %w", err, fault.ErrInvalidArgument)
	}
	inter := x509.NewCertPool()
	for _, der := range t.Certificate.Certificate[1:] {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return fmt.Errorf("cluster: internal TLS: intermediate certificate: %v: %w", err, fault.ErrInvalidArgument)
		}
		inter.AddCert(c)
	}
	for _, use := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: t.CA, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{use}}); err != nil {
			return fmt.Errorf("cluster: internal TLS: the certificate of %q is not one of the CA's for server and client authentication: %v: %w", leaf.Subject.CommonName, err, fault.ErrInvalidArgument)
		}
	}
	host := u.Hostname()
	if err := leaf.VerifyHostname(host); err != nil {
		return fmt.Errorf("cluster: internal TLS: the certificate does not name the URL's host %s, which the other nodes check: %v: %w", net.JoinHostPort(host, u.Port()), err, fault.ErrInvalidArgument)
	}
	return nil
}

// InternalServerTLS is the TLS configuration of the internal listener
// under InternalTLS: this node's certificate, TLS 1.3, and a client
// certificate of the CA required in the handshake. Nil without
// InternalTLS. Serve Runtime.InternalHandler with it:
//
//	srv := &http.Server{Handler: rt.InternalHandler(), TLSConfig: cfg.InternalServerTLS()}
//	srv.ServeTLS(ln, "", "")
func (c Config) InternalServerTLS() *tls.Config {
	if c.InternalTLS == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.InternalTLS.Certificate},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    c.InternalTLS.CA,
	}
}

// InternalClientTLS is the TLS configuration of this node's requests to
// the other nodes' internal listeners under InternalTLS (the revokes'
// confirmations, forwarded MCP requests): its certificate as the client
// certificate, and the other's verified against the CA and the host of
// its URL. Nil without InternalTLS.
func (c Config) InternalClientTLS() *tls.Config {
	if c.InternalTLS == nil {
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{c.InternalTLS.Certificate},
		RootCAs:      c.InternalTLS.CA,
	}
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
	// Connecting and loading the replica, then the registration, which may
	// wait out the lease of a crashed process that held this id.
	ctx, cancel := context.WithTimeout(context.Background(), dial+registerWait)
	defer cancel()
	clientTLS := c.InternalClientTLS()
	var confirms *http.Transport // nil: the replica's own, plain HTTP
	var confirmClient *http.Client
	if clientTLS != nil {
		confirms = &http.Transport{TLSClientConfig: clientTLS, MaxIdleConnsPerHost: 4}
		confirmClient = &http.Client{Transport: confirms}
	}
	rep, err := replica.Start(ctx, replica.Config{
		Client: cli, Node: c.Node, Fence: c.Fence, URL: c.URL, Secret: c.Secret, HTTPClient: confirmClient,
		OnUnavailable: opts.OnUnavailable, Logger: opts.Logger,
	})
	if err != nil {
		cli.Close()
		return nil, fmt.Errorf("cluster: %w", err)
	}
	return &node{Node: rep, cli: cli, secret: c.Secret, clientTLS: clientTLS, confirms: confirms}, nil
}

// registerWait bounds the wait for this node's id to be free: the lease
// TTL of the process that held it (with the clock-rate bound) and etcd's
// time to delete its key.
const registerWait = replica.DefaultLeaseTTL*time.Second*101/100 + replica.TakeoverGrace + time.Second

// node is a replica with the etcd client it owns.
type node struct {
	*replica.Node
	cli       *clientv3.Client
	secret    string
	clientTLS *tls.Config     // InternalClientTLS; nil: plain HTTP
	confirms  *http.Transport // the confirmations' transport under InternalTLS; nil: the replica's own
}

var _ membership.Node = (*node)(nil)

func (n *node) Secret() string { return n.secret }

func (n *node) ClientTLS() *tls.Config { return n.clientTLS }

// NodeAuth admits requests with the cluster secret and, under
// InternalTLS, only over TLS with a client certificate the handshake
// verified: an internal listener served without InternalServerTLS by
// mistake refuses everything rather than admit a request with the secret
// alone.
func (n *node) NodeAuth(next http.Handler) http.Handler {
	h := replica.NodeAuth(n.secret, next)
	if n.clientTLS == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

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
	if n.confirms != nil {
		n.confirms.CloseIdleConnections()
	}
	return errors.Join(err, n.cli.Close())
}

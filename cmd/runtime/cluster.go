package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/cluster"
)

// envEtcdPassword is etcd's password for --etcd-username: env only, never a
// flag or a file key, like the admin token.
const envEtcdPassword = "RUNTIME_ETCD_PASSWORD"

// exitLost is the exit status of a node that lost its cluster membership
// (Runtime.Lost): its supervisor restarts it, and it joins again as a new
// member with a fresh replica. 1 is any other failure, 2 a bad setting.
const exitLost = 3

// errLost is what serve returns when the node lost its membership.
var errLost = errors.New("lost the cluster membership (lease lapsed or replica stopped); exiting so that a restart joins as a new member")

// clusterFlags are the settings of several nodes on one etcd (SPEC §5d).
// Without --etcd the server is one node in memory, and none of the others
// may be set.
type clusterFlags struct {
	Etcd              []string `config:"" name:"etcd" placeholder:"ENDPOINT" help:"etcd endpoints (host:port or http(s)://host:port, comma-separated): run as one node of several sharing this etcd. Empty: one node, in memory."`
	EtcdCAFile        string   `config:"" name:"etcd-ca-file" placeholder:"FILE" help:"PEM file of the CA certificates that etcd's server certificate must chain to (TLS to etcd)."`
	EtcdCertFile      string   `config:"" name:"etcd-cert-file" placeholder:"FILE" help:"PEM client certificate for etcd (TLS client auth); needs --etcd-key-file."`
	EtcdKeyFile       string   `config:"" name:"etcd-key-file" placeholder:"FILE" help:"PEM private key of --etcd-cert-file."`
	EtcdUsername      string   `config:"" name:"etcd-username" placeholder:"USER" help:"etcd user when etcd's auth is on; the password comes from $RUNTIME_ETCD_PASSWORD only."`
	Node              string   `config:"" name:"node" placeholder:"ID" help:"This node's id, unique in the cluster (letters, digits, '.', '_', '-'; at most 64); required with --etcd."`
	InternalListen    string   `config:"" name:"internal-listen" default:"127.0.0.1:7441" placeholder:"HOST:PORT" help:"Listen address of the node-to-node listener (with --etcd); loopback unless told otherwise."`
	InternalURL       string   `config:"" name:"internal-url" placeholder:"URL" help:"Base URL the other nodes reach this node's internal listener at. Default: http://<internal-listen> (https:// with --internal-tls-cert); required when its host is unspecified."`
	ClusterSecretFile string   `config:"" name:"cluster-secret-file" placeholder:"FILE" help:"File of the node-to-node secret, the same on every node, at least 32 bytes; required with --etcd."`
	InternalTLSCert   string   `config:"" name:"internal-tls-cert" placeholder:"FILE" help:"PEM certificate (then any intermediates) of this node for the internal listener's mutual TLS: signed by --internal-tls-ca, naming the host of --internal-url, for server and client auth. With it, --internal-tls-key and --internal-tls-ca, the internal listener serves TLS and admits only nodes with a certificate of that CA (and the cluster secret), and this node presents it to the others. Read at start: a new certificate takes a restart."`
	InternalTLSKey    string   `config:"" name:"internal-tls-key" placeholder:"FILE" help:"PEM private key of --internal-tls-cert."`
	InternalTLSCA     string   `config:"" name:"internal-tls-ca" placeholder:"FILE" help:"PEM file of the cluster's CA certificates: every node's internal certificate must chain to one (mutual TLS between nodes, with --internal-tls-cert)."`
	Fence             duration `config:"" name:"fence" default:"500ms" placeholder:"DURATION" help:"With --etcd: how long one proof that this node's replica is current lets it serve, and so the longest a revoke waits for a node that does not answer; below 1s."`
}

// clustered reports whether the settings ask for several nodes.
func (c *clusterFlags) clustered() bool { return len(c.Etcd) > 0 }

// validate checks what the types alone do not.
func (c *clusterFlags) validate() []error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !c.clustered() {
		for _, f := range []struct{ name, v string }{
			{"etcd-ca-file", c.EtcdCAFile}, {"etcd-cert-file", c.EtcdCertFile}, {"etcd-key-file", c.EtcdKeyFile},
			{"etcd-username", c.EtcdUsername}, {"node", c.Node}, {"internal-url", c.InternalURL},
			{"cluster-secret-file", c.ClusterSecretFile}, {"internal-tls-cert", c.InternalTLSCert},
			{"internal-tls-key", c.InternalTLSKey}, {"internal-tls-ca", c.InternalTLSCA},
		} {
			if f.v != "" {
				add("--%s needs --etcd (without it the server is one node)", f.name)
			}
		}
		return errs
	}
	tls := c.EtcdCAFile != "" || c.EtcdCertFile != ""
	for _, e := range c.Etcd {
		switch {
		case !validEndpoint(e):
			add("--etcd %q: want host:port or http(s)://host:port", e)
		case tls && strings.HasPrefix(e, "http://"):
			// etcd's client drops TLS for an http:// endpoint: the files
			// would be silently ignored.
			add("--etcd %q: an http:// endpoint is never TLS; with --etcd-ca-file or --etcd-cert-file use https:// or host:port", e)
		}
	}
	if c.Node == "" {
		add("--etcd needs --node: this node's id, unique in the cluster")
	}
	if c.ClusterSecretFile == "" {
		add("--etcd needs --cluster-secret-file: the node-to-node secret, the same on every node")
	}
	if (c.EtcdCertFile == "") != (c.EtcdKeyFile == "") {
		add("--etcd-cert-file and --etcd-key-file go together")
	}
	if n := btoi(c.InternalTLSCert != "") + btoi(c.InternalTLSKey != "") + btoi(c.InternalTLSCA != ""); n != 0 && n != 3 {
		add("--internal-tls-cert, --internal-tls-key and --internal-tls-ca go together")
	}
	if c.internalTLS() && c.InternalURL != "" && !strings.HasPrefix(c.InternalURL, "https://") {
		add("--internal-url %q: the internal listener serves TLS (--internal-tls-cert): want https://", c.InternalURL)
	}
	if err := checkAddr("internal-listen", c.InternalListen); err != nil {
		errs = append(errs, err)
	}
	if c.InternalURL != "" {
		if u, err := url.Parse(c.InternalURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
			add("--internal-url %q: want the internal listener's http(s) base URL such as http://10.0.0.5:7441", c.InternalURL)
		}
	} else if unspecifiedHost(c.InternalListen) {
		add("--internal-listen %q has no host the other nodes can reach: set --internal-url", c.InternalListen)
	}
	if c.Fence == never || c.Fence <= 0 || time.Duration(c.Fence) >= time.Second {
		add("--fence %s: want a positive duration below 1s", c.Fence)
	}
	return errs
}

// internalTLS reports whether the internal listener is mutual TLS.
func (c *clusterFlags) internalTLS() bool { return c.InternalTLSCert != "" }

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// validEndpoint reports whether e is an etcd endpoint: host:port, or an
// http(s) URL with a host and no path.
func validEndpoint(e string) bool {
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && (u.Path == "" || u.Path == "/")
	}
	host, port, err := net.SplitHostPort(e)
	return err == nil && host != "" && port != "" && !strings.ContainsAny(e, " /")
}

// unspecifiedHost reports whether a listen address has no host of its own
// (":7441", "0.0.0.0:7441", "[::]:7441").
func unspecifiedHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "" || (ip != nil && ip.IsUnspecified())
}

// clusterConfig is the runtime's cluster.Config of the settings (already
// validated), without its URL, which needs the bound port
// (internalURL). given holds the settings set explicitly (flag,
// environment or file). It reads the secret and the TLS files; the secret
// is never logged nor put in an error.
func (s *serveCmd) clusterConfig(env map[string]string, given map[string]bool, log *slog.Logger) (cluster.Config, error) {
	c := &s.clusterFlags
	if !c.clustered() {
		if env[envEtcdPassword] != "" {
			return cluster.Config{}, usageError{errors.New("$" + envEtcdPassword + " needs --etcd")}
		}
		return cluster.Config{}, nil
	}
	if err := s.checkClusterOAuth(given); err != nil {
		return cluster.Config{}, err
	}
	cfg := cluster.Config{
		Etcd: c.Etcd, Node: c.Node, Fence: time.Duration(c.Fence),
		EtcdUsername: c.EtcdUsername, EtcdPassword: env[envEtcdPassword],
	}
	if (cfg.EtcdUsername == "") != (cfg.EtcdPassword == "") {
		return cfg, usageError{errors.New("--etcd-username and $" + envEtcdPassword + " go together")}
	}
	secret, err := readClusterSecret(c.ClusterSecretFile, log)
	if err != nil {
		return cfg, err
	}
	cfg.Secret = secret
	if cfg.EtcdTLS, err = etcdTLS(c.EtcdCAFile, c.EtcdCertFile, c.EtcdKeyFile); err != nil {
		return cfg, err
	}
	if cfg.InternalTLS, err = internalTLS(c.InternalTLSCert, c.InternalTLSKey, c.InternalTLSCA); err != nil {
		return cfg, err
	}
	// etcd's client speaks TLS to an https:// endpoint, and to a bare
	// host:port when given a TLS configuration.
	plain := func(e string) bool {
		return !strings.HasPrefix(e, "https://") && (cfg.EtcdTLS == nil || strings.HasPrefix(e, "http://"))
	}
	if cfg.EtcdPassword != "" && slices.ContainsFunc(c.Etcd, plain) {
		log.Warn("etcd password sent without TLS to some endpoints: set --etcd-ca-file, or use https:// endpoints")
	}
	return cfg, nil
}

// clusterOAuth reports whether OAuth sign-in serves on several nodes:
// only when asked for (--oauth, --public-origin or --oauth-secret-file
// given, and not --no-oauth), since its default origin, the MCP listen
// address, is each node's own (SPEC §5d.9).
func (s *serveCmd) clusterOAuth(given map[string]bool) bool {
	return s.OAuth && (given["oauth"] || given["public-origin"] || given["oauth-secret-file"] || given["oauth-issuer"])
}

// checkClusterOAuth refuses OAuth settings several nodes cannot serve: a
// sign-in must verify on every node, so the public origin (the issuer,
// and the resource tokens are bound to) and the secret that MACs client
// ids and consent forms are the same on every node and given, never each
// node's default; the resource-server mode is one node's.
func (s *serveCmd) checkClusterOAuth(given map[string]bool) error {
	if !s.clusterOAuth(given) {
		return nil
	}
	switch {
	case given["oauth-issuer"]:
		return usageError{errors.New("--oauth-issuer: the resource-server mode is not available with --etcd (several nodes) yet; drop it")}
	case !given["public-origin"]:
		return usageError{errors.New("--etcd: OAuth sign-in on several nodes needs --public-origin, the origin clients reach, the same on every node (or --no-oauth)")}
	case !given["oauth-secret-file"]:
		return usageError{errors.New("--etcd: OAuth sign-in on several nodes needs --oauth-secret-file, the same secret on every node (or --no-oauth)")}
	}
	return nil
}

// clusterOf is the runtime's Config.Cluster of c: nil (one node) without
// etcd endpoints.
func clusterOf(c cluster.Config) mcpruntime.Cluster {
	if len(c.Etcd) == 0 {
		return nil
	}
	return c
}

// internalURL is the internal listener's URL for the other nodes: the
// setting, or http:// and the listener's configured host with the port it
// bound.
func (c *clusterFlags) internalURL(bound string) string {
	if c.InternalURL != "" {
		return strings.TrimSuffix(c.InternalURL, "/")
	}
	scheme := "http://"
	if c.internalTLS() {
		scheme = "https://"
	}
	return scheme + urlHost(c.InternalListen, bound)
}

// readClusterSecret reads the node-to-node secret: the file's bytes
// without a trailing newline, at least cluster.MinSecret of them. A file
// others may read is warned about (its path only).
func readClusterSecret(path string, log *slog.Logger) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", fmt.Errorf("--cluster-secret-file: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		log.Warn("cluster secret file is readable by others; make it 0600", "file", path, "mode", fi.Mode().Perm().String())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("--cluster-secret-file: %w", err)
	}
	b = bytes.TrimRight(b, "\r\n")
	if len(b) < cluster.MinSecret {
		return "", usageError{fmt.Errorf("--cluster-secret-file %s: want at least %d bytes, e.g. head -c 32 /dev/urandom | base64 > FILE", path, cluster.MinSecret)}
	}
	return string(b), nil
}

// etcdTLS is the TLS configuration to etcd of the settings; nil when none
// is set (plain connections).
func etcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	if caFile == "" && certFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-ca-file: %w", err)
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, usageError{fmt.Errorf("--etcd-ca-file %s: no PEM certificate in it", caFile)}
		}
	}
	if certFile != "" {
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, usageError{fmt.Errorf("--etcd-cert-file %s, --etcd-key-file %s: %w", certFile, keyFile, err)}
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// internalTLS is the internal listener's mutual TLS of the settings; nil
// when none is set (plain HTTP). Whether the certificate suits the CA and
// the internal URL is checked by cluster.Config.Validate, at start.
func internalTLS(certFile, keyFile, caFile string) (*cluster.InternalTLS, error) {
	if certFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, usageError{fmt.Errorf("--internal-tls-cert %s, --internal-tls-key %s: %w", certFile, keyFile, err)}
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--internal-tls-ca: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageError{fmt.Errorf("--internal-tls-ca %s: no PEM certificate in it", caFile)}
	}
	return &cluster.InternalTLS{Certificate: cert, CA: pool}, nil
}

package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/agenthost/mcpruntime/cluster"
)

// testClusterSecret is 40 bytes: a valid node-to-node secret.
const testClusterSecret = "cmd-cluster-secret-0123456789abcdefghijk"

// secretFile writes a cluster secret file (mode 0600) and returns its path.
func secretFile(t *testing.T, secret string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parsedGiven is parsed, also returning the settings set explicitly.
func parsedGiven(t *testing.T, args []string, env map[string]string) (*cli, map[string]bool) {
	t.Helper()
	var c cli
	kctx, code, err := parse(&c, args, env, io.Discard, io.Discard)
	if err != nil || code >= 0 {
		t.Fatalf("parse %q: code %d, err %v", args, code, err)
	}
	return &c, givenSettings(kctx)
}

// certFiles writes a self-signed certificate and its key as PEM files.
func certFiles(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "etcd test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestClusterSettings: valid cluster settings become the runtime's
// cluster.Config — endpoints, node, the secret read from its file without
// its newline, the password from the environment only, the fence, TLS
// from the files — and the internal URL defaults to the internal
// listener's address with the port it bound.
func TestClusterSettings(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	certFile, keyFile := certFiles(t)
	env := map[string]string{envEtcdPassword: "etcd-pw"}
	c, given := parsedGiven(t, []string{
		"--etcd", "127.0.0.1:2379,https://etcd.example:2379", "--node", "n1", "--cluster-secret-file", secret,
		"--etcd-username", "rt", "--etcd-ca-file", certFile, "--etcd-cert-file", certFile, "--etcd-key-file", keyFile,
		"--fence", "300ms", "--internal-listen", "127.0.0.1:0",
	}, env)
	s := &c.Serve
	if err := s.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	got, err := s.clusterConfig(env, given, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("clusterConfig: %v", err)
	}
	want := cluster.Config{
		Etcd: []string{"127.0.0.1:2379", "https://etcd.example:2379"}, Node: "n1", Secret: testClusterSecret,
		EtcdUsername: "rt", EtcdPassword: "etcd-pw", Fence: 300 * time.Millisecond,
	}
	if diff := cmp.Diff(want, got, cmpopts.IgnoreFields(cluster.Config{}, "EtcdTLS")); diff != "" {
		t.Errorf("clusterConfig (-want +got):\n%s", diff)
	}
	if got.EtcdTLS == nil || got.EtcdTLS.RootCAs == nil || len(got.EtcdTLS.Certificates) != 1 {
		t.Errorf("EtcdTLS = %+v, want the CA pool and one client certificate", got.EtcdTLS)
	}
	if u := s.internalURL("127.0.0.1:45123"); u != "http://127.0.0.1:45123" {
		t.Errorf("internal URL of a :0 listener = %q, want the bound port", u)
	}

	// Defaults: no TLS, internal listener on loopback 7441.
	c, given = parsedGiven(t, []string{"--etcd", "127.0.0.1:2379", "--node", "n2", "--cluster-secret-file", secret}, nil)
	if err := c.Serve.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	got, err = c.Serve.clusterConfig(nil, given, slog.New(slog.DiscardHandler))
	if err != nil || got.EtcdTLS != nil || got.Fence != 500*time.Millisecond {
		t.Errorf("clusterConfig with defaults = %+v, %v; want no TLS, fence 500ms", got, err)
	}
	if u := c.Serve.internalURL("127.0.0.1:7441"); u != "http://127.0.0.1:7441" {
		t.Errorf("default internal URL = %q", u)
	}
	c, _ = parsedGiven(t, []string{"--etcd", "e:2379", "--internal-listen", "0.0.0.0:7441", "--internal-url", "http://10.0.0.5:7441/"}, nil)
	if u := c.Serve.internalURL("[::]:7441"); u != "http://10.0.0.5:7441" {
		t.Errorf("given internal URL = %q, want it without the trailing slash", u)
	}

	// Without --etcd: one node, no cluster.
	c, given = parsedGiven(t, nil, nil)
	if got, err := c.Serve.clusterConfig(nil, given, slog.New(slog.DiscardHandler)); err != nil || clusterOf(got) != nil {
		t.Errorf("clusterConfig without --etcd = %+v, %v; want one node", got, err)
	}
}

// TestGivenSettings: a setting counts as given when it comes from a flag,
// the environment or the file, never from its default; --no-oauth is a
// given --oauth.
func TestGivenSettings(t *testing.T) {
	file := writeFile(t, "node = \"n1\"\n")
	_, given := parsedGiven(t, []string{"--config", file, "--no-oauth"}, map[string]string{"RUNTIME_FENCE": "200ms"})
	for _, name := range []string{"config", "node", "oauth", "fence"} {
		if !given[name] {
			t.Errorf("%s not given; given = %v", name, given)
		}
	}
	for _, name := range []string{"internal-listen", "listen", "etcd"} {
		if given[name] {
			t.Errorf("%s given by its default", name)
		}
	}
}

// TestClusterSettingsInvalid: a cluster setting that cannot work exits
// 2 (or 1 for a file that cannot be read) with one line naming it, before
// anything dials etcd; the secret never appears in the output.
func TestClusterSettingsInvalid(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	short := secretFile(t, "short-secret-of-23-bytes")
	notPEM := writeFile(t, "not a certificate\n")
	certFile, keyFile := certFiles(t)
	etcd := []string{"--etcd", "127.0.0.1:1", "--cluster-secret-file", secret, "--node", "n1"}
	// Ports of their own, so that a case reaching New binds nothing in use.
	free := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0"}
	with := func(extra ...string) []string {
		return append(append(append([]string(nil), etcd...), free...), extra...)
	}
	tokenEnv := map[string]string{envAdminToken: "admin-token-for-the-cluster-tests-0123456789"}
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		code int
		want string
	}{
		{"node without etcd", []string{"--node", "n1"}, nil, 2, "--node needs --etcd"},
		{"secret file without etcd", []string{"--cluster-secret-file", secret}, nil, 2, "--cluster-secret-file needs --etcd"},
		{"password without etcd", free, map[string]string{envAdminToken: tokenEnv[envAdminToken], envEtcdPassword: "pw"}, 2, "$RUNTIME_ETCD_PASSWORD needs --etcd"},
		{"etcd without node", []string{"--etcd", "127.0.0.1:1", "--cluster-secret-file", secret}, nil, 2, "--etcd needs --node"},
		{"etcd without secret", []string{"--etcd", "127.0.0.1:1", "--node", "n1"}, nil, 2, "--etcd needs --cluster-secret-file"},
		{"bad endpoint", []string{"--etcd", "ftp://etcd:1", "--node", "n1", "--cluster-secret-file", secret}, nil, 2, `--etcd "ftp://etcd:1"`},
		{"TLS to an http endpoint", []string{"--etcd", "http://127.0.0.1:1", "--node", "n1", "--cluster-secret-file", secret, "--etcd-ca-file", certFile}, nil, 2, `--etcd "http://127.0.0.1:1": an http:// endpoint is never TLS`},
		{"endpoint without port", []string{"--etcd", "etcd.example", "--node", "n1", "--cluster-secret-file", secret}, nil, 2, `--etcd "etcd.example"`},
		{"cert without key", with("--etcd-cert-file", certFile), tokenEnv, 2, "--etcd-cert-file and --etcd-key-file go together"},
		{"key without cert", with("--etcd-key-file", keyFile), tokenEnv, 2, "--etcd-cert-file and --etcd-key-file go together"},
		{"fence of a second", with("--fence", "1s"), tokenEnv, 2, "--fence 1s: want a positive duration below 1s"},
		{"fence never", with("--fence", "never"), tokenEnv, 2, "--fence never"},
		{"fence zero", with("--fence", "0s"), tokenEnv, 2, "--fence 0s"},
		{"unspecified internal host", append(etcd, "--internal-listen", "0.0.0.0:7441"), nil, 2, "set --internal-url"},
		{"bad internal url", with("--internal-url", "10.0.0.5:7441"), tokenEnv, 2, `--internal-url "10.0.0.5:7441"`},
		{"internal listen is the admin one", append(etcd, "--internal-listen", "127.0.0.1:7332"), nil, 2, "--internal-listen \"127.0.0.1:7332\": it must differ"},
		{"oauth without a public origin", with("--oauth"), tokenEnv, 2, "OAuth sign-in on several nodes needs --public-origin"},
		{"oauth in the env without a public origin", with(), map[string]string{envAdminToken: tokenEnv[envAdminToken], "RUNTIME_OAUTH": "true"}, 2, "OAuth sign-in on several nodes needs --public-origin"},
		{"oauth without a secret file", with("--public-origin", "https://rt.example"), tokenEnv, 2, "OAuth sign-in on several nodes needs --oauth-secret-file"},
		{"oauth resource-server mode", with("--public-origin", "https://rt.example", "--oauth-secret-file", secret, "--oauth-issuer", "https://idp.example"), tokenEnv, 2,
			"--oauth-issuer: the resource-server mode is not available with --etcd"},
		{"user without password", with("--etcd-username", "rt"), tokenEnv, 2, "--etcd-username and $RUNTIME_ETCD_PASSWORD go together"},
		{"password without user", with(), map[string]string{envAdminToken: tokenEnv[envAdminToken], envEtcdPassword: "pw"}, 2, "--etcd-username and $RUNTIME_ETCD_PASSWORD go together"},
		{"short secret", with("--cluster-secret-file", short), tokenEnv, 2, "want at least 32 bytes"},
		{"missing secret file", with("--cluster-secret-file", "/nonexistent/secret"), tokenEnv, 1, "/nonexistent/secret"},
		{"CA file without a certificate", with("--etcd-ca-file", notPEM), tokenEnv, 2, "no PEM certificate"},
		{"bad node id", with("--node", "n 1"), tokenEnv, 2, `node id "n 1"`},
		{"node id with a colon", with("--node", "a:b"), tokenEnv, 2, `node id "a:b"`},
		{"password is no flag", with("--etcd-password", "pw"), tokenEnv, 2, "unknown flag --etcd-password"},
		{"password is no file key", []string{"--config", writeFile(t, "etcd-password = \"pw\"\n")}, nil, 2, `unknown key "etcd-password"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a run that gets past validation must not serve
			code, stdout, stderr := runCLI(ctx, tc.env, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
			for _, secret := range []string{testClusterSecret, "short-secret", "etcd-pw"} {
				if strings.Contains(stdout+stderr, secret) {
					t.Errorf("output carries the secret %q: %s", secret, stderr)
				}
			}
		})
	}
}

// TestEtcdPasswordInTheClearIsWarned: an etcd password that some endpoint
// would get without TLS is warned about (without the password); over TLS
// it is not.
func TestEtcdPasswordInTheClearIsWarned(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	certFile, _ := certFiles(t)
	env := map[string]string{envEtcdPassword: "etcd-pw"}
	for _, tc := range []struct {
		name string
		args []string
		warn bool
	}{
		{"host:port without TLS", []string{"--etcd", "127.0.0.1:2379"}, true},
		{"http and https", []string{"--etcd", "https://e1:2379,http://e2:2379"}, true},
		{"https", []string{"--etcd", "https://e1:2379"}, false},
		{"host:port with a CA", []string{"--etcd", "127.0.0.1:2379", "--etcd-ca-file", certFile}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--node", "n1", "--cluster-secret-file", secret, "--etcd-username", "rt"}, tc.args...)
			c, given := parsedGiven(t, args, env)
			var logs strings.Builder
			if _, err := c.Serve.clusterConfig(env, given, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
				t.Fatalf("clusterConfig: %v", err)
			}
			if warned := strings.Contains(logs.String(), "etcd password sent without TLS"); warned != tc.warn {
				t.Errorf("warned = %v, want %v; logs %q", warned, tc.warn, logs.String())
			}
			if strings.Contains(logs.String(), "etcd-pw") {
				t.Errorf("the log carries the password: %q", logs.String())
			}
		})
	}
}

// TestClusterOAuthSettings: with --etcd, OAuth sign-in serves only when
// asked for with a public origin and a secret file, the same on every
// node (SPEC §5d.9); without them it is off, as it cannot default to each
// node's own listen address.
func TestClusterOAuthSettings(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	oauthSecret := secretFile(t, "oauth-secret-0123456789abcdef0123456789")
	etcd := []string{"--etcd", "127.0.0.1:1", "--cluster-secret-file", secret, "--node", "n1"}
	for _, tc := range []struct {
		name string
		args []string
		on   bool
	}{
		{"off by default", nil, false},
		{"off with --no-oauth", []string{"--no-oauth", "--public-origin", "https://rt.example", "--oauth-secret-file", oauthSecret}, false},
		{"on with origin and secret", []string{"--public-origin", "https://rt.example", "--oauth-secret-file", oauthSecret}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, given := parsedGiven(t, append(append([]string(nil), etcd...), tc.args...), nil)
			if got := c.Serve.clusterOAuth(given); got != tc.on {
				t.Fatalf("clusterOAuth = %v, want %v", got, tc.on)
			}
			if err := c.Serve.checkClusterOAuth(given); err != nil {
				t.Fatalf("checkClusterOAuth: %v", err)
			}
			if !tc.on {
				return
			}
			oc, err := c.Serve.oauthFlags.config("http://127.0.0.1:7331", "/mcp", nil)
			if err != nil || oc.PublicOrigin != "https://rt.example" || string(oc.Secret) != "oauth-secret-0123456789abcdef0123456789" {
				t.Fatalf("OAuth config = origin %q, %d secret bytes, %v; want the origin and the file's secret", oc.PublicOrigin, len(oc.Secret), err)
			}
		})
	}
}

package main

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/mcpruntime/internal/tlstest"
)

// internalTLSFiles writes a cluster CA and a node certificate for hosts
// (made now, never committed) as PEM files: the CA's, the certificate's
// and its key's paths.
func internalTLSFiles(t *testing.T, hosts ...string) (caFile, certFile, keyFile string) {
	t.Helper()
	ca := tlstest.NewCA(t, "cluster CA")
	_, certPEM, keyPEM := ca.Issue(t, "n1", tlstest.Node, hosts...)
	dir := t.TempDir()
	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "n1.pem"), filepath.Join(dir, "n1-key.pem")
	for path, b := range map[string][]byte{caFile: ca.PEM, certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return caFile, certFile, keyFile
}

// TestInternalTLSSettings: --internal-tls-cert, --internal-tls-key and
// --internal-tls-ca make the cluster.Config's InternalTLS (the node's
// certificate, the CA pool), and the internal URL defaults to https://.
func TestInternalTLSSettings(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	caFile, certFile, keyFile := internalTLSFiles(t, "127.0.0.1")
	c, given := parsedGiven(t, []string{
		"--etcd", "127.0.0.1:2379", "--node", "n1", "--cluster-secret-file", secret, "--internal-listen", "127.0.0.1:0",
		"--internal-tls-cert", certFile, "--internal-tls-key", keyFile, "--internal-tls-ca", caFile,
	}, nil)
	s := &c.Serve
	if err := s.validate(); err != nil {
		t.Fatalf("validate: %v", err)
	}
	got, err := s.clusterConfig(nil, given, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("clusterConfig: %v", err)
	}
	if got.InternalTLS == nil || got.InternalTLS.CA == nil || len(got.InternalTLS.Certificate.Certificate) != 1 || got.InternalTLS.Certificate.PrivateKey == nil {
		t.Fatalf("InternalTLS = %+v, want the certificate with its key and the CA pool", got.InternalTLS)
	}
	u := s.internalURL("127.0.0.1:45123")
	if u != "https://127.0.0.1:45123" {
		t.Errorf("internal URL under mutual TLS = %q, want https:// and the bound port", u)
	}
	got.URL = u
	if err := got.Validate(); err != nil {
		t.Errorf("the settings' cluster.Config does not validate: %v", err)
	}
	if tc := got.InternalServerTLS(); tc == nil || tc.ClientCAs == nil {
		t.Errorf("InternalServerTLS = %+v, want client certificates of the CA required", tc)
	}
}

// TestInternalTLSSettingsInvalid: the three files go together and need
// --etcd, an http:// --internal-url is refused under mutual TLS, and a CA
// file without a certificate, a key that is not the certificate's, or a
// certificate that does not name the internal URL's host exits 2 naming
// the setting, before anything dials etcd.
func TestInternalTLSSettingsInvalid(t *testing.T) {
	secret := secretFile(t, testClusterSecret)
	caFile, certFile, keyFile := internalTLSFiles(t, "127.0.0.1")
	_, otherCert, otherKey := internalTLSFiles(t, "127.0.0.1")
	notPEM := writeFile(t, "not a certificate\n")
	etcd := []string{"--etcd", "127.0.0.1:1", "--cluster-secret-file", secret, "--node", "n1"}
	free := []string{"--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--internal-listen", "127.0.0.1:0"}
	with := func(extra ...string) []string {
		return append(append(append([]string(nil), etcd...), free...), extra...)
	}
	files := []string{"--internal-tls-cert", certFile, "--internal-tls-key", keyFile, "--internal-tls-ca", caFile}
	tokenEnv := map[string]string{envAdminToken: "admin-token-for-the-cluster-tests-0123456789"}
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"without etcd", files, 2, "--internal-tls-cert needs --etcd"},
		{"cert alone", with("--internal-tls-cert", certFile), 2, "--internal-tls-cert, --internal-tls-key and --internal-tls-ca go together"},
		{"no CA", with("--internal-tls-cert", certFile, "--internal-tls-key", keyFile), 2, "go together"},
		{"CA alone", with("--internal-tls-ca", caFile), 2, "go together"},
		{"http internal URL", with(append(files, "--internal-url", "http://127.0.0.1:7441")...), 2, `--internal-url "http://127.0.0.1:7441": the internal listener serves TLS`},
		{"CA file without a certificate", with("--internal-tls-cert", certFile, "--internal-tls-key", keyFile, "--internal-tls-ca", notPEM), 2, "--internal-tls-ca " + notPEM + ": no PEM certificate"},
		{"another certificate's key", with("--internal-tls-cert", certFile, "--internal-tls-key", otherKey, "--internal-tls-ca", caFile), 2, "--internal-tls-cert " + certFile},
		{"another CA's certificate", with("--internal-tls-cert", otherCert, "--internal-tls-key", otherKey, "--internal-tls-ca", caFile), 2, "not one of the CA's"},
		{"host not named", with(append(files, "--internal-url", "https://10.0.0.5:7441")...), 2, "does not name the URL's host 10.0.0.5:7441"},
		{"missing CA file", with("--internal-tls-cert", certFile, "--internal-tls-key", keyFile, "--internal-tls-ca", "/nonexistent/ca.pem"), 1, "/nonexistent/ca.pem"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a run that gets past validation must not serve
			code, stdout, stderr := runCLI(ctx, tokenEnv, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
			if strings.Contains(stdout+stderr, "PRIVATE KEY") {
				t.Errorf("output carries a private key: %s", stderr)
			}
		})
	}
}

package cluster

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProcessesOAuth: three `runtime serve --etcd` processes with one
// --public-origin and one --oauth-secret-file serve OAuth sign-in as one
// server (SPEC §5d.9, §7.5): the consent page of n1, its form posted to
// n2, a pairing code of n3's admin API, the code exchanged on n3; the
// token serves through every node, a refresh through n1 rotates it at its
// home, and no secret, token or code reaches a log.
func TestProcessesOAuth(t *testing.T) {
	bin := buildRuntime(t)
	endpoint := startEtcd(t)
	dir := t.TempDir()
	clusterSecret, oauthSecretText := randomSecret(t, ""), randomSecret(t, "")
	secretFile, oauthFile := filepath.Join(dir, "cluster-secret"), filepath.Join(dir, "oauth-secret")
	for f, s := range map[string]string{secretFile: clusterSecret, oauthFile: oauthSecretText} {
		if err := os.WriteFile(f, []byte(s+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	nodes := startProcs(t, bin, endpoint, secretFile, []string{"n1", "n2", "n3"},
		"--public-origin", oauthOrigin, "--oauth-secret-file", oauthFile)
	for _, n := range nodes {
		waitMembers(t, n, 3)
	}
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "processes")
	pc, _ := nodes[2].mustAdmin(http.StatusCreated, "POST", "/oauth/pairing-codes", map[string]any{"access": "read-only"})["code"].(string)
	toks := signInAt(t, client, b(0), b(1), b(2), pc, "processes")
	for _, n := range nodes {
		if status, err := listTools(n.mcpURL, toks.access); err != nil || status != http.StatusOK {
			t.Fatalf("tools/list through %s: %d, %v; want 200", n.id, status, err)
		}
	}
	next, err := tokensOf(redeemRefresh(b(0), client, toks.refresh))
	if err != nil {
		t.Fatalf("refresh through n1 (the grant lives on n3): %v", err)
	}
	for _, n := range nodes {
		if status, err := listTools(n.mcpURL, next.access); err != nil || status != http.StatusOK {
			t.Fatalf("tools/list with the refreshed token through %s: %d, %v; want 200", n.id, status, err)
		}
	}
	secrets := []string{clusterSecret, oauthSecretText, pc, toks.access, toks.refresh, next.access, next.refresh}
	for _, n := range nodes {
		logs := n.logs()
		for i, s := range secrets {
			if strings.Contains(logs, s) {
				t.Errorf("node %s's log carries secret %d", n.id, i)
			}
		}
	}
}

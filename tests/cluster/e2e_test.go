package cluster

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agenthost/mcpruntime/internal/clienttest"
	"github.com/agenthost/mcpruntime/internal/tlstest"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// TestProcesses is the multi-process end-to-end run: one
// embedded etcd, three `runtime serve --etcd` processes on loopback, each
// with its own admin token and the shared secret file, their internal
// listeners mutual TLS (--internal-tls-cert/-key/-ca): every forwarded
// request and revoke confirmation below crosses it.
//
//   - --demo on all three, started at once: the demo thread is made once,
//     and its one credential file (on its home node) holds a token every
//     node authenticates.
//   - A fourth process started with n1's id while n1 lives exits 2,
//     saying the id is in use and what to do; n1 still serves.
//   - The provider-switch story through n1's admin API (SPEC §3):
//     instances a and b, thread t1, a provider session for each, switch
//     a → b → a; both credentials stay live, and authenticate on every
//     node's MCP listener (2026-07-28 tools/list); an unknown token is 401
//     everywhere, with no OAuth discovery (OAuth is off with --etcd).
//   - t1 lives on n1: n2's admin API refuses it 409 not_home naming n1;
//     thread_read through n2 is forwarded to n1 and answers t1's
//     messages; a 2025 session opened through n2 answers through n3, and
//     another principal naming it gets the made-up id's 404.
//   - The revoke across processes: once n1's DELETE of a's provider
//     session answered, a's token is 401 on every node, b's still 200.
//   - n3 killed: it leaves the member list (its lease lapses; n1 and n2
//     count 2 members in /metrics); n1 and n2 still ready and
//     authenticating; a revoke then succeeds and holds on both.
//   - n2 stopped (SIGSTOP) until n1 no longer counts it, then continued:
//     it knows it lost its membership and exits with status 3 (fail-stop,
//     for its supervisor to restart it as a new member); n1 still serves;
//     n2 started again joins and serves.
//   - n1 stopped with SIGTERM: it exits 0, leaves the member list, and
//     n2 serves on alone.
//
// Every check is of a state or an answer, none of a duration; every wait
// has a deadline that only detects a hang.
func TestProcesses(t *testing.T) {
	bin := buildRuntime(t)
	endpoint := startEtcd(t)
	clusterSecret := randomSecret(t, "")
	secretFile := filepath.Join(t.TempDir(), "cluster-secret")
	if err := os.WriteFile(secretFile, []byte(clusterSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The internal listeners are mutual TLS: one CA, one certificate for
	// 127.0.0.1 that every node presents (made now, never committed).
	ca := tlstest.NewCA(t, "cluster CA")
	_, certPEM, keyPEM := ca.Issue(t, "node", tlstest.Node, "127.0.0.1")
	tlsDir := t.TempDir()
	var mtls []string
	for _, f := range []struct {
		flag, name string
		pem        []byte
	}{{"--internal-tls-ca", "ca.pem", ca.PEM}, {"--internal-tls-cert", "node.pem", certPEM}, {"--internal-tls-key", "node-key.pem", keyPEM}} {
		path := filepath.Join(tlsDir, f.name)
		if err := os.WriteFile(path, f.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		mtls = append(mtls, f.flag, path)
	}
	nodes := startProcs(t, bin, endpoint, secretFile, []string{"n1", "n2", "n3"}, append(mtls, "--demo")...)
	n1, n2, n3 := nodes[0], nodes[1], nodes[2]
	for _, n := range nodes {
		waitMembers(t, n, 3)
	}
	var tokens []string // every token minted, to look for in the logs

	// A fourth process with n1's id while n1 lives: refused (exit 2) with
	// what to do; n1 keeps its membership.
	dup := launch(t, bin, "n1", endpoint, secretFile, mtls)
	if code := dup.waitExit(); code != 2 || !strings.Contains(dup.logs(), `runtime: cluster: replica: start n1: node id "n1" is in use`) || !strings.Contains(dup.logs(), "--node") {
		t.Fatalf("a second n1 while n1 lives: exit %d, want 2 saying the id is in use and what to do\n%s", code, dup.logs())
	}
	if status, body := n1.get("/readyz"); status != http.StatusOK {
		t.Fatalf("n1 /readyz after a second n1 was refused: %d %s", status, body)
	}
	waitMembers(t, n2, 3)

	// The demo: one credential file in the cluster, on the demo thread's
	// home node (the first to create it), and its token authenticates on
	// every node.
	var demoHomes []*proc
	for _, n := range nodes {
		if b, err := os.ReadFile(filepath.Join(n.dir, "demo-authorization")); err == nil {
			demoHomes = append(demoHomes, n)
			tokens = append(tokens, bearer(t, strings.TrimSpace(string(b))))
		}
	}
	if len(demoHomes) != 1 {
		t.Fatalf("demo credential files on %d nodes, want on exactly one", len(demoHomes))
	}
	wantMinted(t, demoHomes[0], nodes, tokens[0])

	// The provider-switch story, through n1's admin API.
	for _, id := range []string{"a", "b"} {
		n1.mustAdmin(http.StatusCreated, "POST", "/instances", map[string]any{"id": id, "driver": "inproc"})
	}
	n1.mustAdmin(http.StatusCreated, "POST", "/threads", map[string]any{"id": "t1", "instance": "a"})
	psA := n1.mustAdmin(http.StatusCreated, "POST", "/threads/t1/provider-sessions", map[string]any{"instance": "a"})
	psB := n1.mustAdmin(http.StatusCreated, "POST", "/threads/t1/provider-sessions", map[string]any{"instance": "b"})
	tokA, tokB := bearer(t, psA["authorization"]), bearer(t, psB["authorization"])
	tokens = append(tokens, tokA, tokB)
	for _, sw := range []struct{ to, from string }{{"b", "a"}, {"a", "b"}} {
		got := n1.mustAdmin(http.StatusOK, "POST", "/threads/t1/switch", map[string]any{"instance": sw.to})
		if got["instance"] != sw.to || got["previous"] != sw.from {
			t.Fatalf("switch to %s = %v, want instance %s, previous %s", sw.to, got, sw.to, sw.from)
		}
	}
	wantMinted(t, n1, nodes, tokA, tokB) // after a → b → a, both live
	unknown := randomSecret(t, "mcprc_") // client-shaped: OAuth, were it on, would offer discovery
	wantAuth(t, http.StatusUnauthorized, "an unknown token", nodes, unknown, randomSecret(t, "mcprt_"))
	for _, n := range nodes {
		wantNoOAuth(t, n, unknown)
	}

	// t1 lives on n1: another node shows it so, and its admin API refuses
	// to change it, naming the home.
	if got := n2.mustAdmin(http.StatusOK, "GET", "/threads/t1", nil); got["home"] != "n1" {
		t.Fatalf("t1 on n2: %v, want home n1", got)
	}
	status, body := n2.admin("POST", "/threads/t1/runs", map[string]any{"instance": "a"})
	if status != http.StatusConflict || body["error"] != "not_home" || !strings.Contains(body["message"].(string), "n1") {
		t.Fatalf("start a run of t1 on n2: %d %v, want 409 not_home naming n1", status, body)
	}

	// A message in t1, posted by a (its run) through n2, which forwards
	// the mutation to t1's home, then read through n2, which answers the
	// read itself — after the post it forwarded, from a replica proven
	// current since (read-your-writes, SPEC §5d.6).
	n1.mustAdmin(http.StatusCreated, "POST", "/threads/t1/runs", map[string]any{"instance": "a"})
	const proxied = `mcpruntime_forwarded_requests_total{outcome="proxied"}`
	const readHere = `mcpruntime_forwarded_requests_total{outcome="read_here"}`
	before := n2.metric(proxied)
	callTool(t, n2, tokA, "thread_post", map[string]any{"text": "hello from a"})
	if got := n2.metric(proxied); got != before+1 {
		t.Fatalf("n2 forwarded %v requests for the thread_post, want 1 (to t1's home)", got-before)
	}
	read := callTool(t, n2, tokA, "thread_read", map[string]any{})
	if !strings.Contains(read, "hello from a") {
		t.Fatalf("thread_read of t1 by a through n2 right after its post there: %s, want the message", read)
	}
	waitFor(t, "n2 to answer a read of t1's principal itself", func() bool {
		before := n2.metric(readHere)
		read := callTool(t, n2, tokA, "thread_read", map[string]any{})
		return strings.Contains(read, "hello from a") && n2.metric(readHere) == before+1
	})

	// A 2025 session of b, opened through n2, lives on t1's home and
	// answers through n3; another principal naming it, through n2, gets
	// the unknown session's answer, byte for byte.
	status, sid, _ := n2.post(tokB, "", ht.InitBody(ht.LatestVersion))
	if status != http.StatusOK || sid == "" {
		t.Fatalf("initialize through n2: %d, session %q", status, sid)
	}
	if status, _, body := n3.post(tokB, sid, ht.InitializedBody); status != http.StatusAccepted {
		t.Fatalf("notifications/initialized through n3: %d %s", status, body)
	}
	call := `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`
	if status, _, body := n3.post(tokB, sid, call); status != http.StatusOK || !strings.Contains(string(body), "hello from a") {
		t.Fatalf("thread_read on the session through n3: %d %s", status, body)
	}
	_, _, foreign := n2.post(tokens[0], sid, ht.PingBody)
	status, _, madeUp := n2.post(tokens[0], ht.MadeUpSessionID, ht.PingBody)
	if status != http.StatusNotFound || string(foreign) != string(madeUp) {
		t.Fatalf("the demo credential naming b's session through n2: %s; a made-up id: %d %s; want the same 404", foreign, status, madeUp)
	}

	// The revoke: once the DELETE answered, a's token is refused on every
	// node; b's is untouched (SPEC §3: releasing (t1, a) never changes
	// (t1, b)).
	n1.mustAdmin(http.StatusOK, "DELETE", "/provider-sessions/"+psA["providerSessionId"].(string), nil)
	wantAuth(t, http.StatusUnauthorized, "a's token right after its release returned", nodes, tokA)
	wantAuth(t, http.StatusOK, "b's token after a's release", nodes, tokB)

	// A thread of n3's own, with a live credential, before n3 dies.
	n3.mustAdmin(http.StatusCreated, "POST", "/instances", map[string]any{"id": "c", "driver": "inproc"})
	n3.mustAdmin(http.StatusCreated, "POST", "/threads", map[string]any{"id": "t3", "instance": "c"})
	tokC := bearer(t, n3.mustAdmin(http.StatusCreated, "POST", "/threads/t3/provider-sessions", map[string]any{"instance": "c"})["authorization"])
	tokens = append(tokens, tokC)
	wantMinted(t, n3, nodes, tokC)

	// n3 dies: it leaves the member list, n1 and n2 go on, and one of them
	// adopts t3, revoking the credential n3's provider session held.
	n3.kill()
	live := []*proc{n1, n2}
	for _, n := range live {
		waitMembers(t, n, 2)
	}
	for _, n := range live {
		if status, body := n.get("/readyz"); status != http.StatusOK {
			t.Fatalf("%s /readyz after n3's death: %d %s", n.id, status, body)
		}
	}
	wantAuth(t, http.StatusOK, "b's token after n3's death", live, tokB)
	for _, n := range live {
		waitAuth(t, n, tokC, http.StatusUnauthorized)
	}
	if home := n1.mustAdmin(http.StatusOK, "GET", "/threads/t3", nil)["home"]; home != "n1" && home != "n2" {
		t.Fatalf("t3 after n3's death: home %v, want a survivor", home)
	}
	n1.mustAdmin(http.StatusOK, "DELETE", "/provider-sessions/"+psB["providerSessionId"].(string), nil)
	wantAuth(t, http.StatusUnauthorized, "b's token right after its release, n3 dead", live, tokB)

	// n2 paused past its lease: on waking it knows it lost its membership
	// and exits 3; n1 still serves.
	n2.signal(syscall.SIGSTOP)
	waitMembers(t, n1, 1)
	n2.signal(syscall.SIGCONT)
	if code := n2.waitExit(); code != 3 {
		t.Fatalf("n2 after losing its membership: exit %d, want 3\n%s", code, n2.logs())
	}
	if !strings.Contains(n2.logs(), "lost its cluster membership") {
		t.Errorf("n2 exited 3 without saying why:\n%s", n2.logs())
	}
	if status, body := n1.get("/readyz"); status != http.StatusOK {
		t.Fatalf("n1 /readyz after n2 left: %d %s", status, body)
	}

	// Its supervisor's restart: the same id joins again as a new member and
	// serves; its credentials authenticate on n1.
	n2 = startProcs(t, bin, endpoint, secretFile, []string{"n2"}, append(mtls, "--demo")...)[0]
	nodes = append(nodes, n2)
	waitMembers(t, n1, 2)
	waitMembers(t, n2, 2)
	n2.mustAdmin(http.StatusCreated, "POST", "/instances", map[string]any{"id": "d", "driver": "inproc"})
	n2.mustAdmin(http.StatusCreated, "POST", "/threads", map[string]any{"id": "t2", "instance": "d"})
	tokD := bearer(t, n2.mustAdmin(http.StatusCreated, "POST", "/threads/t2/provider-sessions", map[string]any{"instance": "d"})["authorization"])
	tokens = append(tokens, tokD)
	wantMinted(t, n2, []*proc{n1, n2}, tokD)

	// A graceful stop (SIGTERM): n1 exits 0 and leaves the member list;
	// n2 serves on alone.
	n1.signal(syscall.SIGTERM)
	if code := n1.waitExit(); code != 0 {
		t.Fatalf("n1 after SIGTERM: exit %d, want 0\n%s", code, n1.logs())
	}
	waitMembers(t, n2, 1)
	wantAuth(t, http.StatusOK, "n2 alone", []*proc{n2}, tokD)

	// No secret in any log: the cluster secret, the admin tokens, the
	// credentials.
	secrets := append([]string{clusterSecret}, tokens...)
	for _, n := range nodes {
		secrets = append(secrets, n.adminToken)
	}
	for _, n := range nodes {
		logs := n.logs()
		for i, s := range secrets {
			if strings.Contains(logs, s) {
				t.Errorf("node %s's log carries secret %d", n.id, i)
			}
		}
	}
}

// wantMinted checks that tokens minted on writer authenticate on every
// node as soon as the mint returned: a credential write waits for every
// serving node, as a revoke does (SPEC §5d).
func wantMinted(t *testing.T, writer *proc, nodes []*proc, tokens ...string) {
	t.Helper()
	wantAuth(t, http.StatusOK, "minted on "+writer.id, nodes, tokens...)
}

// wantNoOAuth checks that node offers no OAuth: its 401 for a
// client-shaped unknown token names no resource metadata, and the
// protected-resource metadata is not served.
func wantNoOAuth(t *testing.T, n *proc, unknown string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, n.mcpURL, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"ping"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+unknown)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := n.http.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", n.mcpURL, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata") {
		t.Fatalf("%s: unknown token: %d WWW-Authenticate %q, want 401 without OAuth discovery", n.id, resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	meta := strings.TrimSuffix(n.mcpURL, "/mcp") + "/.well-known/oauth-protected-resource/mcp"
	resp, err = n.http.Get(meta)
	if err != nil {
		t.Fatalf("GET %s: %v", meta, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("%s: %s answered %d, want 404 (OAuth off)", n.id, meta, resp.StatusCode)
	}
}

// callTool sends a 2026-07-28 tools/call to node with token and returns
// the result's text; anything but a successful result fails the test.
func callTool(t *testing.T, n *proc, token, name string, args map[string]any) string {
	t.Helper()
	status, body, err := clienttest.PostModern(n.mcpURL, token, "tools/call", name, map[string]any{"name": name, "arguments": args})
	if err != nil {
		t.Fatalf("%s on %s: %v", name, n.id, err)
	}
	var res struct {
		Result struct {
			IsError bool `json:"isError"`
			Content []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &res) != nil || res.Result.IsError || len(res.Result.Content) == 0 {
		t.Fatalf("%s on %s: %d %s, want a result", name, n.id, status, body)
	}
	return res.Result.Content[0].Text
}

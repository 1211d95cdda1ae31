package cluster

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime"
)

// mcpPost posts one JSON-RPC message to a node's MCP endpoint and returns
// the response (its body read).
func mcpPost(t testing.TB, url string, h map[string]string, body string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

// modernHeaders are a 2026-07-28 request's headers with tok.
func modernHeaders(tok, method, name string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + tok, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
	if name != "" {
		h["Mcp-Name"] = name
	}
	return h
}

// sessionHeaders are a 2025 session's request headers.
func sessionHeaders(tok, session string) map[string]string {
	h := map[string]string{"Authorization": "Bearer " + tok, "MCP-Protocol-Version": "2025-11-25"}
	if session != "" {
		h["Mcp-Session-Id"] = session
	}
	return h
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"cluster-test","version":"1"}}}`

// initialize opens a 2025 session through url and returns its id.
func initialize(t testing.TB, url, tok string) string {
	t.Helper()
	resp, body := mcpPost(t, url, sessionHeaders(tok, ""), initializeBody)
	id := resp.Header.Get("Mcp-Session-Id")
	if resp.StatusCode != http.StatusOK || id == "" {
		t.Fatalf("initialize through %s: %d %s (session %q)", url, resp.StatusCode, body, id)
	}
	resp, body = mcpPost(t, url, sessionHeaders(tok, id), `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("notifications/initialized: %d %s", resp.StatusCode, body)
	}
	return id
}

// TestRuntimeRequestsOnAnyNode: a provider's requests reach its thread's
// home through any node — a 2026-07-28 tools/call, a 2025 session opened
// through one node and used through another (it lives on the home) — and
// a post through a forwarding node lands in the thread; a bad token is 401
// on the node it reached.
func TestRuntimeRequestsOnAnyNode(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ctx := context.Background()
	_, tok := mintOn(t, nodes[0], "t1", "codex")
	if _, err := nodes[0].rt.StartRun(ctx, "t1", "codex"); err != nil {
		t.Fatal(err)
	}
	resp, body := mcpPost(t, nodes[1].mcpURL, modernHeaders(tok, "tools/call", "thread_post"),
		`{"jsonrpc":"2.0","id":"p1","method":"tools/call","params":{"name":"thread_post","arguments":{"text":"via n2"},`+
			`"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte(`"resultType":"complete"`)) || bytes.Contains(body, []byte(`"isError":true`)) {
		t.Fatalf("2026-07-28 thread_post through n2: %d %s", resp.StatusCode, body)
	}
	th, err := nodes[0].rt.Thread(ctx, "t1")
	if err != nil || len(th.Messages) != 1 || th.Messages[0].Text != "via n2" {
		t.Fatalf("t1 after a post through n2 = %+v, %v; want the message", th, err)
	}

	session := initialize(t, nodes[2].mcpURL, tok)
	if got := []int{nodes[0].ep.Sessions(), nodes[1].ep.Sessions(), nodes[2].ep.Sessions()}; got[0] != 1 || got[1] != 0 || got[2] != 0 {
		t.Fatalf("sessions per node after an initialize through n3 = %v, want [1 0 0]: it lives on the home", got)
	}
	resp, body = mcpPost(t, nodes[1].mcpURL, sessionHeaders(tok, session),
		`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_read","arguments":{}}}`)
	if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("via n2")) {
		t.Fatalf("the session's thread_read through n2: %d %s", resp.StatusCode, body)
	}
	for _, n := range nodes {
		resp, _ := mcpPost(t, n.mcpURL, modernHeaders("mcp_not_a_token", "tools/list", ""), `{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{}}`)
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("a bad token on %s: %d, want 401", n.id, resp.StatusCode)
		}
	}
}

// TestRuntimeHomeGone: once a thread's home is gone (crashed: its
// listeners closed, its replica stopped), a request naming its session is
// 404 through every other node, byte for byte the answer to an unknown
// session (the client re-initializes), a 2026-07-28 mutation is 503 +
// Retry-After until a survivor adopts the thread, and a 2026-07-28 read is
// answered by the node it reached.
func TestRuntimeHomeGone(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	_, tok := mintOn(t, nodes[0], "t1", "codex")
	session := initialize(t, nodes[1].mcpURL, tok)
	ping := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	unknown, unknownBody := mcpPost(t, nodes[1].mcpURL, sessionHeaders(tok, "mcps_00000000000000000000000000000000"), ping)
	if unknown.StatusCode != http.StatusNotFound {
		t.Fatalf("an unknown session through n2 while n1 lives: %d %s, want 404", unknown.StatusCode, unknownBody)
	}
	// n1 crashes: nothing answers on its listeners, nothing renews its lease.
	rep("n1").Pause()
	nodes[0].public.Close()
	nodes[0].internal.Close()
	for _, n := range nodes[1:] {
		resp, body := mcpPost(t, n.mcpURL, sessionHeaders(tok, session), ping)
		if resp.StatusCode != http.StatusNotFound || !bytes.Equal(body, unknownBody) {
			t.Errorf("the crashed home's session through %s: %d %q, want 404 %q (an unknown session's)", n.id, resp.StatusCode, body, unknownBody)
		}
		resp, body = mcpPost(t, n.mcpURL, modernHeaders(tok, "tools/call", "thread_post"),
			`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"x"},`+modernMeta+`}}`)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
			t.Errorf("a 2026-07-28 mutation of the crashed home's thread through %s: %d %s, want 503 + Retry-After", n.id, resp.StatusCode, body)
		}
		// A read needs no home: the node it reached answers it, once its
		// replica is proven current since the last request it forwarded
		// for the caller (n2 forwarded the initialize).
		waitFor(t, n.id+" to answer a read of the crashed home's caller", func() bool {
			resp, _ := mcpPost(t, n.mcpURL, modernHeaders(tok, "tools/list", ""), `{"jsonrpc":"2.0","id":4,"method":"tools/list","params":{`+modernMeta+`}}`)
			return resp.StatusCode == http.StatusOK
		})
	}
	rep("n1").Resume() // it finds its membership lost (or not yet) and its cleanup shuts it down
}

// TestRuntimeFencedNodeClosesStreams: a home that cannot prove its
// replica current (paused: no fence check runs) stops serving: its GET
// stream ends, and it answers 503 with Retry-After, before
// authentication; once it serves again, the session is still there.
func TestRuntimeFencedNodeClosesStreams(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{})
	_, tok := mintOn(t, nodes[0], "t1", "codex")
	session := initialize(t, nodes[0].mcpURL, tok)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, nodes[0].mcpURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sessionHeaders(tok, session) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET stream: %d", resp.StatusCode)
	}
	ended := make(chan error, 1)
	go func() {
		_, err := io.Copy(io.Discard, bufio.NewReader(resp.Body))
		ended <- err
	}()
	rep("n1").Pause()
	select {
	case <-ended:
	case <-ctx.Done():
		t.Fatal("n1 stopped serving but its GET stream did not end")
	}
	r503, body := mcpPost(t, nodes[0].mcpURL, sessionHeaders("mcp_not_a_token", session), `{"jsonrpc":"2.0","id":2,"method":"ping"}`)
	if r503.StatusCode != http.StatusServiceUnavailable || r503.Header.Get("Retry-After") == "" {
		t.Fatalf("a fenced node: %d (Retry-After %q) %s, want 503 with Retry-After", r503.StatusCode, r503.Header.Get("Retry-After"), body)
	}
	var msg struct {
		Error struct{ Message string } `json:"error"`
	}
	if json.Unmarshal(body, &msg) != nil || msg.Error.Message != "node unavailable" {
		t.Errorf("a fenced node's 503 body = %s, want the JSON-RPC error \"node unavailable\"", body)
	}
	rep("n1").Resume()
	waitFor(t, "n1 serving again", func() bool { return nodes[0].rt.Node().Serving })
	resp2, body := mcpPost(t, nodes[0].mcpURL, sessionHeaders(tok, session), `{"jsonrpc":"2.0","id":3,"method":"ping"}`)
	if resp2.StatusCode != http.StatusOK {
		t.Fatalf("the session after n1 serves again: %d %s, want 200", resp2.StatusCode, body)
	}
}

package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime"
	rtcluster "github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/transport"
)

// modernMeta is the _meta every 2026-07-28 request carries.
const modernMeta = `"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}`

// postVia posts text to the caller's thread through n (a 2026-07-28
// thread_post) and returns the answer's status, body and revision header.
func postVia(t *testing.T, n *rtNode, tok, text string) (int, []byte, int64) {
	t.Helper()
	resp, body := mcpPost(t, n.mcpURL, modernHeaders(tok, "tools/call", "thread_post"),
		`{"jsonrpc":"2.0","id":"p","method":"tools/call","params":{"name":"thread_post","arguments":{"text":"`+text+`"},`+modernMeta+`}}`)
	return resp.StatusCode, body, revisionOf(t, resp)
}

// readVia reads the caller's thread through n (a 2026-07-28 thread_read),
// asking for revision rev when it is above 0.
func readVia(t *testing.T, n *rtNode, tok string, rev int64) (int, []byte, int64) {
	t.Helper()
	h := modernHeaders(tok, "tools/call", "thread_read")
	if rev > 0 {
		h[transport.HeaderRevision] = strconv.FormatInt(rev, 10)
	}
	resp, body := mcpPost(t, n.mcpURL, h, `{"jsonrpc":"2.0","id":"r","method":"tools/call","params":{"name":"thread_read","arguments":{},`+modernMeta+`}}`)
	return resp.StatusCode, body, revisionOf(t, resp)
}

// revisionOf is an answer's Mcp-Runtime-Revision, which every answer of a
// node of several carries.
func revisionOf(t *testing.T, resp *http.Response) int64 {
	t.Helper()
	rev, err := strconv.ParseInt(resp.Header.Get(transport.HeaderRevision), 10, 64)
	if err != nil || rev <= 0 {
		t.Fatalf("answer %d without a revision: %s = %q", resp.StatusCode, transport.HeaderRevision, resp.Header.Get(transport.HeaderRevision))
	}
	return rev
}

func complete(status int, body []byte) bool {
	return status == http.StatusOK && bytes.Contains(body, []byte(`"resultType":"complete"`)) && !bytes.Contains(body, []byte(`"isError":true`))
}

// TestRuntimeReadsWhereTheyArrive: a 2026-07-28 read of a principal whose
// home is another node — a read tool's call, a list — is answered by the
// node it reached, from its replica, and a mutation goes on to the home
// (SPEC §5d.6); every answer carries the revision its node applied.
func TestRuntimeReadsWhereTheyArrive(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, mcpruntime.Config{})
	ctx := context.Background()
	_, tok := mintOn(t, nodes[0], "t1", "codex")
	if _, err := nodes[0].rt.StartRun(ctx, "t1", "codex"); err != nil {
		t.Fatal(err)
	}
	home := nodes[0]
	status, body, rev := postVia(t, home, tok, "hello")
	if !complete(status, body) {
		t.Fatalf("thread_post on the home: %d %s", status, body)
	}
	for _, n := range nodes[1:] {
		waitFor(t, n.id+" to apply the post", func() bool { return n.rt.Node().Applied >= rev })
		before := home.internalIn.Load()
		status, body, _ := readVia(t, n, tok, 0)
		if !complete(status, body) || !bytes.Contains(body, []byte("hello")) {
			t.Fatalf("thread_read through %s: %d %s, want the thread with its message", n.id, status, body)
		}
		resp, body := mcpPost(t, n.mcpURL, modernHeaders(tok, "tools/list", ""), `{"jsonrpc":"2.0","id":"l","method":"tools/list","params":{`+modernMeta+`}}`)
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("thread_read")) {
			t.Fatalf("tools/list through %s: %d %s", n.id, resp.StatusCode, body)
		}
		revisionOf(t, resp)
		if got := home.internalIn.Load() - before; got != 0 {
			t.Errorf("reads through %s reached the home %d times, want 0: a read is answered where it arrives", n.id, got)
		}
		status, body, _ = postVia(t, n, tok, "via "+n.id)
		if !complete(status, body) {
			t.Fatalf("thread_post through %s: %d %s", n.id, status, body)
		}
		if got := home.internalIn.Load() - before; got != 1 {
			t.Errorf("a post through %s reached the home %d times, want 1: a mutation goes to the home", n.id, got)
		}
	}
}

// TestRuntimeReadYourWrites: a read that follows the caller's own write,
// through the node that forwarded the write, sees it even while that
// node's replica lags (its applier stalled): the node sends the read to
// the home until its replica is proven current since the write's answer.
// And a read that asks for a revision (Mcp-Runtime-Revision, from an
// earlier answer) is answered only once the node applied it — the home
// answers it meanwhile. Both failing sides are deterministic: a stalled
// replica does not have the write.
func TestRuntimeReadYourWrites(t *testing.T) {
	rep := replicas(t)
	// The widest F: a stalled node serves until its last proof is F old,
	// and each step below must fit in that window (a step that does not is
	// tried again).
	nodes := startRuntimes(t, startEtcd(t), 2, mcpruntime.Config{Cluster: rtcluster.Config{Fence: 900 * time.Millisecond}})
	ctx := context.Background()
	home, other := nodes[0], nodes[1]
	_, tok := mintOn(t, home, "t1", "codex")
	if _, err := home.rt.StartRun(ctx, "t1", "codex"); err != nil {
		t.Fatal(err)
	}
	// stalled runs step with other's applier stalled, from a moment it
	// serves; it tries again (a few times) a step that met other no
	// longer serving (503), which says nothing of the rule.
	stalled := func(what string, step func(i int) (status int, retry bool)) {
		t.Helper()
		for i := range 5 {
			waitFor(t, other.id+" serving", func() bool { return other.rt.Node().Serving })
			rep(other.id).StallApplier()
			status, retry := step(i)
			rep(other.id).Resume()
			if !retry || status != http.StatusServiceUnavailable {
				return
			}
		}
		t.Fatalf("%s: %s never served long enough for the step", what, other.id)
	}

	stalled("own write", func(i int) (int, bool) {
		text := fmt.Sprintf("mine-%d", i)
		status, body, _ := postVia(t, other, tok, text)
		if status == http.StatusServiceUnavailable {
			return status, true
		}
		if !complete(status, body) {
			t.Fatalf("thread_post through %s: %d %s", other.id, status, body)
		}
		status, body, _ = readVia(t, other, tok, 0)
		if status == http.StatusServiceUnavailable {
			return status, true
		}
		if !complete(status, body) || !bytes.Contains(body, []byte(text)) {
			t.Fatalf("thread_read through %s right after its own post there: %d %s, want %q in it", other.id, status, body, text)
		}
		return status, false
	})

	stalled("asked revision", func(i int) (int, bool) {
		text := fmt.Sprintf("told-%d", i)
		status, body, rev := postVia(t, home, tok, text) // on the home: other never saw it
		if !complete(status, body) {
			t.Fatalf("thread_post on the home: %d %s", status, body)
		}
		status, body, _ = readVia(t, other, tok, rev)
		if status == http.StatusServiceUnavailable {
			return status, true
		}
		if !complete(status, body) || !bytes.Contains(body, []byte(text)) {
			t.Fatalf("thread_read through %s asking for revision %d: %d %s, want %q in it", other.id, rev, status, body, text)
		}
		return status, false
	})

	// Caught up, other answers a read asking for a revision it applied
	// itself.
	status, body, rev := postVia(t, home, tok, "later")
	if !complete(status, body) {
		t.Fatalf("thread_post on the home: %d %s", status, body)
	}
	waitFor(t, other.id+" to apply the post", func() bool { return other.rt.Node().Applied >= rev })
	before := home.internalIn.Load()
	status, body, _ = readVia(t, other, tok, rev)
	if !complete(status, body) || !bytes.Contains(body, []byte("later")) {
		t.Fatalf("thread_read through %s asking for a revision it applied: %d %s", other.id, status, body)
	}
	if got := home.internalIn.Load() - before; got != 0 {
		t.Errorf("a read of a revision %s applied reached the home %d times, want 0", other.id, got)
	}
}

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	rtcluster "github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/transport"
)

// machineInstances are the provider instances every node of the machine
// registers (in process, one exclusive session per thread).
var machineInstances = []string{"a", "b"}

// machineFence is the machine's F: a revoke waits at most about this long
// for a paused or stalled node. The fence loop checks every 100 ms (the
// runtime's default), so a healthy node's proof is at most ~100 ms old.
const machineFence = 300 * time.Millisecond

// quiet discards the machine nodes' logs: every credential event is a
// line, and a failing case prints only the machine's own account.
var quiet = slog.New(slog.DiscardHandler)

// machineNode is one runtime node of TestRuntimeClusterMachine: the
// runtime, the replica node under it (reached through
// replica.TestHookStarted, for faults) and its internal listener (the
// revokers' confirmations, forwarded MCP requests) and MCP listener.
type machineNode struct {
	id       string
	rt       *mcpruntime.Runtime
	rep      *replica.Node
	mcpURL   string // its MCP endpoint, http://127.0.0.1:port/mcp
	public   *http.Server
	internal *http.Server
}

// startMachineNodes starts n runtime nodes ("n1", …) on one etcd with
// fence F, registers machineInstances on each, and waits until every node
// serves and lists all n as members. Cleanup shuts them down one by one;
// a node in killed (its index) was paused for good and has lost its
// membership, so its Shutdown's writes are refused and its error is
// expected, not reported.
func startMachineNodes(t errorTB, endpoint string, n int, fence time.Duration, killed func() int) []*machineNode {
	t.Helper()
	var started *replica.Node
	prev := replica.TestHookStarted
	replica.TestHookStarted = func(r *replica.Node) { started = r }
	defer func() { replica.TestHookStarted = prev }()

	nodes := make([]*machineNode, 0, n)
	t.Cleanup(func() {
		for i, node := range nodes {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			node.rep.Resume()
			node.public.Close()
			err := node.rt.Shutdown(ctx)
			cancel()
			node.internal.Close()
			if err != nil && i != killed() {
				t.Errorf("node %s: Shutdown: %v", node.id, err)
			}
		}
	})
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprintf("n%d", i+1)
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen: %v", err)
		}
		pub, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			ln.Close()
			t.Fatalf("listen: %v", err)
		}
		started = nil
		mcpURL := "http://" + pub.Addr().String() + "/mcp"
		rt, err := mcpruntime.New(withOAuth(mcpruntime.Config{Endpoint: mcpURL, Logger: quiet, Cluster: rtcluster.Config{
			Etcd: []string{endpoint}, Node: id, URL: "http://" + ln.Addr().String(),
			Secret: testSecret, Fence: fence,
		}}))
		if err != nil {
			ln.Close()
			pub.Close()
			t.Fatalf("node %s: New: %v", id, err)
		}
		ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
		if err != nil || started == nil {
			ln.Close()
			pub.Close()
			_ = rt.Close()
			t.Fatalf("node %s: MCPHandler: %v; replica.TestHookStarted called: %v", id, err, started != nil)
		}
		node := &machineNode{id: id, rt: rt, rep: started, mcpURL: mcpURL,
			public:   &http.Server{Handler: ep, ReadHeaderTimeout: 10 * time.Second},
			internal: &http.Server{Handler: rt.InternalHandler(), ReadHeaderTimeout: 10 * time.Second}}
		go node.internal.Serve(ln)
		go node.public.Serve(pub)
		nodes = append(nodes, node)
		for _, inst := range machineInstances {
			if err := rt.RegisterInstance(ctx, inst, mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
				t.Fatalf("node %s: RegisterInstance(%s): %v", id, inst, err)
			}
		}
	}
	rts := make([]*mcpruntime.Runtime, len(nodes))
	for i, node := range nodes {
		rts[i] = node.rt
	}
	waitAllServing(t, rts...)
	return nodes
}

// errorTB is a tb that can also fail without stopping (from a cleanup).
type errorTB interface {
	tb
	Errorf(format string, args ...any)
}

// readOwnThread sends a 2026-07-28 tools/call of thread_read (the
// caller's own thread) with tok to n's MCP endpoint, asking for revision
// rev (Mcp-Runtime-Revision) when above 0, and returns the HTTP status,
// for a 200 whether the answer is a complete result without an error, and
// the texts of the thread's messages it read.
func readOwnThread(client *http.Client, n *machineNode, tok string, id, rev int64) (status int, ok bool, msgs []string, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, n.mcpURL, bytes.NewReader(modernCall(id)))
	if err != nil {
		return 0, false, nil, err
	}
	h := req.Header
	h["Authorization"] = []string{"Bearer " + tok}
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{"2026-07-28"}
	h["Mcp-Method"] = []string{"tools/call"}
	h["Mcp-Name"] = []string{"thread_read"}
	if rev > 0 {
		h[transport.HeaderRevision] = []string{strconv.FormatInt(rev, 10)}
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, nil, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		return resp.StatusCode, false, nil, err
	}
	var answer struct {
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Messages []struct {
					Text string `json:"text"`
				} `json:"messages"`
			} `json:"structuredContent"`
			ResultType string `json:"resultType"`
		} `json:"result"`
	}
	if err := json.Unmarshal(body, &answer); err != nil {
		return resp.StatusCode, false, nil, fmt.Errorf("thread_read answer %s: %w", body, err)
	}
	for _, m := range answer.Result.StructuredContent.Messages {
		msgs = append(msgs, m.Text)
	}
	return resp.StatusCode, answer.Result.ResultType == "complete" && !answer.Result.IsError, msgs, nil
}

// notHomeOf checks that err is a *NotHomeError for thread id naming home.
func notHomeOf(err error, id, home string) error {
	var nh *mcpruntime.NotHomeError
	if !errors.As(err, &nh) || !errors.Is(err, mcpruntime.ErrNotHome) || nh.ID != id || nh.Home != home {
		return fmt.Errorf("got %v, want a *NotHomeError for thread %s naming %s", err, id, home)
	}
	return nil
}

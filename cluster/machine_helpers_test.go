package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider"
	"github.com/agenthost/mcpruntime/internal/replica"
)

// machineInstances are the provider instances every node of the machine
// registers (in process, one exclusive session per thread).
var machineInstances = []string{"a", "b"}

// machineFence is the machine's F: a revoke waits at most about this long
// for a paused or stalled node. The fence loop checks every 100 ms (the
// runtime's default), so a healthy node's proof is at most ~100 ms old.
const machineFence = 300 * time.Millisecond

// machineNode is one runtime node of TestRuntimeClusterMachine: the
// runtime, the replica node under it (reached through
// replica.TestHookStarted, for faults) and its internal listener (the
// revokers' confirmations). It has no MCP listener: the machine drives
// the embedding API.
type machineNode struct {
	id       string
	rt       *mcpruntime.Runtime
	rep      *replica.Node
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
		started = nil
		rt, err := mcpruntime.New(mcpruntime.Config{Cluster: mcpruntime.ClusterConfig{
			Etcd: []string{endpoint}, Node: id, URL: "http://" + ln.Addr().String(),
			Secret: testSecret, Fence: fence,
		}})
		if err != nil {
			ln.Close()
			t.Fatalf("node %s: New: %v", id, err)
		}
		if started == nil {
			ln.Close()
			_ = rt.Close()
			t.Fatalf("node %s: replica.TestHookStarted was not called", id)
		}
		node := &machineNode{id: id, rt: rt, rep: started,
			internal: &http.Server{Handler: rt.InternalHandler(), ReadHeaderTimeout: 10 * time.Second}}
		go node.internal.Serve(ln)
		nodes = append(nodes, node)
		for _, inst := range machineInstances {
			if err := rt.RegisterInstance(ctx, inst, mcpruntime.InstanceSpec{Driver: provider.InprocKind}); err != nil {
				t.Fatalf("node %s: RegisterInstance(%s): %v", id, inst, err)
			}
		}
	}
	waitFor(t, "every node serving and seeing all members", func() bool {
		for _, node := range nodes {
			st := node.rt.Node()
			if !st.Serving || len(st.Members) != n {
				return false
			}
		}
		return true
	})
	return nodes
}

// errorTB is a tb that can also fail without stopping (from a cleanup).
type errorTB interface {
	tb
	Errorf(format string, args ...any)
}

// notHomeOf checks that err is a *NotHomeError for thread id naming home.
func notHomeOf(err error, id, home string) error {
	var nh *mcpruntime.NotHomeError
	if !errors.As(err, &nh) || !errors.Is(err, mcpruntime.ErrNotHome) || nh.ID != id || nh.Home != home {
		return fmt.Errorf("got %v, want a *NotHomeError for thread %s naming %s", err, id, home)
	}
	return nil
}

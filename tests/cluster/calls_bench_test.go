package cluster

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/replica"
)

// modernCall is a 2026-07-28 tools/call of thread_read (the caller's own
// thread), a read tool: what a provider calls most.
func modernCall(id int64) []byte { return modernToolCall("thread_read", `{}`, id) }

// modernToolCall is a 2026-07-28 tools/call of tool with arguments.
func modernToolCall(tool, arguments string, id int64) []byte {
	return []byte(`{"jsonrpc":"2.0","id":` + strconv.FormatInt(id, 10) +
		`,"method":"tools/call","params":{"name":"` + tool + `","arguments":` + arguments + `,"_meta":{` +
		`"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`)
}

// readThread posts one 2026-07-28 tools/call of thread_read (the
// caller's own thread) with tok to url, and returns the HTTP status and
// whether the answer is a complete result without an error.
func readThread(ctx context.Context, client *http.Client, url, tok string, id int64) (status int, ok bool, body []byte, err error) {
	return postTool(ctx, client, url, tok, "thread_read", modernCall(id))
}

// postTool posts one 2026-07-28 tools/call of tool (its body) with tok to
// url, and returns the HTTP status and whether the answer is a complete
// result without an error.
func postTool(ctx context.Context, client *http.Client, url, tok, tool string, call []byte) (status int, ok bool, body []byte, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(call))
	if err != nil {
		return 0, false, nil, err
	}
	h := req.Header
	h["Authorization"] = []string{"Bearer " + tok}
	h["Content-Type"] = []string{"application/json"}
	h["Accept"] = []string{"application/json, text/event-stream"}
	h["Mcp-Protocol-Version"] = []string{"2026-07-28"}
	h["Mcp-Method"] = []string{"tools/call"}
	h["Mcp-Name"] = []string{tool}
	resp, err := client.Do(req)
	if err != nil {
		return 0, false, nil, err
	}
	body, err = io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return 0, false, nil, err
	}
	ok = bytes.Contains(body, []byte(`"resultType":"complete"`)) && !bytes.Contains(body, []byte(`"isError":true`))
	return resp.StatusCode, ok, body, nil
}

// callOnce posts one modern tools/call to url with tok and checks the
// answer is a complete result.
func callOnce(ctx context.Context, client *http.Client, url, tok string, id int64) error {
	status, ok, body, err := readThread(ctx, client, url, tok, id)
	if err != nil {
		return err
	}
	if status != http.StatusOK || !ok {
		return fmt.Errorf("tools/call: %d %s", status, body)
	}
	return nil
}

// BenchmarkClusterCalls measures 2026-07-28 tools/call through the
// thread's home node and through another node: reads (thread_read), which
// the other node answers itself from its replica, and posts (thread_post,
// a mutation), which it forwards to the home (SPEC §5d.6). Three runtime
// nodes in this process on one embedded etcd, 16 callers, one credential
// that owns its thread's run. It reports calls/s and the p50 and p99
// latency; `make cluster-bench` (and `make bench-peers`) run it. No
// threshold is asserted.
func BenchmarkClusterCalls(b *testing.B) {
	endpoint := startEtcd(b)
	nodes := startRuntimes(b, endpoint, 3, mcpruntime.Config{})
	_, tok := mintOn(b, nodes[0], "bench", "codex")
	if _, err := nodes[0].rt.StartRun(context.Background(), "bench", "codex"); err != nil {
		b.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	defer client.CloseIdleConnections()
	for _, bc := range []struct {
		name string
		via  *rtNode
		tool string
		call func(id int64) []byte
	}{
		{"read/home", nodes[0], "thread_read", modernCall},
		{"read/other-node", nodes[1], "thread_read", modernCall},
		{"post/home", nodes[0], "thread_post", func(id int64) []byte { return modernToolCall("thread_post", `{"text":"bench"}`, id) }},
		{"post/other-node", nodes[1], "thread_post", func(id int64) []byte { return modernToolCall("thread_post", `{"text":"bench"}`, id) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const callers = 16
			ctx := context.Background()
			// A node whose fence lapsed on a starved machine answers 503 +
			// Retry-After, as a client would see; the call is tried again
			// (at most a second's worth) and the retries are reported.
			var unavailable atomic.Int64
			once := func(id int64) error {
				for try := 0; ; try++ {
					status, ok, body, err := postTool(ctx, client, bc.via.mcpURL, tok, bc.tool, bc.call(id))
					switch {
					case err != nil:
						return err
					case status == http.StatusServiceUnavailable && try < 100:
						unavailable.Add(1)
						time.Sleep(10 * time.Millisecond)
						continue
					case status != http.StatusOK || !ok:
						return fmt.Errorf("tools/call %s: %d %s", bc.tool, status, body)
					}
					return nil
				}
			}
			if err := once(1); err != nil {
				b.Fatal(err)
			}
			var next atomic.Int64
			took := make([][]time.Duration, callers)
			var wg sync.WaitGroup
			var failed atomic.Value
			b.ResetTimer()
			start := time.Now()
			for c := range callers {
				wg.Go(func() {
					for {
						i := next.Add(1)
						if i > int64(b.N) {
							return
						}
						t0 := time.Now()
						if err := once(i); err != nil {
							failed.Store(err)
							return
						}
						took[c] = append(took[c], time.Since(t0))
					}
				})
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			if err, _ := failed.Load().(error); err != nil {
				b.Fatal(err)
			}
			all := slices.Concat(took...)
			slices.Sort(all)
			b.ReportMetric(float64(len(all))/elapsed.Seconds(), "calls/s")
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(unavailable.Load()), "503-retries")
		})
	}
}

// BenchmarkFailover measures how long a crashed home's threads are
// unavailable: its node stops dead (its replica paused: no lease renewal,
// as a killed process), and the clock runs until a survivor has adopted
// the thread and a credential minted there authenticates. The lease TTL
// (3 s) dominates. It reports the seconds per failover; no threshold is
// asserted.
func BenchmarkFailover(b *testing.B) {
	rep := replicas(b)
	endpoint := startEtcd(b)
	admin := newClient(b, endpoint)
	defer admin.Close()
	ctx := context.Background()
	var total time.Duration
	for i := range b.N {
		b.StopTimer()
		if _, err := admin.Delete(ctx, replica.Prefix, clientv3.WithPrefix()); err != nil {
			b.Fatal(err) // the last round's nodes and threads
		}
		nodes := startRuntimes(b, endpoint, 3, mcpruntime.Config{})
		thread := fmt.Sprintf("fail%d", i)
		mintOn(b, nodes[0], thread, "codex")
		for _, n := range nodes[1:] {
			if err := n.rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
		start := time.Now()
		rep(nodes[0].id).Pause()
		adopter := waitAdopted(b, thread, nodes[1:]...)
		_, tok := mintOn(b, adopter, thread, "codex")
		if _, err := nodes[1].rt.Authenticate(tok); err != nil {
			b.Fatal(err)
		}
		total += time.Since(start)
		b.StopTimer()
		rep(nodes[0].id).Resume()
		for _, n := range nodes {
			if err := n.rt.Shutdown(ctx); err != nil && n != nodes[0] {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s/failover")
}

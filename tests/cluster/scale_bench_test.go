package cluster

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	segjson "github.com/segmentio/encoding/json"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	rtcluster "github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/replica"
	"github.com/agenthost/mcpruntime/memdb"
)

// The size of BenchmarkClusterScale: `make cluster-scale` runs the
// defaults (100 000 threads, 300 000 credentials of which 100 000 live,
// 10 000 client grants); smaller runs pass e.g. -args -scale.threads=10000.
var (
	scaleThreads  = flag.Int("scale.threads", 100_000, "BenchmarkClusterScale: threads (each with 2 revoked provider credentials, and a live one unless it is among the first scale.grants)")
	scaleGrants   = flag.Int("scale.grants", 10_000, "BenchmarkClusterScale: client grants (each with one live token); at most scale.threads")
	scaleRevokes  = flag.Int("scale.revokes", 200, "BenchmarkClusterScale: revokes timed for the p50 and p99")
	scaleMessages = flag.Int("scale.messages", 4, "BenchmarkClusterScale: messages in each thread's log (120 bytes each)")
	scaleProfile  = flag.String("scale.profile", "", "BenchmarkClusterScale: write CPU profiles of each phase, and a heap profile after the join, to files with this prefix")
)

// scaleNodes are the ids of the cluster's nodes; scaleJoiner joins it.
var scaleNodes = []string{"n1", "n2", "n3"}

const scaleJoiner = "n4"

// BenchmarkClusterScale measures the cluster at a long-running host's
// size: threads, credentials (most of them revoked) and client grants
// bulk-written into etcd in the layout internal/replica uses, homed on
// three runtime nodes in this process, which start one by one as after a
// restart of the whole cluster (each loads the store and takes its own
// threads); the live provider credentials are written once they run. It
// reports, as a table and as metrics:
//
//   - restart: each node's mcpruntime.New (its replica loaded, its own
//     threads and grants taken);
//   - join: a fourth node's mcpruntime.New (replica loaded from etcd,
//     registered, the adoption pass) until it serves, the process's CPU
//     time meanwhile, and the node's heap (runtime.ReadMemStats after
//     GC, before and after the join); and the replica's bytes per thread,
//     credential and grant, each table's rows applied as the applier
//     applies them into a store of its own before anything else runs;
//   - revoke: p50 and p99 of ReleaseProviderSession (a credential's revoke
//     through the runtime's API, with the barrier across the three healthy
//     nodes) of threads at that size;
//   - idle: the etcd requests each node makes per second while nothing
//     happens (a gRPC client interceptor on each node's etcd client counts
//     each unary call and each message sent on a stream), and etcd's own
//     count beside it;
//   - failover: a home stopped dead (its replica paused: no lease
//     renewal, as a killed process) until the survivors have adopted its
//     share of the threads and grants and run their actors, and until a
//     credential minted on one of them authenticates on the other;
//   - the fence lapses ("node stopped serving") meanwhile, the peak RSS
//     and the machine's load average (what else ran).
//
// `make cluster-scale` runs it (-benchtime=1x). No threshold is
// asserted; docs/cluster.md ("Scale") has the figures.
func BenchmarkClusterScale(b *testing.B) {
	if *scaleGrants > *scaleThreads {
		b.Fatalf("-scale.grants %d > -scale.threads %d", *scaleGrants, *scaleThreads)
	}
	for range b.N {
		runScale(b)
	}
}

// scaleFigures are one run's measurements.
type scaleFigures struct {
	load, startAll, startCPU, liveLoad time.Duration
	restart                            []time.Duration // each node's New: its store loaded, its own threads taken
	join, joinNew                      time.Duration
	joinHeap                           int64
	perThread, perCred, perGrant       float64       // replica bytes
	storeLoad, storeLoadCPU            time.Duration // the rows decoded and inserted into a fresh store, in a small heap
	revokeP50, revokeP99, revokeMax    time.Duration
	idlePerNode                        map[string]map[string]float64 // node → method → per second
	idleServer                         map[string]float64            // etcd's count per second by method, all nodes
	failDetect, failAdopt, failServe   time.Duration
	joinCPU, failCPU                   time.Duration     // the process's CPU time (every node and etcd)
	loadavg                            [2]string         // /proc/loadavg at the start and the end: what else ran
	loadLapses, failLapses             int64             // fence lapses while the rows were written and taken, during the failover
	adopted                            map[string][2]int // survivor → threads, grants adopted
	peakRSS                            string
}

func runScale(b *testing.B) {
	T, G := *scaleThreads, *scaleGrants
	var f scaleFigures
	f.loadavg[0] = loadavg()
	rows := scaleRows(T, G, *scaleMessages)
	// Before anything else runs in the process, so that nothing else's
	// heap moves under the measurement.
	f.perThread, f.perCred, f.perGrant, f.storeLoad, f.storeLoadCPU = replicaBytes(b, rows)

	etcd := startEtcdServer(b)
	endpoint := etcd.Clients[0].Addr().String()
	admin := newClient(b, endpoint)
	defer admin.Close()
	ctx := context.Background()

	// The rows every node keeps, homed round-robin, bulk-written in
	// transactions of etcd's default limit (128 operations) before any
	// node runs: a long-running host's store.
	start := time.Now()
	stop := profilePhase(b, "load")
	bulkPut(b, admin, rows.base, 8)
	stop()
	f.load = time.Since(start)

	// The nodes start one by one, as after a restart of the whole
	// cluster: each loads the store and takes its own threads and grants
	// (the adoption pass of a node that finds itself their home), while
	// the others are registered already (by the test, under a lease of its
	// own, until their own registration replaces it) so that none takes
	// another's. Their live provider credentials come after, since a home
	// taking a thread over revokes them.
	lease, err := admin.Grant(ctx, 600)
	if err != nil {
		b.Fatal(err)
	}
	for _, id := range scaleNodes {
		if _, err := admin.Put(ctx, replica.ServingPrefix+id, `{"id":"`+id+`"}`, clientv3.WithLease(lease.ID)); err != nil {
			b.Fatal(err)
		}
	}
	rpcs := map[string]*rpcCounter{}
	nodes := map[string]*scaleNode{}
	start, cpu := time.Now(), cpuTime()
	stop = profilePhase(b, "start")
	for _, id := range scaleNodes {
		rpcs[id] = &rpcCounter{}
		nodes[id] = startScaleNode(b, endpoint, id, rpcs[id])
		f.restart = append(f.restart, nodes[id].newTook)
	}
	f.startAll, f.startCPU = time.Since(start), cpuTime()-cpu
	stop()
	if _, err := admin.Revoke(ctx, lease.ID); err != nil {
		b.Fatal(err)
	}
	for i, id := range scaleNodes {
		wantThreads, wantGrants := homed(T, i), homed(G, i)
		waitFor(b, id+" serving with every member, its threads and grants running", func() bool {
			st, n := nodes[id].rt.Node(), nodes[id].rt.Stats()
			return st.Serving && len(st.Members) == len(scaleNodes) && n.Threads == wantThreads && n.Clients == wantGrants
		})
	}

	lapsed := lapses.n.Load()
	start = time.Now()
	last := bulkPut(b, admin, rows.live, 2)
	for _, id := range scaleNodes {
		waitForLong(b, id+" to apply the live credentials", 5*time.Minute, func() bool { return nodes[id].rt.Node().Applied >= last })
	}
	f.liveLoad = time.Since(start)
	f.loadLapses = lapses.n.Load() - lapsed
	rows = scaleData{} // only the counts from here on
	if got := nodes["n1"].rt.Stats().LiveCredentials; got != T {
		b.Fatalf("live credentials on n1 = %d, want %d", got, T)
	}

	// Idle: what each node asks of etcd per second when nothing happens.
	time.Sleep(time.Second)
	before := map[string]map[string]int64{}
	for id, c := range rpcs {
		before[id] = c.snapshot()
	}
	serverBefore := etcdRequests(b)
	const idle = 5 * time.Second
	time.Sleep(idle)
	serverAfter := etcdRequests(b)
	f.idlePerNode = map[string]map[string]float64{}
	for id, c := range rpcs {
		f.idlePerNode[id] = map[string]float64{}
		for m, n := range c.snapshot() {
			if d := n - before[id][m]; d > 0 {
				f.idlePerNode[id][m] = float64(d) / idle.Seconds()
			}
		}
	}
	f.idleServer = map[string]float64{}
	for m, n := range serverAfter {
		if d := n - serverBefore[m]; d > 0 {
			f.idleServer[m] = float64(d) / idle.Seconds()
		}
	}

	// Join: a fourth node, from New until it serves.
	heapBefore := heapAlloc()
	rpcs[scaleJoiner] = &rpcCounter{}
	start, cpu = time.Now(), cpuTime()
	stop = profilePhase(b, "join")
	joiner := startScaleNode(b, endpoint, scaleJoiner, rpcs[scaleJoiner])
	f.joinNew = joiner.newTook
	waitFor(b, scaleJoiner+" serving", func() bool { return joiner.rt.Node().Serving })
	f.join, f.joinCPU = time.Since(start), cpuTime()-cpu
	stop()
	writeHeapProfile(b, "join")
	f.joinHeap = heapAlloc() - heapBefore
	if got := joiner.rt.Stats().LiveCredentials; got != T {
		b.Fatalf("live credentials on the joiner = %d, want %d", got, T)
	}
	joiner.shutdown(b)

	// Revoke at that size, three healthy nodes: a provider session of a
	// thread homed on n1 opened (untimed), then released.
	n1 := nodes["n1"]
	if err := n1.rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
		b.Fatal(err)
	}
	took := make([]time.Duration, 0, *scaleRevokes)
	for i := range *scaleRevokes {
		thread := scaleThreadID(3 * i) // homed on n1
		ps, err := n1.rt.OpenProviderSession(ctx, thread, "codex")
		if err != nil {
			b.Fatalf("OpenProviderSession(%s): %v", thread, err)
		}
		t0 := time.Now()
		if err := n1.rt.ReleaseProviderSession(ctx, ps.ID); err != nil {
			b.Fatalf("ReleaseProviderSession(%s): %v", ps.ID, err)
		}
		took = append(took, time.Since(t0))
	}
	slices.Sort(took)
	f.revokeP50, f.revokeP99, f.revokeMax = took[len(took)/2], took[len(took)*99/100], took[len(took)-1]

	// Failover: n1 stops dead; the survivors adopt its share.
	survivors := []*scaleNode{nodes["n2"], nodes["n3"]}
	base := map[string][2]int{}
	for _, s := range survivors {
		st := s.rt.Stats()
		base[s.id] = [2]int{st.Threads, st.Clients}
	}
	threads0, grants0 := lapses.threads.Load(), lapses.grants.Load()
	start, cpu, lapsed = time.Now(), cpuTime(), lapses.n.Load()
	stop = profilePhase(b, "failover")
	n1.rep.Pause()
	waitForLong(b, "the survivors to see n1 gone", time.Minute, func() bool {
		for _, s := range survivors {
			if slices.Contains(s.rt.Node().Members, "n1") {
				return false
			}
		}
		return true
	})
	f.failDetect = time.Since(start)
	waitForLong(b, "the survivors to adopt n1's threads and grants", 10*time.Minute, func() bool {
		return lapses.threads.Load()-threads0 >= int64(homed(T, 0)) && lapses.grants.Load()-grants0 >= int64(homed(G, 0))
	})
	f.failAdopt, f.failCPU, f.failLapses = time.Since(start), cpuTime()-cpu, lapses.n.Load()-lapsed
	stop()
	f.adopted = map[string][2]int{}
	threads, grants := 0, 0
	for _, s := range survivors {
		st := s.rt.Stats()
		f.adopted[s.id] = [2]int{st.Threads - base[s.id][0], st.Clients - base[s.id][1]}
		threads, grants = threads+st.Threads, grants+st.Clients
	}
	if threads != T || grants != G {
		b.Fatalf("the survivors run %d threads and %d grants, want %d and %d", threads, grants, T, G)
	}
	// One of n1's threads served by its adopter: a new credential minted
	// there authenticates on the other survivor.
	thread := scaleThreadID(3 * *scaleRevokes)
	var adopter, other *scaleNode
	for i, s := range survivors {
		if th, err := s.rt.Thread(ctx, thread); err == nil && th.Home == s.id {
			adopter, other = s, survivors[1-i]
		}
	}
	if adopter == nil {
		b.Fatalf("no survivor is %s's home", thread)
	}
	if err := adopter.rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
		b.Fatal(err)
	}
	ps, err := adopter.rt.OpenProviderSession(ctx, thread, "codex")
	if err != nil {
		b.Fatalf("OpenProviderSession(%s) on its adopter: %v", thread, err)
	}
	if _, err := other.rt.Authenticate(strings.TrimPrefix(ps.Authorization, "Bearer ")); err != nil {
		b.Fatalf("the adopter's credential on %s: %v", other.id, err)
	}
	f.failServe = time.Since(start)
	f.peakRSS = procStatus("VmHWM")
	f.loadavg[1] = loadavg()

	reportScale(b, T, G, f)

	// Down, within bounds: a graceful Shutdown revokes each thread's
	// credentials in a write of its own (minutes at this size); once their
	// registrations are gone, the nodes have lost their membership and
	// those writes fail at once.
	lapses.down.Store(true)
	defer lapses.down.Store(false)
	for _, id := range scaleNodes {
		if _, err := admin.Delete(ctx, replica.ServingPrefix+id); err != nil {
			b.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for _, id := range scaleNodes {
		n := nodes[id]
		n.rep.Resume()
		select {
		case <-n.rep.Stopped():
		case <-time.After(30 * time.Second):
			b.Fatalf("%s still a member 30 s after its registration was deleted", id)
		}
		wg.Go(func() { n.shutdown(b) })
	}
	wg.Wait()
}

// profilePhase starts a CPU profile of phase when -scale.profile is
// set; the returned function stops it.
func profilePhase(b *testing.B, phase string) (stop func()) {
	if *scaleProfile == "" {
		return func() {}
	}
	f, err := os.Create(*scaleProfile + "-" + phase + ".pprof")
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// writeHeapProfile writes the heap profile after phase when
// -scale.profile is set.
func writeHeapProfile(b *testing.B, phase string) {
	if *scaleProfile == "" {
		return
	}
	f, err := os.Create(*scaleProfile + "-" + phase + "-heap.pprof")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// homed is how many of n round-robin rows are homed on the i-th node.
func homed(n, i int) int {
	k := len(scaleNodes)
	if i < n%k {
		return n/k + 1
	}
	return n / k
}

func scaleThreadID(i int) string { return fmt.Sprintf("t%07d", i) }

// scaleData is the rows of a run: base (threads, grants, revoked
// credentials, client tokens) and live (the live provider credentials).
type scaleData struct {
	base, live                   []scaleKV
	threads, credentials, grants []scaleKV
}

// scaleRows builds the rows: T threads homed round-robin on scaleNodes
// with msgs messages each, every thread with two revoked provider
// credentials and, past the first G threads, a live one; G client grants
// homed round-robin, each with one live token. T + 2T … 3T credentials,
// T of them live.
func scaleRows(T, G, msgs int) scaleData {
	var d scaleData
	now := time.Now().UTC().Truncate(time.Second)
	text := strings.Repeat("a long-running host's thread message, ", 4)[:120]
	put := func(dst *[]scaleKV, table, id string, rec any) {
		val, err := json.Marshal(rec)
		if err != nil {
			panic(err)
		}
		kv := scaleKV{replica.TableKey(table, id), string(val)}
		*dst = append(*dst, kv)
		switch table {
		case memdb.TableThreads:
			d.threads = append(d.threads, kv)
		case memdb.TableCredentials:
			d.credentials = append(d.credentials, kv)
		case memdb.TableClientGrants:
			d.grants = append(d.grants, kv)
		}
	}
	hash := func(s string) string {
		h := sha256.Sum256([]byte(s))
		return hex.EncodeToString(h[:])
	}
	cred := 0
	provider := func(thread string, live bool) *memdb.Credential {
		cred++
		id := "cred_" + hash(fmt.Sprint("cred", cred))[:32] // random-looking, as token.NewID's
		c := &memdb.Credential{
			ID: id, TokenHash: hash(id), Kind: memdb.KindProvider, Namespace: principal.ProviderNamespace(id),
			Thread: thread, Instance: "codex", Capabilities: []string{"thread_read", "thread_post"},
			Issued: now.Add(-48 * time.Hour), LastLive: now.Add(-time.Hour), Expires: now.Add(23 * time.Hour),
			State: memdb.StateLive,
		}
		if !live {
			c.State, c.RevokeReason, c.Revoked = memdb.StateRevoked, "replaced", now.Add(-2*time.Hour)
		}
		return c
	}
	for i := range T {
		id := scaleThreadID(i)
		t := &memdb.Thread{ID: id, Home: scaleNodes[i%len(scaleNodes)], Status: memdb.ThreadActive, Instance: "codex",
			NextSeq: uint64(msgs), Created: now.Add(-72 * time.Hour), LastTurn: now.Add(-time.Hour)}
		for s := range msgs {
			t.Messages = append(t.Messages, memdb.Message{Seq: uint64(s), Text: text, Author: "cred:cred_x", Instance: "codex", At: now})
		}
		put(&d.base, memdb.TableThreads, id, t)
		for range 2 {
			c := provider(id, false)
			put(&d.base, memdb.TableCredentials, c.ID, c)
		}
		if i >= G {
			c := provider(id, true)
			put(&d.live, memdb.TableCredentials, c.ID, c)
		}
	}
	for i := range G {
		id := fmt.Sprintf("c%06d", i)
		g := &memdb.ClientGrant{ID: id, Home: scaleNodes[i%len(scaleNodes)], Label: "client " + id,
			Access: memdb.AccessReadWrite, State: memdb.StateLive, Created: now.Add(-72 * time.Hour), Via: "admin"}
		put(&d.base, memdb.TableClientGrants, id, g)
		tid := "ctok_" + hash(fmt.Sprint("ctok", i))[:32]
		c := &memdb.Credential{ID: tid, TokenHash: hash(tid), Kind: memdb.KindClient, Namespace: principal.ClientNamespace(id),
			Client: id, Access: memdb.AccessReadWrite, Issued: now.Add(-time.Hour), LastLive: now.Add(-time.Hour),
			Expires: now.Add(23 * time.Hour), State: memdb.StateLive}
		put(&d.base, memdb.TableCredentials, tid, c)
	}
	return d
}

// replicaBytes measures the heap a replica spends per thread, credential
// and grant: each table's rows applied, as the applier applies them, into
// a store of its own, the heap read after GC before and after each.
//
// It also returns how long the three loads took, in all and in CPU: the
// replica's load of the rows (decoded and inserted as the applier does)
// in a process of its own, without etcd's part.
func replicaBytes(b *testing.B, d scaleData) (perThread, perCred, perGrant float64, took, cpu time.Duration) {
	store, err := memdb.New()
	if err != nil {
		b.Fatal(err)
	}
	per := func(table string, kvs []scaleKV) float64 {
		before := heapAlloc()
		start, cpu0 := time.Now(), cpuTime()
		defer func() { took, cpu = took+time.Since(start), cpu+cpuTime()-cpu0 }()
		err := store.Apply(func(w *memdb.Writer) error {
			for i, kv := range kvs {
				rec, err := memdb.NewRecord(table)
				if err != nil {
					return err
				}
				if err := segjson.Unmarshal([]byte(kv.val), rec); err != nil { // the applier's decoder
					return err
				}
				if err := w.Put(table, rec); err != nil {
					return err
				}
				if err := w.SetRevision(table, memdb.RowID(rec), int64(i+1)); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		after := heapAlloc()
		return float64(after-before) / float64(len(kvs))
	}
	perThread = per(memdb.TableThreads, d.threads)
	perCred = per(memdb.TableCredentials, d.credentials)
	perGrant = per(memdb.TableClientGrants, d.grants)
	runtime.KeepAlive(store)
	return
}

// heapAlloc is the live heap after two collections.
func heapAlloc() int64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// cpuTime is the CPU time the process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadavg is the machine's load averages (1, 5, 15 min), from
// /proc/loadavg.
func loadavg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(raw))[:3], " ")
}

// procStatus is a field of /proc/self/status ("" where there is none).
func procStatus(field string) string {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// waitForLong polls cond every 20 ms until it holds or limit passes.
func waitForLong(t tb, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func reportScale(b *testing.B, T, G int, f scaleFigures) {
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	var idle []string
	ids := slices.Sorted(maps.Keys(f.idlePerNode))
	var total float64
	for _, id := range ids {
		var sum float64
		var parts []string
		for _, m := range slices.Sorted(maps.Keys(f.idlePerNode[id])) {
			sum += f.idlePerNode[id][m]
			parts = append(parts, fmt.Sprintf("%s %.1f", m, f.idlePerNode[id][m]))
		}
		total += sum
		idle = append(idle, fmt.Sprintf("%s %.1f/s (%s)", id, sum, strings.Join(parts, ", ")))
	}
	var adopted []string
	for _, id := range slices.Sorted(maps.Keys(f.adopted)) {
		adopted = append(adopted, fmt.Sprintf("%s %d threads + %d grants", id, f.adopted[id][0], f.adopted[id][1]))
	}
	w := os.Stdout
	fmt.Fprintf(w, "\n%s\ncluster scale: %d threads, %d credentials (%d live), %d client grants; 3 nodes + 1 joining, etcd embedded (fsync off), GOMAXPROCS %d\n",
		time.Now().UTC().Format(time.RFC3339), T, 3*T, T, G, runtime.GOMAXPROCS(0))
	rowsOut := [][2]string{
		{"bulk load into etcd (all but the live provider credentials)", s(f.load)},
		{"restart: each node's New (store loaded, its own threads taken)", durations(f.restart) + " (all three: CPU " + s(f.startCPU) + ")"},
		{"live credentials written and applied on 3 nodes", s(f.liveLoad)},
		{"join: New returned", s(f.joinNew)},
		{"join: New until serving", s(f.join) + " (CPU " + s(f.joinCPU) + ")"},
		{"join: heap of the joining node", fmt.Sprintf("%.0f MiB", float64(f.joinHeap)/(1<<20))},
		{"replica heap per thread / credential / grant", fmt.Sprintf("%.0f / %.0f / %.0f B", f.perThread, f.perCred, f.perGrant)},
		{"the rows decoded and inserted into a fresh store, nothing else running", s(f.storeLoad) + " (CPU " + s(f.storeLoadCPU) + ")"},
		{"revoke (release) p50 / p99 / max, 3 healthy nodes", ms(f.revokeP50) + " / " + ms(f.revokeP99) + " / " + ms(f.revokeMax)},
		{"idle etcd requests per node (client count)", strings.Join(idle, "; ")},
		{"idle etcd requests, etcd's count / nodes", perNode(f.idleServer, len(ids)) + fmt.Sprintf(" (the clients' count / nodes: %.1f/s)", total/float64(len(ids)))},
		{"failover: survivors see the home gone", s(f.failDetect)},
		{"failover: home's threads and grants adopted, actors running", s(f.failAdopt) + " (CPU " + s(f.failCPU) + "; " + strings.Join(adopted, ", ") + ")"},
		{"failover: a new credential of an adopted thread authenticates", s(f.failServe)},
		{"fence lapses: while rows were written and taken / in the failover", fmt.Sprintf("%d / %d", f.loadLapses, f.failLapses)},
		{"peak RSS of the test process", f.peakRSS},
		{"machine load average (1, 5, 15 min) at start / end", f.loadavg[0] + " / " + f.loadavg[1]},
	}
	for _, r := range rowsOut {
		fmt.Fprintf(w, "  %-62s %s\n", r[0], r[1])
	}
	b.ReportMetric(f.join.Seconds(), "join-s")
	b.ReportMetric(float64(f.revokeP99.Microseconds())/1000, "revoke-p99-ms")
	b.ReportMetric(f.failAdopt.Seconds(), "failover-s")
}

// lapses counts the nodes' "node stopped serving" warnings (a fence that
// lapsed: the node answered 503 until its next confirmation) and prints
// errors; the benchmark's nodes log to it.
var lapses = &lapseCounter{}

type lapseCounter struct {
	n atomic.Int64
	// threads and grants count the rows the nodes' adoption passes took
	// (their "threads adopted" and "client grants adopted" records, logged
	// once a batch's actors run): the failover waits on them rather than
	// on Runtime.Stats, whose count of live credentials would cost the
	// survivors more than the adoption it waits for.
	threads, grants atomic.Int64
	// down is set as the benchmark takes the nodes down: their loss of
	// membership is expected then, and not printed.
	down atomic.Bool
}

func (c *lapseCounter) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (c *lapseCounter) WithAttrs([]slog.Attr) slog.Handler           { return c }
func (c *lapseCounter) WithGroup(string) slog.Handler                { return c }

func (c *lapseCounter) Handle(_ context.Context, r slog.Record) error {
	switch r.Message {
	case "node stopped serving":
		c.n.Add(1)
	case "threads adopted", "client grants adopted":
		r.Attrs(func(a slog.Attr) bool {
			if a.Key != "count" {
				return true
			}
			if r.Message == "threads adopted" {
				c.threads.Add(a.Value.Int64())
			} else {
				c.grants.Add(a.Value.Int64())
			}
			return false
		})
	}
	if r.Level >= slog.LevelError && !c.down.Load() {
		var attrs []string
		r.Attrs(func(a slog.Attr) bool {
			attrs = append(attrs, a.String())
			return true
		})
		fmt.Fprintln(os.Stderr, r.Level, r.Message, strings.Join(attrs, " "))
	}
	return nil
}

// durations formats durations in seconds, "a / b / c s".
func durations(ds []time.Duration) string {
	var parts []string
	for _, d := range ds {
		parts = append(parts, fmt.Sprintf("%.2f", d.Seconds()))
	}
	return strings.Join(parts, " / ") + " s"
}

// perNode formats per-method rates divided by nodes: "total/s (method
// rate, …)".
func perNode(rates map[string]float64, nodes int) string {
	var sum float64
	var parts []string
	for _, m := range slices.Sorted(maps.Keys(rates)) {
		r := rates[m] / float64(nodes)
		sum += r
		parts = append(parts, fmt.Sprintf("%s %.1f", m, r))
	}
	return fmt.Sprintf("%.1f/s (%s)", sum, strings.Join(parts, ", "))
}

// scaleNode is one runtime node of the scale benchmark.
type scaleNode struct {
	*rtNode
	rep     *replica.Node
	newTook time.Duration // mcpruntime.New's duration
}

// startScaleNode starts runtime node id on endpoint, counting its etcd
// requests in rpcs, and shuts it down at cleanup (unless shutdown ran).
func startScaleNode(b *testing.B, endpoint, id string, rpcs *rpcCounter) *scaleNode {
	b.Helper()
	internalLn, publicLn := listen(b), listen(b)
	c := &countedCluster{rpcs: rpcs, Config: rtcluster.Config{
		Etcd: []string{endpoint}, Node: id, URL: "http://" + internalLn.Addr().String(), Secret: testSecret,
	}}
	cfg := mcpruntime.Config{
		Cluster:    c,
		Endpoint:   "http://" + publicLn.Addr().String() + "/mcp",
		MaxThreads: 1 << 20,
		Logger:     slog.New(lapses),
	}
	start := time.Now()
	rt, err := mcpruntime.New(cfg)
	if err != nil {
		b.Fatalf("node %s: New: %v", id, err)
	}
	took := time.Since(start)
	ep, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		b.Fatalf("node %s: MCPHandler: %v", id, err)
	}
	n := &scaleNode{rtNode: &rtNode{id: id, rt: rt, ep: ep, mcpURL: cfg.Endpoint, internalAddr: internalLn.Addr().String()},
		rep: c.rep, newTook: took}
	n.internal = &http.Server{Handler: rt.InternalHandler(), ReadHeaderTimeout: 10 * time.Second}
	n.public = &http.Server{Handler: ep, ReadHeaderTimeout: 10 * time.Second}
	go n.internal.Serve(internalLn)
	go n.public.Serve(publicLn)
	b.Cleanup(func() { n.shutdown(b) })
	return n
}

// shutdown stops the node once: its listeners and its runtime. A node
// paused for failover is resumed first; its writes are refused then (it
// lost its membership), which is not reported.
func (n *scaleNode) shutdown(b *testing.B) {
	if n.public == nil {
		return
	}
	n.rep.Resume()
	n.public.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := n.rt.Shutdown(ctx)
	n.internal.Close()
	n.public = nil
	select {
	case <-n.rep.Stopped():
	default:
		if err != nil {
			b.Errorf("node %s: Shutdown: %v", n.id, err)
		}
	}
}

// countedCluster joins as cluster.Config does, with a gRPC client
// interceptor on the node's etcd client that counts every request it
// sends: each unary call, and each message sent on a stream (a lease
// renewal, a watch's progress request).
type countedCluster struct {
	rtcluster.Config
	rpcs *rpcCounter
	rep  *replica.Node
}

func (c *countedCluster) Join(opts membership.Options) (membership.Node, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.Etcd, DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{
			grpc.WithChainUnaryInterceptor(c.rpcs.unary),
			grpc.WithChainStreamInterceptor(c.rpcs.stream),
		},
	})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := replica.Start(ctx, replica.Config{
		Client: cli, Node: c.Node, Fence: c.Fence, URL: c.URL, Secret: c.Secret,
		OnUnavailable: opts.OnUnavailable, Logger: opts.Logger,
	})
	if err != nil {
		cli.Close()
		return nil, err
	}
	c.rep = rep
	return &countedNode{Node: rep, cli: cli, secret: c.Secret}, nil
}

// countedNode is cluster's node: a replica with the etcd client it owns.
type countedNode struct {
	*replica.Node
	cli    *clientv3.Client
	secret string
}

func (n *countedNode) Secret() string { return n.secret }

// ClientTLS: the scale benchmark's nodes talk plain HTTP.
func (n *countedNode) ClientTLS() *tls.Config { return nil }

func (n *countedNode) NodeAuth(next http.Handler) http.Handler {
	return replica.NodeAuth(n.secret, next)
}

func (n *countedNode) ThreadExists(ctx context.Context, id string) bool {
	resp, err := n.cli.Get(ctx, replica.TableKey(memdb.TableThreads, id), clientv3.WithCountOnly())
	return err == nil && resp.Count > 0
}

func (n *countedNode) Close() error {
	err := n.Node.Close()
	return errors.Join(err, n.cli.Close())
}

// rpcCounter counts a client's etcd requests by method.
type rpcCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *rpcCounter) add(method string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[method[strings.LastIndexByte(method, '/')+1:]]++
}

func (c *rpcCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.n)
}

func (c *rpcCounter) unary(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	c.add(method)
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (c *rpcCounter) stream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	s, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return &countedStream{ClientStream: s, c: c, method: method}, nil
}

type countedStream struct {
	grpc.ClientStream
	c      *rpcCounter
	method string
}

func (s *countedStream) SendMsg(m any) error {
	s.c.add(s.method)
	return s.ClientStream.SendMsg(m)
}

// etcdRequests is etcd's own count of the requests it received, by
// method: unary calls handled and messages received on streams
// (grpc_server_handled_total of unary calls, grpc_server_msg_received_total
// of streams), from the default Prometheus registry the embedded server
// registers them in.
func etcdRequests(b *testing.B) map[string]int64 {
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		b.Fatal(err)
	}
	out := map[string]int64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			typ, method := "", ""
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "grpc_type":
					typ = l.GetValue()
				case "grpc_method":
					method = l.GetValue()
				}
			}
			switch {
			case mf.GetName() == "grpc_server_handled_total" && typ == "unary":
				out[method] += int64(m.GetCounter().GetValue())
			case mf.GetName() == "grpc_server_msg_received_total" && typ != "unary":
				out[method] += int64(m.GetCounter().GetValue())
			}
		}
	}
	return out
}

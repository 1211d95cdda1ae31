package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/memdb"
)

// maxPause bounds how long the machine leaves a node paused: well inside
// the serving lease's 3 s TTL, so that a pause is a pause and not a loss
// of membership (that is the kill action's).
const maxPause = 1200 * time.Millisecond

// Counts of the interesting events over the whole property: the machine
// is not vacuous only if each happened.
var machineStats struct {
	revokes       atomic.Int64 // revoking calls that returned (release, rotate, archive, delete)
	revokedChecks atomic.Int64 // checks that a node refused a token whose revoke returned while serving
	liveChecks    atomic.Int64 // checks that a serving node authenticated a live token
	faultRevokes  atomic.Int64 // revokes that returned while a node was paused or stalled
	kills         atomic.Int64 // kills whose threads a survivor adopted
	adopted       atomic.Int64 // threads adopted after a kill
	races         atomic.Int64 // revoke/authenticate races with an authentication while the release ran
	raced         atomic.Int64 // of those, the races that saw the token pass and then fail
	createRaces   atomic.Int64 // concurrent creates of one id
	posts         atomic.Int64 // posts that succeeded
	refusedPosts  atomic.Int64 // posts the runtime refused as the model said
	notHome       atomic.Int64 // NotHomeError answers checked
	liveCalls     atomic.Int64 // HTTP reads with a live token answered 200 (forwarded to the home or not)
	refusedCalls  atomic.Int64 // HTTP reads with a token whose revoke returned answered 401
	stalePosts    atomic.Int64 // posts answered a stale read (the machine fails on one)
}

// TestRuntimeClusterMachine runs random sequences of the runtime's thread
// and credential operations, each on a random node of three runtimes on
// one etcd, with faults (pause, stall, resume, and at most one kill per
// check), against a plain model: threads (home, status, current
// instance, run, messages, provider sessions) and credentials (token,
// pair, whether a revoke of it returned). After every step it checks, on
// every node, at once: no node authenticates a token whose revoke
// returned; every serving node authenticates a live token whose mint
// returned, and a node that does not serve but applied the mint holds it
// in its replica; every thread has one home, a member, and every other
// node answers *NotHomeError naming it; each node holds an actor for
// exactly the threads it is home of; each node's replica holds every
// thread as the model does (messages in order); serving nodes agree on
// the members; a killed node never serves again and cannot write (SPEC
// §5d, §6). With them, OAuth sign-ins whose steps run on drawn nodes,
// refreshes, reuses, replays and refresh races, against a model of the
// grants (runtime_oauth_prop_test.go, SPEC §5c, §5d.9). Waits are bounded
// polls, only where the spec allows a delay: a resumed node serving
// again, a killed node's lease lapsing and its threads' and grants'
// adoption.
func TestRuntimeClusterMachine(t *testing.T) {
	endpoint := startEtcd(t)
	admin := newClient(t, endpoint)
	defer admin.Close()
	rapid.Check(t, func(t *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Delete(ctx, "/mcpruntime/", clientv3.WithPrefix()); err != nil {
			t.Fatalf("clear etcd: %v", err)
		}
		m := newClusterMachine(t, endpoint)
		t.Repeat(m.actions())
		m.closingKill(t)
	})
	s, o := &machineStats, &oauthStats
	t.Logf("OAuth: sign-ins %d (over three nodes %d), refreshes %d (through another node %d), reuses %d, replays %d, refresh races %d, spent pairing codes refused %d, grant tokens authenticated %d, refused %d, calls %d, grants adopted %d",
		o.signIns.Load(), o.spreadSignIns.Load(), o.refreshes.Load(), o.awayRefreshes.Load(), o.reuses.Load(), o.replays.Load(),
		o.races.Load(), o.pairingReuses.Load(), o.liveTokens.Load(), o.revokedTokens.Load(), o.calls.Load(), o.adopted.Load())
	t.Logf("revokes %d (with a node paused or stalled %d), refusals of revoked tokens on serving nodes %d, live tokens authenticated on serving nodes %d, kills %d adopting %d threads, revoke/authenticate races %d (the token seen passing, then failing: %d), create races %d, posts %d (refused as modelled %d), NotHome answers %d, HTTP reads answered %d, refused %d, posts answered stale %d",
		s.revokes.Load(), s.faultRevokes.Load(), s.revokedChecks.Load(), s.liveChecks.Load(), s.kills.Load(), s.adopted.Load(),
		s.races.Load(), s.raced.Load(), s.createRaces.Load(), s.posts.Load(), s.refusedPosts.Load(), s.notHome.Load(), s.liveCalls.Load(), s.refusedCalls.Load(), s.stalePosts.Load())
	for name, n := range map[string]int64{
		"revokes": s.revokes.Load(), "revokes under a fault": s.faultRevokes.Load(),
		"refusals of revoked tokens": s.revokedChecks.Load(), "live tokens authenticated": s.liveChecks.Load(),
		"kills": s.kills.Load(), "adopted threads": s.adopted.Load(), "create races": s.createRaces.Load(), "revoke races": s.races.Load(),
		"posts": s.posts.Load(), "refused posts": s.refusedPosts.Load(), "NotHome answers": s.notHome.Load(),
		"HTTP reads answered": s.liveCalls.Load(), "HTTP reads refused": s.refusedCalls.Load(),
		"OAuth sign-ins": o.signIns.Load(), "sign-ins over three nodes": o.spreadSignIns.Load(),
		"OAuth refreshes": o.refreshes.Load(), "refreshes through another node": o.awayRefreshes.Load(),
		"refresh reuses": o.reuses.Load(), "code replays": o.replays.Load(), "refresh races": o.races.Load(),
		"spent pairing codes refused": o.pairingReuses.Load(), "live grant tokens authenticated": o.liveTokens.Load(),
		"revoked grant tokens refused": o.revokedTokens.Load(), "calls with grant tokens": o.calls.Load(),
	} {
		if n == 0 {
			t.Errorf("the machine never saw %s: it is vacuous there", name)
		}
	}
}

// mCred is the model of one provider credential.
type mCred struct {
	id, tok          string
	thread, instance string
	// bound is the minting node's applied revision once the mint
	// returned: every node whose replica applied it has the credential.
	bound   int64
	revoked bool // a revoke of it returned (or the adoption of its thread settled)
}

// mPair is the model of a (thread, instance) pair: its open provider
// session on the thread's home and the live credential that session holds.
type mPair struct {
	session string
	cred    *mCred
}

// mThread is the model of one thread.
type mThread struct {
	id, home string
	archived bool
	instance string // current instance, "" none yet
	run      string // the active run's instance, "" none
	msgs     []string
	pairs    map[string]*mPair // instance → its open session; absent: none
}

// Node faults.
const (
	healthy = iota
	paused
	stalled
	killed
)

type clusterMachine struct {
	nodes    []*machineNode
	client   *http.Client // for the MCP endpoints
	fault    []int
	pausedAt []time.Time
	victim   atomic.Int64 // the killed node's index, -1: none (read by the cleanup)

	threads map[string]*mThread
	creds   []*mCred
	grants  []*mGrant // OAuth grants (runtime_oauth_prop_test.go)
	// oauthClient is the OAuth client the sign-ins are of; "" until the
	// first.
	oauthClient string
	lastWrite   int64 // a revision at or after every write the model knows of
	next        int   // id counter, so that shrinking keeps ids stable
}

func newClusterMachine(t *rapid.T, endpoint string) *clusterMachine {
	m := &clusterMachine{threads: map[string]*mThread{}}
	m.victim.Store(-1)
	m.nodes = startMachineNodes(t, endpoint, 3, machineFence, func() int { return int(m.victim.Load()) })
	m.client = &http.Client{Transport: &http.Transport{}}
	t.Cleanup(m.client.CloseIdleConnections)
	m.fault = make([]int, len(m.nodes))
	m.pausedAt = make([]time.Time, len(m.nodes))
	return m
}

// actions are the machine's actions. Those that build up what the others
// need (sessions, runs, live callers) and the races appear more than once,
// so that they are drawn more often.
func (m *clusterMachine) actions() map[string]func(*rapid.T) {
	return map[string]func(*rapid.T){
		"create":       m.create,
		"open#2":       m.open,
		"open#3":       m.open,
		"turn#3":       m.turn,
		"revokeRace#2": m.revokeRace,
		"revokeRace#3": m.revokeRace,
		"startRun#2":   m.startRun,
		"post#2":       m.post,
		"kill#2":       m.kill,
		"kill#3":       m.kill,
		"turn":         m.turn,
		"turn#2":       m.turn,
		"burst":        m.burst,
		"burst#2":      m.burst,
		"createRace":   m.createRace,
		"open":         m.open,
		"startRun":     m.startRun,
		"endRun":       m.endRun,
		"switch":       m.switchProvider,
		"post":         m.post,
		"release":      m.release,
		"rotate":       m.rotate,
		"archive":      m.archive,
		"delete":       m.delete,
		"authenticate": m.authenticate,
		"call":         m.call,
		"call#2":       m.call,
		"call#3":       m.call,
		"revokeRace":   m.revokeRace,
		"pause":        m.pause,
		"stall":        m.stall,
		"resume":       m.resume,
		"kill":         m.kill,
		"signIn":       m.signIn,
		"signIn#2":     m.signIn,
		"refresh":      m.refresh,
		"refresh#2":    m.refresh,
		"reuse":        m.reuse,
		"replay":       m.replay,
		"refreshRace":  m.refreshRace,
		"oauthCall":    m.oauthCall,
		"oauthCall#2":  m.oauthCall,
		"":             m.check,
	}
}

func (m *clusterMachine) id() string {
	m.next++
	return fmt.Sprintf("t%d", m.next)
}

// bounded resumes a node paused for longer than maxPause (a bounded
// fault; the kill action is the unbounded one). Every action calls it.
func (m *clusterMachine) bounded() {
	for i, f := range m.fault {
		if f == paused && time.Since(m.pausedAt[i]) > maxPause {
			m.nodes[i].rep.Resume()
			m.fault[i] = healthy
		}
	}
}

func (m *clusterMachine) indices(ok func(i int) bool) []int {
	var out []int
	for i := range m.nodes {
		if ok(i) {
			out = append(out, i)
		}
	}
	return out
}

// healthyNode draws a node with no fault: a writer (a paused or stalled
// writer would wait for its own replica until the commit bound).
func (m *clusterMachine) healthyNode(t *rapid.T, label string) *machineNode {
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy })
	return m.nodes[rapid.SampledFrom(ok).Draw(t, label)]
}

// aliveNode draws a node that was not killed.
func (m *clusterMachine) aliveNode(t *rapid.T, label string) *machineNode {
	ok := m.indices(func(i int) bool { return m.fault[i] != killed })
	return m.nodes[rapid.SampledFrom(ok).Draw(t, label)]
}

func (m *clusterMachine) node(id string) (int, *machineNode) {
	for i, n := range m.nodes {
		if n.id == id {
			return i, n
		}
	}
	panic("no node " + id)
}

// wrote notes that a write through n returned: n's replica has it.
func (m *clusterMachine) wrote(n *machineNode) { m.lastWrite = max(m.lastWrite, n.rep.Applied()) }

func (m *clusterMachine) faulted() bool {
	return slices.ContainsFunc(m.fault, func(f int) bool { return f == paused || f == stalled })
}

// revoked notes that a revoking call returned.
func (m *clusterMachine) revoked() {
	machineStats.revokes.Add(1)
	if m.faulted() {
		machineStats.faultRevokes.Add(1)
	}
}

// some reports whether a thread with a healthy home satisfies ok.
func (m *clusterMachine) some(ok func(*mThread) bool) bool {
	for _, th := range m.threads {
		if i, _ := m.node(th.home); m.fault[i] == healthy && ok(th) {
			return true
		}
	}
	return false
}

// thread draws a model thread whose home has no fault (its operations run
// there), with a predicate.
func (m *clusterMachine) thread(t *rapid.T, ok func(*mThread) bool) *mThread {
	var ids []string
	for id, th := range m.threads {
		if i, _ := m.node(th.home); m.fault[i] == healthy && (ok == nil || ok(th)) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		t.Skip("no such thread on a healthy home")
	}
	slices.Sort(ids)
	return m.threads[rapid.SampledFrom(ids).Draw(t, "thread")]
}

// probeNotHome calls a thread method of th on a random other node that
// is not killed and whose replica has every known write: it must be a
// *NotHomeError naming th's home.
func (m *clusterMachine) probeNotHome(t *rapid.T, th *mThread, call func(rt *mcpruntime.Runtime) error) {
	ok := m.indices(func(i int) bool {
		return m.fault[i] != killed && m.nodes[i].id != th.home && m.nodes[i].rep.Applied() >= m.lastWrite
	})
	if len(ok) == 0 {
		return
	}
	n := m.nodes[rapid.SampledFrom(ok).Draw(t, "other")]
	if err := notHomeOf(call(n.rt), th.id, th.home); err != nil {
		t.Fatalf("on %s: %v", n.id, err)
	}
	machineStats.notHome.Add(1)
}

func (m *clusterMachine) create(t *rapid.T) { m.newThread(t) }

// newThread creates a thread on a drawn healthy node, which becomes its home.
func (m *clusterMachine) newThread(t *rapid.T) *mThread {
	m.bounded()
	n := m.healthyNode(t, "node")
	id := m.id()
	got, err := n.rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{})
	if err != nil {
		t.Fatalf("CreateThread(%s) on %s: %v", id, n.id, err)
	}
	if got.Home != n.id {
		t.Fatalf("CreateThread(%s) on %s: home %q, want the creator", id, n.id, got.Home)
	}
	m.wrote(n)
	th := &mThread{id: id, home: n.id, pairs: map[string]*mPair{}}
	m.threads[id] = th
	return th
}

// createRace creates one new id on two nodes at once: exactly one wins and
// becomes its home; the other gets ErrThreadExists.
func (m *clusterMachine) createRace(t *rapid.T) {
	m.bounded()
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy })
	if len(ok) < 2 {
		t.Skip("two healthy nodes needed")
	}
	i := rapid.SampledFrom(ok).Draw(t, "first")
	j := rapid.SampledFrom(slices.DeleteFunc(slices.Clone(ok), func(k int) bool { return k == i })).Draw(t, "second")
	id := m.id()
	var errs [2]error
	var wg sync.WaitGroup
	for k, idx := range []int{i, j} {
		wg.Go(func() {
			_, errs[k] = m.nodes[idx].rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{})
		})
	}
	wg.Wait()
	machineStats.createRaces.Add(1)
	var winner *machineNode
	for k, idx := range []int{i, j} {
		switch {
		case errs[k] == nil && winner == nil:
			winner = m.nodes[idx]
		case errors.Is(errs[k], mcpruntime.ErrThreadExists):
		default:
			t.Fatalf("CreateThread(%s) racing on %s and %s: %v and %v; want one nil, one ErrThreadExists",
				id, m.nodes[i].id, m.nodes[j].id, errs[0], errs[1])
		}
	}
	if winner == nil {
		t.Fatalf("CreateThread(%s) racing on %s and %s: both ErrThreadExists", id, m.nodes[i].id, m.nodes[j].id)
	}
	m.wrote(m.nodes[i])
	m.wrote(m.nodes[j])
	m.wrote(winner)
	m.threads[id] = &mThread{id: id, home: winner.id, pairs: map[string]*mPair{}}
}

func (m *clusterMachine) instance(t *rapid.T) string {
	return rapid.SampledFrom(machineInstances).Draw(t, "instance")
}

// home is th's home node.
func (m *clusterMachine) home(th *mThread) *machineNode {
	_, n := m.node(th.home)
	return n
}

func (m *clusterMachine) open(t *rapid.T) {
	m.bounded()
	m.openOn(t, m.thread(t, nil), m.instance(t))
}

// openOn opens a provider session of (th, inst) on th's home, after
// checking that another node refuses it as th's home's.
func (m *clusterMachine) openOn(t *rapid.T, th *mThread, inst string) {
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error {
		_, err := rt.OpenProviderSession(ctx, th.id, inst)
		return err
	})
	h := m.home(th)
	ps, err := h.rt.OpenProviderSession(ctx, th.id, inst)
	m.wrote(h)
	pair := th.pairs[inst]
	switch {
	case th.archived:
		if !errors.Is(err, mcpruntime.ErrArchivedThread) {
			t.Fatalf("OpenProviderSession(%s, %s) of an archived thread = %v, want ErrArchivedThread", th.id, inst, err)
		}
		return
	case err != nil:
		t.Fatalf("OpenProviderSession(%s, %s) on %s: %v", th.id, inst, h.id, err)
	case pair != nil:
		if !ps.Reused || ps.ID != pair.session || ps.Authorization != "" || ps.CredentialID != pair.cred.id {
			t.Fatalf("OpenProviderSession(%s, %s) = %+v, want the open session %s reused, credential %s, no token",
				th.id, inst, ps, pair.session, pair.cred.id)
		}
		return
	}
	tok, ok := strings.CutPrefix(ps.Authorization, "Bearer ")
	if ps.Reused || !ok {
		t.Fatalf("OpenProviderSession(%s, %s) = %+v, want a new session and a minted token", th.id, inst, ps)
	}
	c := &mCred{id: ps.CredentialID, tok: tok, thread: th.id, instance: inst, bound: h.rep.Applied()}
	m.creds = append(m.creds, c)
	th.pairs[inst] = &mPair{session: ps.ID, cred: c}
	if th.instance == "" {
		th.instance = inst
	}
}

func (m *clusterMachine) startRun(t *rapid.T) {
	m.bounded()
	th := m.thread(t, nil)
	inst := m.instance(t)
	if th.instance != "" && rapid.Bool().Draw(t, "current") {
		inst = th.instance // mostly a run that can start
	}
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { _, err := rt.StartRun(ctx, th.id, inst); return err })
	h := m.home(th)
	_, err := h.rt.StartRun(ctx, th.id, inst)
	m.wrote(h)
	var want error
	switch {
	case th.archived:
		want = mcpruntime.ErrArchivedThread
	case th.instance != inst:
		want = mcpruntime.ErrNotCurrentInstance
	case th.run != "":
		want = mcpruntime.ErrRunActive
	}
	if !errors.Is(err, want) || (want == nil && err != nil) {
		t.Fatalf("StartRun(%s, %s) on %s = %v, want %v", th.id, inst, h.id, err, want)
	}
	if want == nil {
		th.run = inst
	}
}

func (m *clusterMachine) endRun(t *rapid.T) {
	m.bounded()
	th := m.thread(t, nil)
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { return rt.EndRun(ctx, th.id, "") })
	h := m.home(th)
	err := h.rt.EndRun(ctx, th.id, "")
	m.wrote(h)
	var want error
	switch {
	case th.archived:
		want = mcpruntime.ErrArchivedThread
	case th.run == "":
		want = mcpruntime.ErrNoRun
	}
	if !errors.Is(err, want) || (want == nil && err != nil) {
		t.Fatalf("EndRun(%s) on %s = %v, want %v", th.id, h.id, err, want)
	}
	if want == nil {
		th.run = ""
	}
}

// switchProvider switches; no credential changes (SPEC §3.2): the check
// after it holds the previous instance's token live everywhere.
func (m *clusterMachine) switchProvider(t *rapid.T) {
	m.bounded()
	th := m.thread(t, nil)
	inst := m.instance(t)
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { _, err := rt.SwitchProvider(ctx, th.id, inst); return err })
	h := m.home(th)
	res, err := h.rt.SwitchProvider(ctx, th.id, inst)
	m.wrote(h)
	if th.archived {
		if !errors.Is(err, mcpruntime.ErrArchivedThread) {
			t.Fatalf("SwitchProvider(%s, %s) of an archived thread = %v, want ErrArchivedThread", th.id, inst, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("SwitchProvider(%s, %s) on %s: %v", th.id, inst, h.id, err)
	}
	ends := th.run != "" && th.run != inst
	if res.Previous != th.instance || (res.EndedRun != "") != ends {
		t.Fatalf("SwitchProvider(%s, %s) = %+v, want previous %q, a run ended: %v", th.id, inst, res, th.instance, ends)
	}
	th.instance = inst
	if ends {
		th.run = ""
	}
}

// post authenticates a credential's token on a random node and posts with
// the principal to a thread, on that thread's home: it succeeds exactly
// when the model says the caller is live (SPEC §4.1) and the target
// active.
func (m *clusterMachine) post(t *rapid.T) {
	m.bounded()
	if len(m.creds) == 0 {
		t.Skip("no credential")
	}
	c := m.credential(t)
	target := m.thread(t, nil)
	if th := m.threads[c.thread]; th != nil && rapid.Bool().Draw(t, "own thread") {
		if i, _ := m.node(th.home); m.fault[i] == healthy {
			target = th // mostly a post that can succeed
		}
	}
	n := m.healthyNode(t, "authenticator")
	p, err := m.authenticateOn(t, n, c)
	if err != nil {
		return // refused, as the model said (authenticateOn checked)
	}
	h := m.home(target)
	text := fmt.Sprintf("m%d", m.next)
	m.next++
	ctx := context.Background()
	m.probeNotHome(t, target, func(rt *mcpruntime.Runtime) error { _, err := rt.Post(ctx, p, target.id, text); return err })
	msg, err := h.rt.Post(ctx, p, target.id, text)
	caller := m.threads[c.thread]
	if stale(err) {
		// The target's home checks the caller against its replica's copy
		// of rows another node writes (the caller's thread), which may be
		// behind; the runtime then tries the mutation again on the fresh
		// replica (actors/thread writeFresh), so a stale read never
		// reaches the caller. Found by this machine as an ErrInternal.
		machineStats.stalePosts.Add(1)
		t.Fatalf("Post(%s) with a caller of %s answered a stale read: %v", target.id, c.thread, err)
	}
	m.wrote(h)
	var want error
	switch {
	case target.archived:
		want = mcpruntime.ErrArchivedThread
	case c.revoked || caller == nil || caller.archived || caller.run != c.instance:
		want = mcpruntime.ErrNotLive
	}
	if !errors.Is(err, want) || (want == nil && err != nil) {
		t.Fatalf("Post(%s as %s) on %s = %v, want %v", target.id, c.id, h.id, err, want)
	}
	if want != nil {
		machineStats.refusedPosts.Add(1)
		return
	}
	if msg.Text != text || msg.Author != p.Namespace {
		t.Fatalf("Post(%s) = %+v, want text %q by %s", target.id, msg, text, p.Namespace)
	}
	machineStats.posts.Add(1)
	target.msgs = append(target.msgs, text)
}

// turn is a provider's turn: a pair with an open session becomes the
// thread's current instance (a switch if needed), its run starts if none
// is active, and it posts with the principal its token authenticates to
// on a random node — the story the host tells, through several nodes.
func (m *clusterMachine) turn(t *rapid.T) {
	m.bounded()
	th, inst, pair := m.pairOf(t)
	if th.archived {
		t.Skip("archived")
	}
	ctx := context.Background()
	h := m.home(th)
	if th.instance != inst {
		if _, err := h.rt.SwitchProvider(ctx, th.id, inst); err != nil {
			t.Fatalf("SwitchProvider(%s, %s) on %s: %v", th.id, inst, h.id, err)
		}
		th.instance, th.run = inst, ""
	}
	if th.run == "" {
		if _, err := h.rt.StartRun(ctx, th.id, inst); err != nil {
			t.Fatalf("StartRun(%s, %s) on %s: %v", th.id, inst, h.id, err)
		}
		th.run = inst
	}
	m.wrote(h)
	p, _ := m.authenticateOn(t, m.healthyNode(t, "authenticator"), pair.cred)
	text := fmt.Sprintf("m%d", m.next)
	m.next++
	msg, err := h.rt.Post(ctx, p, th.id, text)
	if err != nil || msg.Text != text {
		t.Fatalf("Post(%s) as the run's own caller %s on %s = %+v, %v", th.id, pair.cred.id, h.id, msg, err)
	}
	m.wrote(h)
	machineStats.posts.Add(1)
	th.msgs = append(th.msgs, text)
}

// burst is a turn whose agent posts several messages at once (and the host
// touches the thread meanwhile): the home's thread actor commits each write
// off its Receive, holding the others until it answered (SPEC §5d.7), so
// every post is applied once, each at the sequence number it was told, in
// that order — which the check then reads back on every node.
func (m *clusterMachine) burst(t *rapid.T) {
	m.bounded()
	th, inst, pair := m.pairOf(t)
	if th.archived {
		t.Skip("archived")
	}
	ctx := context.Background()
	h := m.home(th)
	if th.instance != inst {
		if _, err := h.rt.SwitchProvider(ctx, th.id, inst); err != nil {
			t.Fatalf("SwitchProvider(%s, %s) on %s: %v", th.id, inst, h.id, err)
		}
		th.instance, th.run = inst, ""
	}
	if th.run == "" {
		if _, err := h.rt.StartRun(ctx, th.id, inst); err != nil {
			t.Fatalf("StartRun(%s, %s) on %s: %v", th.id, inst, h.id, err)
		}
		th.run = inst
	}
	m.wrote(h)
	p, _ := m.authenticateOn(t, m.healthyNode(t, "authenticator"), pair.cred)
	k := rapid.IntRange(2, 6).Draw(t, "posts")
	texts := make([]string, k)
	for i := range texts {
		texts[i] = fmt.Sprintf("m%d", m.next)
		m.next++
	}
	type posted struct {
		seq uint64
		err error
	}
	got := make([]posted, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() {
			msg, err := h.rt.Post(ctx, p, th.id, texts[i])
			got[i] = posted{seq: msg.Seq, err: err}
			if err == nil && msg.Text != texts[i] {
				got[i].err = fmt.Errorf("answered %+v for %q", msg, texts[i])
			}
		})
	}
	wg.Go(func() {
		if err := h.rt.Touch(ctx, th.id); err != nil {
			t.Errorf("Touch(%s) during the burst on %s: %v", th.id, h.id, err)
		}
	})
	wg.Wait()
	m.wrote(h)
	order := make([]int, k)
	for i, g := range got {
		if g.err != nil {
			t.Fatalf("Post(%s) #%d of a burst as the run's own caller %s on %s: %v", th.id, i, pair.cred.id, h.id, g.err)
		}
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(got[a].seq, got[b].seq) })
	for j := 1; j < k; j++ {
		if got[order[j]].seq != got[order[j-1]].seq+1 {
			t.Fatalf("a burst of %d posts to %s was told sequence numbers %v: want them distinct and consecutive", k, th.id, got)
		}
	}
	for _, i := range order {
		th.msgs = append(th.msgs, texts[i])
	}
	machineStats.posts.Add(int64(k))
}

// stale reports whether err is a write refused because a row it read had
// changed in etcd (memdb.ErrStale), as the runtime's API returns it: an
// ErrInternal with the store's message.
func stale(err error) bool {
	return errors.Is(err, mcpruntime.ErrInternal) && strings.Contains(err.Error(), memdb.ErrStale.Error())
}

// authenticateOn authenticates c's token on n, waiting (bounded) while n
// does not serve: a healthy node serves again once its fence proves its
// replica current. It checks the answer against the model.
func (m *clusterMachine) authenticateOn(t *rapid.T, n *machineNode, c *mCred) (mcpruntime.Principal, error) {
	var (
		p   mcpruntime.Principal
		err error
	)
	waitFor(t, n.id+" to answer Authenticate", func() bool {
		p, err = n.rt.Authenticate(c.tok)
		return !errors.Is(err, mcpruntime.ErrNodeUnavailable)
	})
	if c.revoked {
		if !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Fatalf("Authenticate(%s) on %s = %+v, %v; its revoke returned: want ErrUnauthenticated", c.id, n.id, p, err)
		}
		machineStats.revokedChecks.Add(1)
		return p, err
	}
	// A mint waits for every serving node (SPEC §5d.3): a serving node
	// authenticates a token as soon as its mint returned.
	if err != nil || p.CredentialID != c.id || p.Thread != c.thread || p.Instance != c.instance {
		t.Fatalf("Authenticate(%s) on %s = %+v, %v; want the live credential of (%s, %s)", c.id, n.id, p, err, c.thread, c.instance)
	}
	machineStats.liveChecks.Add(1)
	return p, nil
}

// credential draws a credential, live or not; a live one as often as not.
func (m *clusterMachine) credential(t *rapid.T) *mCred {
	var live []*mCred
	for _, c := range m.creds {
		if !c.revoked {
			live = append(live, c)
		}
	}
	if len(live) > 0 && rapid.Bool().Draw(t, "live") {
		return rapid.SampledFrom(live).Draw(t, "credential")
	}
	return rapid.SampledFrom(m.creds).Draw(t, "credential")
}

func (m *clusterMachine) authenticate(t *rapid.T) {
	m.bounded()
	if len(m.creds) == 0 {
		t.Skip("no credential")
	}
	c := m.credential(t)
	_, _ = m.authenticateOn(t, m.healthyNode(t, "node"), c)
}

// call reads the caller's own thread over HTTP (a 2026-07-28 tools/call
// of thread_read) through a random node, killed ones included, which
// forwards it to the thread's home if it is not (SPEC §5d.6). A token
// whose revoke returned is refused — 401, or 503 on a node that does not
// serve — and never dispatched (SPEC §6.1). A live one is answered 200
// with a result; 503 is allowed only where the node or the home has a
// fault, and on healthy ones only until they serve again (bounded).
func (m *clusterMachine) call(t *rapid.T) {
	m.bounded()
	if len(m.creds) == 0 {
		t.Skip("no credential")
	}
	c := m.credential(t)
	i := rapid.IntRange(0, len(m.nodes)-1).Draw(t, "node")
	n := m.nodes[i]
	m.next++
	// The read asks for every write the model knows of (the revision an
	// answer tells a client, echoed): whichever node answers it, it reads
	// them all (SPEC §5d.6).
	status, ok, msgs, err := readOwnThread(m.client, n, c.tok, int64(m.next), m.lastWrite)
	if err != nil {
		t.Fatalf("tools/call on %s: %v", n.id, err)
	}
	if c.revoked {
		switch status {
		case http.StatusUnauthorized:
			machineStats.refusedCalls.Add(1)
		case http.StatusServiceUnavailable:
		default:
			t.Fatalf("tools/call on %s with %s, whose revoke returned: %d, want 401 (or 503)", n.id, c.id, status)
		}
		return
	}
	home, _ := m.node(m.threads[c.thread].home)
	if m.fault[i] != healthy || m.fault[home] != healthy {
		if (status != http.StatusOK || !ok) && status != http.StatusServiceUnavailable {
			t.Fatalf("tools/call on %s (home %s) with the live %s: %d (result %v), want 200 or 503", n.id, m.nodes[home].id, c.id, status, ok)
		}
		if th := m.threads[c.thread]; status == http.StatusOK && !slices.Equal(msgs, th.msgs) {
			t.Fatalf("thread_read of %s on %s (home %s, faults %v) asking for revision %d read messages %q, want %q", th.id, n.id, m.nodes[home].id, m.fault, m.lastWrite, msgs, th.msgs)
		}
		return
	}
	waitFor(t, n.id+" and the home serving a live token's read", func() bool {
		if status == http.StatusServiceUnavailable {
			m.next++
			status, ok, msgs, err = readOwnThread(m.client, n, c.tok, int64(m.next), m.lastWrite)
		}
		return err != nil || status != http.StatusServiceUnavailable
	})
	if err != nil || status != http.StatusOK || !ok {
		t.Fatalf("tools/call on %s (home %s) with the live %s: %d (result %v), %v; want 200 with a result", n.id, m.nodes[home].id, c.id, status, ok, err)
	}
	if th := m.threads[c.thread]; !slices.Equal(msgs, th.msgs) {
		t.Fatalf("thread_read of %s on %s (home %s) asking for revision %d read messages %q, want %q", th.id, n.id, m.nodes[home].id, m.lastWrite, msgs, th.msgs)
	}
	machineStats.liveCalls.Add(1)
}

// pairOf draws a pair with an open session on a thread with a healthy
// home; when there is none, it opens one on an active thread first.
func (m *clusterMachine) pairOf(t *rapid.T) (*mThread, string, *mPair) {
	var th *mThread
	if m.some(func(th *mThread) bool { return len(th.pairs) > 0 }) {
		th = m.thread(t, func(th *mThread) bool { return len(th.pairs) > 0 })
	} else {
		th = m.thread(t, func(th *mThread) bool { return !th.archived })
		m.openOn(t, th, m.instance(t))
	}
	var insts []string
	for inst := range th.pairs {
		insts = append(insts, inst)
	}
	slices.Sort(insts)
	inst := rapid.SampledFrom(insts).Draw(t, "pair")
	return th, inst, th.pairs[inst]
}

// release releases a provider session: its credential's revoke has
// returned when the call has, so the check that follows holds it refused
// on every serving node at once (SPEC §3.3, §5d.3). Another node does not
// know the session (provider sessions are the home's own).
func (m *clusterMachine) release(t *rapid.T) {
	m.bounded()
	th, inst, pair := m.pairOf(t)
	ctx := context.Background()
	for _, n := range m.nodes {
		if n.id != th.home && m.fault[m.index(n)] != killed {
			if err := n.rt.ReleaseProviderSession(ctx, pair.session); !errors.Is(err, mcpruntime.ErrUnknownProviderSession) {
				t.Fatalf("ReleaseProviderSession(%s) on %s, not its home = %v, want ErrUnknownProviderSession", pair.session, n.id, err)
			}
		}
	}
	h := m.home(th)
	if err := h.rt.ReleaseProviderSession(ctx, pair.session); err != nil {
		t.Fatalf("ReleaseProviderSession(%s) of (%s, %s) on %s: %v", pair.session, th.id, inst, h.id, err)
	}
	m.wrote(h)
	pair.cred.revoked = true
	delete(th.pairs, inst)
	m.revoked()
}

func (m *clusterMachine) index(n *machineNode) int {
	i, _ := m.node(n.id)
	return i
}

// rotate rotates a pair with an open session: the old token's revoke has
// returned, the new one is live everywhere its mint was applied.
func (m *clusterMachine) rotate(t *rapid.T) {
	m.bounded()
	th, inst, pair := m.pairOf(t)
	if th.archived {
		t.Skip("archived") // the pair's session was detached by the archive
	}
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { _, err := rt.Rotate(ctx, th.id, inst); return err })
	h := m.home(th)
	cr, err := h.rt.Rotate(ctx, th.id, inst)
	if err != nil {
		t.Fatalf("Rotate(%s, %s) on %s: %v", th.id, inst, h.id, err)
	}
	m.wrote(h)
	tok, ok := strings.CutPrefix(cr.Authorization, "Bearer ")
	if !ok || cr.ID == pair.cred.id {
		t.Fatalf("Rotate(%s, %s) = %+v, want a new credential and its token", th.id, inst, cr)
	}
	pair.cred.revoked = true
	c := &mCred{id: cr.ID, tok: tok, thread: th.id, instance: inst, bound: h.rep.Applied()}
	m.creds = append(m.creds, c)
	pair.cred = c
	m.revoked()
}

// revokeThread marks every credential of th revoked (archive, delete, the
// adoption of a node's threads).
func (m *clusterMachine) revokeThread(th *mThread) {
	for _, c := range m.creds {
		if c.thread == th.id {
			c.revoked = true
		}
	}
	th.pairs = map[string]*mPair{} // detached (archive, delete) or gone with their node (adoption)
	th.run = ""
}

func (m *clusterMachine) archive(t *rapid.T) {
	m.bounded()
	th := m.thread(t, nil)
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { return rt.Archive(ctx, th.id) })
	h := m.home(th)
	if err := h.rt.Archive(ctx, th.id); err != nil {
		t.Fatalf("Archive(%s) on %s: %v", th.id, h.id, err)
	}
	m.wrote(h)
	th.archived = true
	m.revokeThread(th)
	m.revoked()
}

func (m *clusterMachine) delete(t *rapid.T) {
	m.bounded()
	th := m.thread(t, nil)
	ctx := context.Background()
	m.probeNotHome(t, th, func(rt *mcpruntime.Runtime) error { return rt.DeleteThread(ctx, th.id) })
	h := m.home(th)
	if err := h.rt.DeleteThread(ctx, th.id); err != nil {
		t.Fatalf("DeleteThread(%s) on %s: %v", th.id, h.id, err)
	}
	m.wrote(h)
	m.revokeThread(th)
	delete(m.threads, th.id)
	m.revoked()
}

// revokeRace releases a session on its home while another node
// authenticates its token in a loop: the token may pass until the release
// returns, but once it failed it never passes again on that node, and once
// the release returned it fails there at once.
func (m *clusterMachine) revokeRace(t *rapid.T) {
	m.bounded()
	th, inst, pair := m.pairOf(t)
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy && m.nodes[i].id != th.home })
	if len(ok) == 0 {
		t.Skip("no other healthy node")
	}
	other := m.nodes[rapid.SampledFrom(ok).Draw(t, "authenticator")]
	h := m.home(th)
	before, beforeErr := m.authenticateOn(t, other, pair.cred)
	done := make(chan error, 1)
	go func() { done <- h.rt.ReleaseProviderSession(context.Background(), pair.session) }()
	var passed, failed, flipped bool
	var releaseErr error
loop:
	for {
		select {
		case releaseErr = <-done:
			break loop
		default:
		}
		_, err := other.rt.Authenticate(pair.cred.tok)
		switch {
		case err == nil:
			if failed {
				flipped = true
			}
			passed = true
		case errors.Is(err, mcpruntime.ErrUnauthenticated):
			failed = true
		}
	}
	if releaseErr != nil {
		t.Fatalf("ReleaseProviderSession(%s) of (%s, %s) on %s: %v", pair.session, th.id, inst, h.id, releaseErr)
	}
	if flipped {
		t.Fatalf("%s authenticated %s again after refusing it, while its release ran", other.id, pair.cred.id)
	}
	if p, err := other.rt.Authenticate(pair.cred.tok); err == nil {
		t.Fatalf("%s authenticates %s (%+v) right after its release returned", other.id, pair.cred.id, p)
	}
	if passed || failed {
		machineStats.races.Add(1)
	}
	if passed && failed {
		machineStats.raced.Add(1)
	}
	if beforeErr == nil {
		// A principal resolved before the revoke is dead after it: the
		// mutation's own check refuses it (SPEC §4.4).
		_, err := h.rt.Post(context.Background(), before, th.id, "after release")
		want := mcpruntime.ErrNotLive
		if th.archived {
			want = mcpruntime.ErrArchivedThread
		}
		if !errors.Is(err, want) {
			t.Fatalf("Post(%s) with the principal of %s after its release returned = %v, want %v", th.id, pair.cred.id, err, want)
		}
		machineStats.refusedPosts.Add(1)
	}
	m.wrote(h)
	pair.cred.revoked = true
	delete(th.pairs, inst)
	m.revoked()
}

// faultable draws a healthy node to fault, keeping one healthy node.
func (m *clusterMachine) faultable(t *rapid.T) int {
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy })
	if len(ok) < 2 {
		t.Skip("keep one healthy node")
	}
	return rapid.SampledFrom(ok).Draw(t, "node")
}

func (m *clusterMachine) pause(t *rapid.T) {
	m.bounded()
	i := m.faultable(t)
	m.nodes[i].rep.Pause()
	m.fault[i], m.pausedAt[i] = paused, time.Now()
}

func (m *clusterMachine) stall(t *rapid.T) {
	m.bounded()
	i := m.faultable(t)
	m.nodes[i].rep.StallApplier()
	m.fault[i] = stalled
}

// resume resumes a paused or stalled node and waits until it serves again
// (eventual: its fence must prove its replica current first).
func (m *clusterMachine) resume(t *rapid.T) {
	m.bounded()
	ok := m.indices(func(i int) bool { return m.fault[i] == paused || m.fault[i] == stalled })
	if len(ok) == 0 {
		t.Skip("none paused or stalled")
	}
	i := rapid.SampledFrom(ok).Draw(t, "node")
	m.nodes[i].rep.Resume()
	m.fault[i] = healthy
	waitFor(t, m.nodes[i].id+" serving again after resume", m.nodes[i].rep.Serving)
}

// kill pauses a node for good (at most once per check: it costs a lease
// TTL), waits until the survivors no longer list it, then until its
// threads are adopted, each by one survivor that all survivors name, with
// an actor there; their credentials are then revoked (node_lost).
func (m *clusterMachine) kill(t *rapid.T) {
	m.bounded()
	if m.victim.Load() >= 0 {
		t.Skip("killed once already")
	}
	if m.liveCreds() == 0 {
		t.Skip("kill once there are live credentials to revoke")
	}
	alive := m.indices(func(i int) bool { return m.fault[i] != killed })
	homes := m.indices(func(i int) bool { return m.homed(m.nodes[i].id) > 0 })
	if len(homes) == 0 {
		t.Skip("no node is home of a thread")
	}
	v := rapid.SampledFrom(homes).Draw(t, "victim")
	// The wait below is longer than a pause may last: resume the others.
	for _, i := range alive {
		if i != v && m.fault[i] != healthy {
			m.nodes[i].rep.Resume()
			m.fault[i] = healthy
		}
	}
	// Every survivor homes a thread, so that an adoption that took a live
	// member's threads too would show.
	for _, i := range alive {
		if n := m.nodes[i]; i != v && m.homed(n.id) == 0 {
			id := m.id()
			if _, err := n.rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{}); err != nil {
				t.Fatalf("CreateThread(%s) on %s: %v", id, n.id, err)
			}
			m.wrote(n)
			m.threads[id] = &mThread{id: id, home: n.id, pairs: map[string]*mPair{}}
		}
	}
	victim := m.nodes[v]
	victim.rep.Pause()
	m.fault[v] = killed
	m.victim.Store(int64(v))
	survivors := m.indices(func(i int) bool { return i != v })
	// settle waits (bounded) until pending returns "": what the cluster
	// still lacks, reported if it never comes.
	deadline := time.Now().Add(15 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	settle := func(what string, pending func() string) {
		for p := pending(); p != ""; p = pending() {
			if time.Now().After(deadline) {
				t.Fatalf("after killing %s: %s: not within 15 s: %s", victim.id, what, p)
			}
			<-tick.C
		}
	}
	settle("the survivors no longer list it", func() string {
		for _, i := range survivors {
			if ms := m.nodes[i].rt.Node().Members; slices.Contains(ms, victim.id) {
				return fmt.Sprintf("%s lists %v", m.nodes[i].id, ms)
			}
		}
		return ""
	})
	if victim.rt.Node().Serving {
		t.Fatalf("%s serves though the survivors no longer list it (its lease lapsed)", victim.id)
	}
	var orphans []*mThread
	for _, th := range m.threads {
		if th.home == victim.id {
			orphans = append(orphans, th)
		}
	}
	settle("its threads adopted, each named by every survivor", func() string {
		for _, th := range orphans {
			home := ""
			for _, i := range survivors {
				got, err := m.nodes[i].rt.Thread(context.Background(), th.id)
				if err != nil || got.Home == victim.id || (home != "" && got.Home != home) {
					return fmt.Sprintf("%s on %s: home %q, %v (another survivor: %q)", th.id, m.nodes[i].id, got.Home, err, home)
				}
				home = got.Home
			}
		}
		return ""
	})
	for _, th := range orphans {
		got, err := m.nodes[survivors[0]].rt.Thread(context.Background(), th.id)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(survivors, func(i int) bool { return m.nodes[i].id == got.Home }) {
			t.Fatalf("%s adopted by %q, not a survivor", th.id, got.Home)
		}
		th.home = got.Home
		m.revokeThread(th)
	}
	// An adopter starts the thread's actor once its adoption's write
	// returned: each survivor then holds exactly its own threads' actors.
	settle("the adopters' actors running", func() string {
		for _, i := range survivors {
			if got, want := m.nodes[i].rt.Stats().Threads, m.homed(m.nodes[i].id); got != want {
				return fmt.Sprintf("%s holds %d thread actors, home of %d", m.nodes[i].id, got, want)
			}
		}
		return ""
	})
	m.adoptGrants(t, victim.id, survivors, deadline)
	for _, i := range survivors {
		m.wrote(m.nodes[i])
	}
	// A node that lost its membership cannot write: its commits carry its
	// lapsed lease. A create is conditioned on nothing else.
	id := m.id()
	if _, err := victim.rt.CreateThread(context.Background(), id, mcpruntime.ThreadOptions{}); err == nil {
		t.Fatalf("CreateThread(%s) on the killed %s succeeded", id, victim.id)
	}
	machineStats.kills.Add(1)
	machineStats.adopted.Add(int64(len(orphans)))
}

// closingKill ends a case that drew no kill that ran with one, and checks
// after it, so that every case exercises a node's loss and its threads'
// and credentials' adoption on whatever state its steps left: a kill drawn
// at random needs a thread homed and a live credential first, and twelve
// cases do not always draw one after those. It resumes the paused and
// stalled nodes (the kill would) and, when nothing is left to revoke,
// opens a session of a new thread first.
func (m *clusterMachine) closingKill(t *rapid.T) {
	if m.victim.Load() >= 0 {
		return
	}
	for i, f := range m.fault {
		if f == paused || f == stalled {
			m.nodes[i].rep.Resume()
			m.fault[i] = healthy
			waitFor(t, m.nodes[i].id+" serving again after resume", m.nodes[i].rep.Serving)
		}
	}
	if m.liveCreds() == 0 {
		m.openOn(t, m.newThread(t), m.instance(t))
	}
	m.kill(t)
	m.check(t)
}

func (m *clusterMachine) liveCreds() int {
	n := 0
	for _, c := range m.creds {
		if !c.revoked {
			n++
		}
	}
	return n
}

// homed counts the model threads whose home is node.
func (m *clusterMachine) homed(node string) int {
	n := 0
	for _, th := range m.threads {
		if th.home == node {
			n++
		}
	}
	return n
}

// check holds, after every step, on every node.
func (m *clusterMachine) check(t *rapid.T) {
	if stack := commitInActor(); stack != "" {
		t.Fatalf("a commit to etcd ran inside an actor's Receive (SPEC §5d.7):\n%s", stack)
	}
	var members []string
	for i, n := range m.nodes {
		if m.fault[i] != killed {
			members = append(members, n.id)
		}
	}
	now := time.Now()
	for i, n := range m.nodes {
		serving := n.rt.Node().Serving
		if m.fault[i] == killed && serving {
			t.Fatalf("the killed %s serves", n.id)
		}
		applied := n.rep.Applied()
		for _, c := range m.creds {
			p, err := n.rt.Authenticate(c.tok)
			switch {
			case c.revoked && err == nil:
				t.Fatalf("%s authenticates %s (%+v), whose revoke returned", n.id, c.id, p)
			case c.revoked && errors.Is(err, mcpruntime.ErrUnauthenticated):
				machineStats.revokedChecks.Add(1)
			case c.revoked || m.fault[i] == killed:
			case err == nil:
				if p.CredentialID != c.id {
					t.Fatalf("%s authenticates %s as %+v", n.id, c.id, p)
				}
				machineStats.liveChecks.Add(1)
			case !errors.Is(err, mcpruntime.ErrNodeUnavailable):
				// A mint waits for every serving node (SPEC §5d.3).
				t.Fatalf("%s serves but refuses %s, live, whose mint returned: %v", n.id, c.id, err)
			case applied >= c.bound: // not serving, but it applied the mint: its replica holds the token (no write lost)
				if _, err := credential.Authenticate(n.rep.Store().Read(), c.tok, now); err != nil {
					t.Fatalf("%s applied %d ≥ the mint of %s (%d) but its replica refuses it: %v", n.id, applied, c.id, c.bound, err)
				}
			}
		}
		m.checkGrants(t, i, n)
		if m.fault[i] == killed {
			continue // its replica stopped when it was killed
		}
		if serving && !slices.Equal(n.rt.Node().Members, members) {
			t.Fatalf("%s serves with members %v, want %v", n.id, n.rt.Node().Members, members)
		}
		if got, want := n.rt.Stats().Threads, m.homed(n.id); got != want {
			t.Fatalf("%s holds %d thread actors, home of %d", n.id, got, want)
		}
		if applied < m.lastWrite {
			continue // behind (paused or stalled): its replica is checked once it caught up
		}
		m.checkReplica(t, n)
	}
}

// checkReplica compares n's replica with the model: every thread, its
// home, state and messages in order, and the home's answer elsewhere.
func (m *clusterMachine) checkReplica(t *rapid.T, n *machineNode) {
	ctx := context.Background()
	all, err := n.rt.Threads(ctx)
	if err != nil {
		t.Fatalf("Threads on %s: %v", n.id, err)
	}
	if len(all) != len(m.threads) {
		t.Fatalf("%s lists %d threads, want %d", n.id, len(all), len(m.threads))
	}
	for _, got := range all {
		th := m.threads[got.ID]
		if th == nil {
			t.Fatalf("%s lists thread %s, which the model does not have", n.id, got.ID)
		}
		run := ""
		if got.Run != nil {
			run = got.Run.Instance
		}
		var msgs []string
		for _, msg := range got.Messages {
			msgs = append(msgs, msg.Text)
		}
		if got.Home != th.home || (got.Status == "archived") != th.archived || got.Instance != th.instance || run != th.run || !slices.Equal(msgs, th.msgs) {
			t.Fatalf("%s has thread %s = home %s, status %s, instance %q, run %q, messages %q; want home %s, archived %v, instance %q, run %q, messages %q",
				n.id, got.ID, got.Home, got.Status, got.Instance, run, msgs, th.home, th.archived, th.instance, th.run, th.msgs)
		}
		if th.home != n.id {
			// A probe that does nothing on the home (no run has this id).
			if err := notHomeOf(n.rt.EndRun(ctx, th.id, "run_probe"), th.id, th.home); err != nil {
				t.Fatalf("EndRun on %s: %v", n.id, err)
			}
			machineStats.notHome.Add(1)
		}
	}
}

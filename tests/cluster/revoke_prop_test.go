package cluster

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime/internal/replica"
)

// servingChecks counts, over the whole property, the checks that found a
// node serving, and waitedRevokes the revokes that waited out the fence
// bound for a node: the property is not vacuous only if both happened.
var servingChecks, waitedRevokes atomic.Int64

// TestRevokeMachine runs random mint, revoke, pause, stall (the applier
// only), resume and settle sequences, each on a random node of three, against a plain model: the
// tokens minted, which of them a returned revoke revoked, and the highest
// revision a returned revoke committed at. After every step: no serving
// node authenticates a token whose revoke returned, no serving node's
// replica is behind a returned revoke, and every node that applied a
// token's creation and not its revocation authenticates it (no write
// lost).
func TestRevokeMachine(t *testing.T) {
	endpoint := startEtcd(t)
	admin := newClient(t, endpoint)
	defer admin.Close()
	servingChecks.Store(0)
	waitedRevokes.Store(0)
	rapid.Check(t, func(t *rapid.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := admin.Delete(ctx, "/mcpruntime/", clientv3.WithPrefix()); err != nil {
			t.Fatalf("clear etcd: %v", err)
		}
		m := &revokeMachine{
			c:      startCluster(t, endpoint, 3, replica.Config{Fence: 100 * time.Millisecond, Interval: 20 * time.Millisecond}),
			paused: map[int]bool{},
		}
		t.Repeat(map[string]func(*rapid.T){
			"mint":   m.mint,
			"revoke": m.revoke,
			"pause":  m.pause,
			"stall":  m.stall,
			"resume": m.resume,
			"settle": m.settle,
			"":       m.check,
		})
	})
	if servingChecks.Load() == 0 || waitedRevokes.Load() == 0 {
		t.Fatalf("checks that found a node serving: %d, revokes that waited for a node: %d; want both > 0",
			servingChecks.Load(), waitedRevokes.Load())
	}
	t.Logf("checks that found a node serving: %d, revokes that waited for a node: %d", servingChecks.Load(), waitedRevokes.Load())
}

// token is the model of one minted credential.
type token struct {
	id, tok string
	created int64 // the revision of its creation
	revoked bool  // a revoke of it returned
}

type revokeMachine struct {
	c        *cluster
	paused   map[int]bool // node index → paused or its applier stalled
	tokens   []*token
	returned int64 // the highest revision of a returned revoke
}

// writer draws an unpaused node to write through (a paused writer would
// wait for its own replica until its context ends).
func (m *revokeMachine) writer(t *rapid.T) int {
	var ok []int
	for i := range m.c.nodes {
		if !m.paused[i] {
			ok = append(ok, i)
		}
	}
	return rapid.SampledFrom(ok).Draw(t, "writer")
}

func (m *revokeMachine) mint(t *rapid.T) {
	w := m.c.nodes[m.writer(t)]
	row, tok, rev := mint(t, w, fmt.Sprintf("t%d", len(m.tokens)))
	m.tokens = append(m.tokens, &token{id: row.ID, tok: tok, created: rev})
	if !authenticates(w, tok) {
		t.Fatalf("%s: %s does not authenticate on its writer once Create returned", w.ID(), row.ID)
	}
}

func (m *revokeMachine) revoke(t *rapid.T) {
	if len(m.tokens) == 0 {
		t.Skip("nothing minted")
	}
	tk := rapid.SampledFrom(m.tokens).Draw(t, "token")
	w := m.c.nodes[m.writer(t)]
	res := revoke(t, w, tk.id)
	tk.revoked = true
	m.returned = max(m.returned, res.Revision)
	if len(res.Waited) > 0 {
		waitedRevokes.Add(1)
	}
	for i, n := range m.c.nodes {
		if m.paused[i] && res.Revoked && slices.Contains(res.Confirmed, n.ID()) {
			t.Fatalf("paused %s confirmed revision %d, which it cannot have applied (applied %d)", n.ID(), res.Revision, n.Applied())
		}
	}
}

func (m *revokeMachine) pause(t *rapid.T) {
	i := m.pausable(t)
	m.c.nodes[i].Pause()
	m.paused[i] = true
}

func (m *revokeMachine) stall(t *rapid.T) {
	i := m.pausable(t)
	m.c.nodes[i].StallApplier()
	m.paused[i] = true
}

// pausable draws an unpaused node, keeping one writer.
func (m *revokeMachine) pausable(t *rapid.T) int {
	var ok []int
	for i := range m.c.nodes {
		if !m.paused[i] {
			ok = append(ok, i)
		}
	}
	if len(ok) < 2 {
		t.Skip("keep one writer")
	}
	return rapid.SampledFrom(ok).Draw(t, "node")
}

func (m *revokeMachine) resume(t *rapid.T) {
	var ok []int
	for i := range m.c.nodes {
		if m.paused[i] {
			ok = append(ok, i)
		}
	}
	if len(ok) == 0 {
		t.Skip("none paused")
	}
	i := rapid.SampledFrom(ok).Draw(t, "node")
	m.c.nodes[i].Resume()
	delete(m.paused, i)
}

// settle waits until every unpaused node serves, so that the checks that
// follow are about serving nodes.
func (m *revokeMachine) settle(t *rapid.T) {
	for i, n := range m.c.nodes {
		if !m.paused[i] {
			waitServing(t, n)
		}
	}
}

func (m *revokeMachine) check(t *rapid.T) {
	for _, n := range m.c.nodes {
		if n.Serving() {
			servingChecks.Add(1)
			if n.Applied() < m.returned {
				t.Fatalf("%s serves at applied %d, behind a returned revoke at %d", n.ID(), n.Applied(), m.returned)
			}
			for _, tk := range m.tokens {
				if tk.revoked && authenticates(n, tk.tok) {
					t.Fatalf("%s serves and authenticates %s, whose revoke returned", n.ID(), tk.id)
				}
			}
		}
		applied := n.Applied()
		for _, tk := range m.tokens {
			if !tk.revoked && tk.created <= applied && !authenticates(n, tk.tok) {
				t.Fatalf("%s applied %d ≥ creation %d of %s but does not authenticate it", n.ID(), applied, tk.created, tk.id)
			}
		}
	}
}

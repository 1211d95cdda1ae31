package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// OAuth sign-ins in TestRuntimeClusterMachine (SPEC §5c, §5d.9): every
// step of a sign-in on a node drawn at random, refreshes and their races
// through any node, reuses and replays, against a model of the grants.
// The check ("") holds every rule of §5c the machine can observe on every
// node: a grant's access tokens authenticate everywhere until the grant is
// revoked (a refresh keeps the earlier ones), and nowhere once a reuse or
// a replay that revoked it answered.

// Counts of the OAuth events over the whole property (machineStats'
// companions): the machine is not vacuous only if each happened.
var oauthStats struct {
	signIns       atomic.Int64 // sign-ins whose three steps ran on drawn nodes
	spreadSignIns atomic.Int64 // of those, with the page, the form and the exchange on three different nodes
	refreshes     atomic.Int64 // refreshes that rotated
	awayRefreshes atomic.Int64 // of those, through a node that is not the grant's home
	reuses        atomic.Int64 // spent refresh tokens refused, revoking their grant
	replays       atomic.Int64 // spent codes refused, revoking their grant
	races         atomic.Int64 // refresh races: one rotation, then a reuse that revoked
	pairingReuses atomic.Int64 // spent pairing codes refused on another node
	liveTokens    atomic.Int64 // checks that a node authenticated a live grant's token
	revokedTokens atomic.Int64 // checks that a node refused a revoked grant's token
	calls         atomic.Int64 // tools/list with a grant's token answered as the model says
	adopted       atomic.Int64 // live grants of a killed node adopted by a survivor (logged, not required: a kill's victim is drawn among threads' homes)
}

// mGrant is the model of one OAuth grant.
type mGrant struct {
	id, client, home string   // the grant, its OAuth client, its home
	access           []string // every access token it was issued: all live until it is revoked
	refresh          string   // its current refresh token
	spent            []string // its refresh tokens redeemed
	code, verifier   string   // the code that issued it, and its PKCE verifier
	revoked          bool     // a reuse or a replay that revoked it answered
	revokedByAnother bool     // for the log: revoked by a race
}

// authenticateServing authenticates tok on n, waiting (bounded) while n
// does not serve: a healthy node serves again once its fence proves its
// replica current.
func authenticateServing(t *rapid.T, n *machineNode, tok string) (p mcpruntime.Principal, err error) {
	waitFor(t, n.id+" to answer Authenticate", func() bool {
		p, err = n.rt.Authenticate(tok)
		return !errors.Is(err, mcpruntime.ErrNodeUnavailable)
	})
	return p, err
}

// oauthRetry runs a step (the helpers send each until the node serves,
// retryGate) and fails the machine on an error.
func oauthRetry(t *rapid.T, what string, step func() (answer, error)) answer {
	a, err := step()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return a
}

// signIn signs in through three drawn healthy nodes (page, form, code
// exchange).
func (m *clusterMachine) signIn(t *rapid.T) {
	m.bounded()
	m.signInOn(t, m.oauthNodes(t))
}

// oauthNodes draws the nodes of a sign-in's page, form and exchange: as
// often as not three different ones, when three are healthy.
func (m *clusterMachine) oauthNodes(t *rapid.T) [3]*machineNode {
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy })
	if len(ok) >= 3 && rapid.Bool().Draw(t, "spread") {
		p := rapid.Permutation(ok).Draw(t, "nodes")
		return [3]*machineNode{m.nodes[p[0]], m.nodes[p[1]], m.nodes[p[2]]}
	}
	return [3]*machineNode{m.healthyNode(t, "page"), m.healthyNode(t, "form"), m.healthyNode(t, "exchange")}
}

// signInOn signs a new client in with the page, the form and the exchange
// on at, with a pairing code minted on a fourth draw, and returns the new
// grant; now and then the spent pairing code is typed again on another
// node, and refused.
func (m *clusterMachine) signInOn(t *rapid.T, at [3]*machineNode) *mGrant {
	pageAt, formAt, exchangeAt := at[0], at[1], at[2]
	m.next++
	// A client of its own: a spent pairing code typed again is a wrong
	// code, which spends the client's budget (20 a minute).
	client := registerClient(t, baseOf(pageAt.mcpURL), fmt.Sprintf("machine-%d", m.next))
	verifier, challenge := pkcePair(fmt.Sprintf("v%d", m.next))
	var page consentPage
	a := oauthRetry(t, "consent page", func() (a answer, err error) {
		page, a, err = getConsent(baseOf(pageAt.mcpURL), client, challenge)
		return a, err
	})
	if a.status != http.StatusOK {
		t.Fatalf("consent page through %s: %v", pageAt.id, a)
	}
	pc, err := m.healthyNode(t, "pairer").rt.NewPairingCode(context.Background(), rapid.SampledFrom([]string{memdb.AccessReadOnly, memdb.AccessReadWrite}).Draw(t, "access"))
	if err != nil {
		t.Fatalf("NewPairingCode: %v", err)
	}
	a = oauthRetry(t, "consent", func() (answer, error) { return submitConsent(baseOf(formAt.mcpURL), page, pc.Code) })
	code, err := codeOf(a)
	if err != nil {
		t.Fatalf("consent of %s's page through %s: %v", pageAt.id, formAt.id, err)
	}
	a = oauthRetry(t, "exchange", func() (answer, error) {
		return exchangeCode(baseOf(exchangeAt.mcpURL), client, code, verifier)
	})
	toks, err := tokensOf(a, nil)
	if err != nil {
		t.Fatalf("exchange through %s: %v", exchangeAt.id, err)
	}
	p, err := authenticateServing(t, exchangeAt, toks.access)
	if err != nil || p.Client == "" || p.Access != pc.Access {
		t.Fatalf("the new access token on %s: %+v, %v; want a %s client grant", exchangeAt.id, p, err, pc.Access)
	}
	g := &mGrant{id: p.Client, client: client, home: exchangeAt.id, access: []string{toks.access}, refresh: toks.refresh, code: code, verifier: verifier}
	m.grants = append(m.grants, g)
	oauthStats.signIns.Add(1)
	if pageAt != formAt && formAt != exchangeAt && pageAt != exchangeAt {
		oauthStats.spreadSignIns.Add(1)
	}
	if rapid.Bool().Draw(t, "pairing code again") {
		again := m.healthyNode(t, "again")
		_, c2 := pkcePair(fmt.Sprintf("w%d", m.next))
		var page2 consentPage
		a := oauthRetry(t, "consent page", func() (a answer, err error) {
			page2, a, err = getConsent(baseOf(again.mcpURL), client, c2)
			return a, err
		})
		if a.status != http.StatusOK {
			t.Fatalf("consent page through %s: %v", again.id, a)
		}
		a = oauthRetry(t, "consent with a spent pairing code", func() (answer, error) {
			return submitConsent(baseOf(again.mcpURL), page2, pc.Code)
		})
		if a.status != http.StatusForbidden {
			t.Fatalf("a spent pairing code again through %s: %v, want 403", again.id, a)
		}
		oauthStats.pairingReuses.Add(1)
	}
	return g
}

// grant draws a live model grant whose home is healthy (its actor writes
// there), with spent refresh tokens if spent; when there is none, it
// signs one in first (and refreshes it once), so that the actions that
// need one are not skipped.
func (m *clusterMachine) grant(t *rapid.T, spent bool) *mGrant {
	var gs []*mGrant
	for _, g := range m.grants {
		if i, _ := m.node(g.home); m.fault[i] == healthy && live(g) && (!spent || len(g.spent) > 0) {
			gs = append(gs, g)
		}
	}
	if len(gs) > 0 {
		return rapid.SampledFrom(gs).Draw(t, "grant")
	}
	var g *mGrant
	for _, h := range m.grants {
		if i, _ := m.node(h.home); m.fault[i] == healthy && live(h) {
			g = h
			break
		}
	}
	if g == nil {
		g = m.signInOn(t, m.oauthNodes(t))
	}
	if spent && len(g.spent) == 0 {
		m.refreshOn(t, g, m.healthyNode(t, "refresher"))
	}
	return g
}

func live(g *mGrant) bool { return !g.revoked }

// refresh redeems a live grant's refresh token through a drawn healthy
// node: the same grant's new tokens; the earlier access tokens stay.
func (m *clusterMachine) refresh(t *rapid.T) {
	m.bounded()
	m.refreshOn(t, m.grant(t, false), m.healthyNode(t, "node"))
}

// refreshOn redeems g's refresh token through n.
func (m *clusterMachine) refreshOn(t *rapid.T, g *mGrant, n *machineNode) {
	a := oauthRetry(t, "refresh", func() (answer, error) { return redeemRefresh(baseOf(n.mcpURL), g.client, g.refresh) })
	toks, err := tokensOf(a, nil)
	if err != nil {
		t.Fatalf("refresh of %s (home %s) through %s: %v", g.id, g.home, n.id, err)
	}
	if p, err := authenticateServing(t, n, toks.access); err != nil || p.Client != g.id {
		t.Fatalf("the refreshed token on %s: %+v, %v; want grant %s", n.id, p, err, g.id)
	}
	g.access, g.spent, g.refresh = append(g.access, toks.access), append(g.spent, g.refresh), toks.refresh
	oauthStats.refreshes.Add(1)
	if n.id != g.home {
		oauthStats.awayRefreshes.Add(1)
	}
}

// reuse presents a live grant's spent refresh token through a drawn
// healthy node: invalid_grant, and the grant is revoked (SPEC §5c.11).
func (m *clusterMachine) reuse(t *rapid.T) {
	m.bounded()
	g := m.grant(t, true)
	old := rapid.SampledFrom(g.spent).Draw(t, "spent")
	n := m.healthyNode(t, "node")
	a := oauthRetry(t, "reuse", func() (answer, error) { return redeemRefresh(baseOf(n.mcpURL), g.client, old) })
	if !isInvalidGrant(a) {
		t.Fatalf("a spent refresh token of %s through %s: %v, want invalid_grant", g.id, n.id, a)
	}
	g.revoked = true
	oauthStats.reuses.Add(1)
}

// replay presents a grant's code again through a drawn healthy node:
// invalid_grant, and the grant is revoked (SPEC §5c.9); of a revoked
// grant, refused the same.
func (m *clusterMachine) replay(t *rapid.T) {
	m.bounded()
	g := m.grant(t, false)
	if len(m.grants) > 1 && rapid.Bool().Draw(t, "any grant") {
		// Now and then a grant revoked already, or whose home has a fault:
		// its replay is refused the same, and revokes nothing more.
		g = rapid.SampledFrom(m.grants).Draw(t, "replayed")
		if i, _ := m.node(g.home); m.fault[i] != healthy && !g.revoked {
			t.Skip("a live grant of a home with a fault: its revoke would wait on that home")
		}
	}
	n := m.healthyNode(t, "node")
	a := oauthRetry(t, "replay", func() (answer, error) {
		return exchangeCode(baseOf(n.mcpURL), g.client, g.code, g.verifier)
	})
	if !isInvalidGrant(a) {
		t.Fatalf("a spent code of %s through %s: %v, want invalid_grant", g.id, n.id, a)
	}
	if !g.revoked {
		oauthStats.replays.Add(1)
	}
	g.revoked = true
}

// refreshRace redeems one live refresh token through two drawn healthy
// nodes at once: one rotation, one reuse that revokes the grant, the
// winner's new token included.
func (m *clusterMachine) refreshRace(t *rapid.T) {
	m.bounded()
	ok := m.indices(func(i int) bool { return m.fault[i] == healthy })
	if len(ok) < 2 {
		t.Skip("two healthy nodes needed")
	}
	g := m.grant(t, false)
	i := rapid.SampledFrom(ok).Draw(t, "first")
	j := rapid.SampledFrom(slices.DeleteFunc(slices.Clone(ok), func(k int) bool { return k == i })).Draw(t, "second")
	var as [2]answer
	var errs [2]error
	var wg sync.WaitGroup
	for k, idx := range []int{i, j} {
		wg.Go(func() { as[k], errs[k] = redeemRefresh(baseOf(m.nodes[idx].mcpURL), g.client, g.refresh) })
	}
	wg.Wait()
	won := -1
	for k := range as {
		switch {
		case errs[k] != nil:
			t.Fatalf("racing refreshes of %s: %v", g.id, errs[k])
		case as[k].status == http.StatusOK && won < 0:
			won = k
		case !isInvalidGrant(as[k]):
			t.Fatalf("racing refreshes of %s (home %s) through %s and %s: %v and %v; want one 200, one invalid_grant",
				g.id, g.home, m.nodes[i].id, m.nodes[j].id, as[0], as[1])
		}
	}
	if won < 0 {
		t.Fatalf("racing refreshes of %s through %s and %s: both refused (%v, %v); want one rotation", g.id, m.nodes[i].id, m.nodes[j].id, as[0], as[1])
	}
	toks, err := tokensOf(as[won], nil)
	if err != nil {
		t.Fatal(err)
	}
	g.access, g.spent, g.refresh = append(g.access, toks.access), append(g.spent, g.refresh), toks.refresh
	g.revoked, g.revokedByAnother = true, true
	oauthStats.races.Add(1)
}

// oauthCall sends a tools/list with a grant's access token through a
// random node, killed ones included: a revoked grant's is 401 (or 503 on
// a node that does not serve), a live one's 200, 503 allowed only where
// the node or the grant's home has a fault.
func (m *clusterMachine) oauthCall(t *rapid.T) {
	m.bounded()
	if len(m.grants) == 0 {
		t.Skip("no grant")
	}
	g := rapid.SampledFrom(m.grants).Draw(t, "grant")
	tok := rapid.SampledFrom(g.access).Draw(t, "token")
	i := rapid.IntRange(0, len(m.nodes)-1).Draw(t, "node")
	n := m.nodes[i]
	status, err := listTools(n.mcpURL, tok)
	if err != nil {
		t.Fatalf("tools/list through %s: %v", n.id, err)
	}
	home, _ := m.node(g.home)
	switch {
	case g.revoked && (status == http.StatusUnauthorized || status == http.StatusServiceUnavailable):
	case g.revoked:
		t.Fatalf("tools/list through %s with a token of %s, revoked: %d, want 401", n.id, g.id, status)
	case m.fault[i] != healthy || m.fault[home] != healthy:
		if status != http.StatusOK && status != http.StatusServiceUnavailable {
			t.Fatalf("tools/list through %s (home %s) with a live token of %s: %d, want 200 or 503", n.id, g.home, g.id, status)
		}
	default:
		waitFor(t, n.id+" and the home serving a live grant's call", func() bool {
			if status == http.StatusServiceUnavailable {
				status, err = listTools(n.mcpURL, tok)
			}
			return err != nil || status != http.StatusServiceUnavailable
		})
		if err != nil || status != http.StatusOK {
			t.Fatalf("tools/list through %s (home %s) with a live token of %s: %d, %v; want 200", n.id, g.home, g.id, status, err)
		}
	}
	oauthStats.calls.Add(1)
}

// checkGrants is the check's part for the grants, on node n (index i):
// a revoked grant's tokens authenticate nowhere; a live one's on every
// serving node, as that grant.
func (m *clusterMachine) checkGrants(t *rapid.T, i int, n *machineNode) {
	for _, g := range m.grants {
		for _, tok := range g.access {
			p, err := n.rt.Authenticate(tok)
			switch {
			case g.revoked && err == nil:
				t.Fatalf("%s authenticates a token of %s (%+v), whose revocation answered", n.id, g.id, p)
			case g.revoked && errors.Is(err, mcpruntime.ErrUnauthenticated):
				oauthStats.revokedTokens.Add(1)
			case g.revoked || m.fault[i] == killed || errors.Is(err, mcpruntime.ErrNodeUnavailable):
			case err != nil || p.Client != g.id:
				t.Fatalf("%s serves but authenticates a live token of %s as %+v, %v", n.id, g.id, p, err)
			default:
				oauthStats.liveTokens.Add(1)
			}
		}
	}
}

// adoptGrants waits until each live grant homed on victim is adopted by
// one survivor, which every survivor names; the model follows.
func (m *clusterMachine) adoptGrants(t *rapid.T, victim string, survivors []int, deadline time.Time) {
	for _, g := range m.grants {
		if g.home != victim || g.revoked {
			continue
		}
		var home string
		for {
			home = ""
			agreed := true
			for _, i := range survivors {
				got, err := m.nodes[i].rt.ClientGrant(context.Background(), g.id)
				if err != nil || got.Home == victim || (home != "" && got.Home != home) {
					agreed = false
					break
				}
				home = got.Home
			}
			if agreed {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after killing %s: grant %s not adopted by a survivor within 15 s", victim, g.id)
			}
			time.Sleep(2 * time.Millisecond)
		}
		g.home = home
		oauthStats.adopted.Add(1)
	}
}

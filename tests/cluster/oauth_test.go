package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/oauthetcd"
	"github.com/agenthost/mcpruntime/memdb"
)

// wantLive checks that tok authenticates on every node as one principal
// of a client grant, and that a 2026-07-28 tools/list with it is 200
// through every node (forwarded to the grant's home where it is not).
// It returns the grant's id.
func wantLive(t *testing.T, nodes []*rtNode, tok string) string {
	t.Helper()
	grant := ""
	for _, n := range nodes {
		p, err := n.rt.Authenticate(tok)
		if err != nil || p.Client == "" || (grant != "" && p.Client != grant) {
			t.Fatalf("Authenticate on %s = %+v, %v; want the client grant %q", n.id, p, err, grant)
		}
		grant = p.Client
		if status, err := listTools(n.mcpURL, tok); err != nil || status != http.StatusOK {
			t.Fatalf("tools/list through %s: %d, %v; want 200", n.id, status, err)
		}
	}
	return grant
}

// wantRefused checks that no node authenticates tok and that a request
// with it is 401 through every node.
func wantRefused(t *testing.T, nodes []*rtNode, what, tok string) {
	t.Helper()
	for _, n := range nodes {
		if p, err := n.rt.Authenticate(tok); !errors.Is(err, mcpruntime.ErrUnauthenticated) {
			t.Fatalf("%s: Authenticate on %s = %+v, %v; want ErrUnauthenticated", what, n.id, p, err)
		}
		if status, err := listTools(n.mcpURL, tok); err != nil || status != http.StatusUnauthorized {
			t.Fatalf("%s: tools/list through %s: %d, %v; want 401", what, n.id, status, err)
		}
	}
}

// homeOf is the node id the client grant lives on, as n's replica says.
func homeOf(t *testing.T, n *rtNode, grant string) string {
	t.Helper()
	g, err := n.rt.ClientGrant(context.Background(), grant)
	if err != nil {
		t.Fatalf("Client(%s) on %s: %v", grant, n.id, err)
	}
	return g.Home
}

// TestOAuthSignInAcrossNodes: a sign-in whose consent page is shown by
// n1, whose form is posted to n2 (it goes to n1, the page's node) and
// whose code is exchanged on n3 works; the grant lives on n3, and its
// access token is served through every node (SPEC §5d.9).
func TestOAuthSignInAcrossNodes(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "across")
	toks := signInAt(t, client, b(0), b(1), b(2), pairingCode(t, nodes[0].rt, memdb.AccessReadWrite), "across")
	grant := wantLive(t, nodes, toks.access)
	if home := homeOf(t, nodes[0], grant); home != "n3" {
		t.Errorf("the grant lives on %q, want n3 (where the code was exchanged)", home)
	}
	p, _ := nodes[1].rt.Authenticate(toks.access)
	if p.Access != memdb.AccessReadWrite || p.Audience != oauthResource {
		t.Errorf("principal %+v, want read-write, bound to %s", p, oauthResource)
	}
	// A consent page answered is gone wherever its form is posted again.
	_, challenge := pkcePair("again")
	page := openConsent(t, b(2), client, challenge)
	pc, err := nodes[2].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	if a, err := submitConsent(b(0), page, pc.Code); err != nil || a.status != http.StatusSeeOther {
		t.Fatalf("consent of n3's page through n1: %v, %v; want 303", a, err)
	}
	if a, err := submitConsent(b(1), page, pc.Code); err != nil || a.status != http.StatusBadRequest {
		t.Fatalf("the same page's form again through n2: %v, %v; want 400 (answered)", a, err)
	}
}

// TestOAuthConsentPageOfAGoneNode: a consent form of a page whose node is
// gone is answered as an expired page's, by the node it reached.
func TestOAuthConsentPageOfAGoneNode(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 2, withOAuth(mcpruntime.Config{}))
	client := registerClient(t, baseOf(nodes[0].mcpURL), "gone")
	_, challenge := pkcePair("gone")
	page := openConsent(t, baseOf(nodes[0].mcpURL), client, challenge)
	pc, err := nodes[1].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	// n1 crashes: nothing answers on its listeners.
	rep("n1").Pause()
	nodes[0].public.Close()
	nodes[0].internal.Close()
	a, err := submitConsent(baseOf(nodes[1].mcpURL), page, pc.Code)
	if err != nil || a.status != http.StatusBadRequest || !bytes.Contains(a.body, []byte("expired")) {
		t.Fatalf("the form of the crashed n1's page through n2: %v, %v; want 400, the expired page", a, err)
	}
	rep("n1").Resume()
}

// TestOAuthPairingCodeOnceAcrossNodes: a pairing code approves one
// sign-in wherever it is typed: a second consent with it, on another
// node, is the wrong code's answer (SPEC §5c.8).
func TestOAuthPairingCodeOnceAcrossNodes(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "pairing")
	pc, err := nodes[0].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	_, c1 := pkcePair("one")
	_, c2 := pkcePair("two")
	first, second := openConsent(t, b(1), client, c1), openConsent(t, b(2), client, c2)
	if a, err := submitConsent(b(1), first, pc.Code); err != nil || a.status != http.StatusSeeOther {
		t.Fatalf("first consent with the code on n2: %v, %v; want 303", a, err)
	}
	for _, at := range []int{2, 0} {
		a, err := submitConsent(b(at), second, pc.Code)
		if err != nil || a.status != http.StatusForbidden {
			t.Fatalf("the spent code again through %s: %v, %v; want 403, the wrong code's page", nodes[at].id, a, err)
		}
	}
}

// TestOAuthRefreshOnAnotherNode: a refresh token redeemed through a node
// that is not its grant's home is rotated by the home, once: the new
// tokens work on every node, the earlier access token too (the same
// grant), the next refresh works through a third node, and the first
// refresh token presented again revokes the whole grant everywhere (SPEC
// §5c.11).
func TestOAuthRefreshOnAnotherNode(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "refresh")
	first := signInAt(t, client, b(0), b(0), b(0), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly), "refresh")
	grant := wantLive(t, nodes, first.access)
	if home := homeOf(t, nodes[1], grant); home != "n1" {
		t.Fatalf("the grant lives on %q, want n1", home)
	}
	second, err := tokensOf(redeemRefresh(b(1), client, first.refresh))
	if err != nil {
		t.Fatalf("refresh through n2: %v", err)
	}
	if g := wantLive(t, nodes, second.access); g != grant {
		t.Fatalf("the refreshed token is of grant %s, want %s (the same)", g, grant)
	}
	wantLive(t, nodes, first.access)
	third, err := tokensOf(redeemRefresh(b(2), client, second.refresh))
	if err != nil {
		t.Fatalf("the next refresh through n3: %v", err)
	}
	wantLive(t, nodes, third.access)
	a, err := redeemRefresh(b(1), client, first.refresh)
	if err != nil || !isInvalidGrant(a) {
		t.Fatalf("the first refresh token again through n2: %v, %v; want invalid_grant", a, err)
	}
	for _, tok := range []string{first.access, second.access, third.access} {
		wantRefused(t, nodes, "after the reuse", tok)
	}
	if a, err := redeemRefresh(b(2), client, third.refresh); err != nil || !isInvalidGrant(a) {
		t.Fatalf("the newest refresh token after the reuse: %v, %v; want invalid_grant", a, err)
	}
}

// TestOAuthRefreshRace: two nodes redeeming one refresh token at once —
// two that are not its home, then the home and another — rotate it once:
// exactly one gets new tokens, the other invalid_grant, and that reuse
// revokes the whole grant, the winner's new tokens included (SPEC §5c.11).
func TestOAuthRefreshRace(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "race")
	for _, racers := range [][2]int{{1, 2}, {0, 1}} {
		toks := signInAt(t, client, b(0), b(0), b(0), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly), "race")
		var as [2]answer
		var errs [2]error
		var wg sync.WaitGroup
		for i, at := range racers {
			wg.Go(func() { as[i], errs[i] = redeemRefresh(b(at), client, toks.refresh) })
		}
		wg.Wait()
		won := -1
		for i := range as {
			switch {
			case errs[i] == nil && as[i].status == http.StatusOK && won < 0:
				won = i
			case errs[i] == nil && isInvalidGrant(as[i]):
			default:
				t.Fatalf("racing refreshes through %s and %s: %v (%v), %v (%v); want one 200 and one invalid_grant",
					nodes[racers[0]].id, nodes[racers[1]].id, as[0], errs[0], as[1], errs[1])
			}
		}
		if won < 0 {
			t.Fatalf("racing refreshes through %s and %s: both refused (%v, %v); want one rotation", nodes[racers[0]].id, nodes[racers[1]].id, as[0], as[1])
		}
		next, err := tokensOf(as[won], nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{toks.access, next.access} {
			wantRefused(t, nodes, "after the racing reuse", tok)
		}
	}
}

// countEvents counts, over every node, the credential events of kind
// with reason.
func countEvents(t *testing.T, nodes []*rtNode, kind, reason string) func() int64 {
	var n atomic.Int64
	for _, node := range nodes {
		t.Cleanup(node.rt.SubscribeCredentialEvents(func(e mcpruntime.CredentialEvent) {
			if e.Kind == kind && e.Reason == reason && e.Via != "admin" {
				n.Add(1)
			}
		}))
	}
	return n.Load
}

// TestOAuthCodeRace: two nodes exchanging one authorization code at once
// issue one grant, and the replay revokes it (SPEC §5c.9): at most one
// gets tokens, and once both answered they authenticate nowhere. The
// second exchange is made to read the code between the first's read and
// write (oauthetcd.TestHookCAS), so that the race is the worst one every
// time: its spend must fail its compare and find the code spent.
func TestOAuthCodeRace(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	issued := countEvents(t, nodes, mcpruntime.EventIssued, "")
	reused := countEvents(t, nodes, mcpruntime.EventRevoked, "code_reused")
	client := registerClient(t, b(0), "code-race")
	for i, mode := range []string{"concurrent", "interleaved"} {
		verifier, challenge := pkcePair(mode)
		page := openConsent(t, b(0), client, challenge)
		pc, err := nodes[0].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
		if err != nil {
			t.Fatal(err)
		}
		a, err := submitConsent(b(0), page, pc.Code)
		if err != nil {
			t.Fatal(err)
		}
		code, err := codeOf(a)
		if err != nil {
			t.Fatal(err)
		}
		var as [2]answer
		var errs [2]error
		if mode == "concurrent" {
			var wg sync.WaitGroup
			for k, at := range []int{1, 2} {
				wg.Go(func() { as[k], errs[k] = exchangeCode(b(at), client, code, verifier) })
			}
			wg.Wait()
		} else {
			var fired atomic.Bool // not a sync.Once: the nested spend calls the hook too
			oauthetcd.TestHookCAS = func(op, _ string) {
				if op == "spend" && fired.CompareAndSwap(false, true) {
					as[1], errs[1] = exchangeCode(b(2), client, code, verifier)
				}
			}
			as[0], errs[0] = exchangeCode(b(1), client, code, verifier)
			oauthetcd.TestHookCAS = nil
		}
		var got []string
		for k := range as {
			if errs[k] != nil {
				t.Fatalf("%s exchanges: %v", mode, errs[k])
			}
			switch {
			case as[k].status == http.StatusOK:
				toks, err := tokensOf(as[k], nil)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, toks.access)
			case !isInvalidGrant(as[k]):
				t.Fatalf("%s exchanges: %v and %v; want invalid_grant where not 200", mode, as[0], as[1])
			}
		}
		if len(got) > 1 {
			t.Fatalf("%s exchanges of one code both issued tokens: %v, %v", mode, as[0], as[1])
		}
		for _, tok := range got {
			wantRefused(t, nodes, mode+" exchanges, after both answered", tok)
		}
		if n := issued(); n != int64(i+1) {
			t.Fatalf("after the %s exchanges: %d grants issued in all, want %d (one per code)", mode, n, i+1)
		}
		waitFor(t, "the code_reused revocation's event", func() bool { return reused() == int64(i+1) })
	}
}

// TestOAuthCodeReplayOnAnotherNode: a code exchanged on one node and
// presented again on another is invalid_grant there, and the grant it
// issued — whose home is the first node — is revoked everywhere before
// the answer (SPEC §5c.9).
func TestOAuthCodeReplayOnAnotherNode(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(0), "replay")
	verifier, challenge := pkcePair("replay")
	page := openConsent(t, b(0), client, challenge)
	pc, err := nodes[1].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	a, err := submitConsent(b(2), page, pc.Code)
	if err != nil {
		t.Fatal(err)
	}
	code, err := codeOf(a)
	if err != nil {
		t.Fatal(err)
	}
	toks, err := tokensOf(exchangeCode(b(0), client, code, verifier))
	if err != nil {
		t.Fatal(err)
	}
	wantLive(t, nodes, toks.access)
	replay, err := exchangeCode(b(1), client, code, verifier)
	if err != nil || !isInvalidGrant(replay) {
		t.Fatalf("the replay through n2: %v, %v; want invalid_grant", replay, err)
	}
	wantRefused(t, nodes, "after the replay", toks.access)
	if a, err := redeemRefresh(b(2), client, toks.refresh); err != nil || !isInvalidGrant(a) {
		t.Fatalf("the replayed code's refresh token: %v, %v; want invalid_grant", a, err)
	}
}

// TestOAuthWrongCodeBudgetShared: the wrong-code budgets are the
// cluster's, not a node's (SPEC §5c.8, §5d.9): a client's 20 wrong codes
// a minute, spread over three nodes, leave it 429 on every node — its
// right code too — while another client's right code signs in. The
// nodes' clock stands still, so that no token refills meanwhile.
func TestOAuthWrongCodeBudgetShared(t *testing.T) {
	frozen := time.Now()
	cfg := withOAuth(mcpruntime.Config{Now: func() time.Time { return frozen }})
	nodes := startRuntimes(t, startEtcd(t), 3, cfg)
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	flooder, other := registerClient(t, b(0), "flooder"), registerClient(t, b(0), "other")
	var page consentPage
	for i := range 20 {
		if i%4 == 0 { // a page takes 5 wrong codes before it is dropped
			_, challenge := pkcePair("flood")
			page = openConsent(t, b(i%3), flooder, challenge)
		}
		a, err := submitConsent(b((i+1)%3), page, "00000-00000")
		if err != nil || a.status != http.StatusForbidden {
			t.Fatalf("wrong code %d through %s: %v, %v; want 403", i+1, nodes[(i+1)%3].id, a, err)
		}
	}
	pc, err := nodes[0].rt.NewPairingCode(context.Background(), memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	for i := range nodes {
		_, challenge := pkcePair("flood")
		page := openConsent(t, b(i), flooder, challenge)
		a, err := submitConsent(b(i), page, pc.Code)
		if err != nil || a.status != http.StatusTooManyRequests {
			t.Fatalf("the flooder's right code through %s after 20 wrong ones over the nodes: %v, %v; want 429", nodes[i].id, a, err)
		}
	}
	toks := signInAt(t, other, b(2), b(1), b(0), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly), "other")
	wantLive(t, nodes, toks.access)
}

// TestOAuthUnavailableNode: a node that does not serve (its replica
// unproven) answers the authorization and token endpoints 503 with
// Retry-After before it looks at anything: the pairing code typed into
// it and the code sent to it are not spent, and work through another
// node; its metadata is still served (SPEC §5d.9).
func TestOAuthUnavailableNode(t *testing.T) {
	rep := replicas(t)
	nodes := startRuntimes(t, startEtcd(t), 2, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(1), "unavailable")
	_, c1 := pkcePair("first")
	page1 := openConsent(t, b(0), client, c1)
	pc1 := pairingCode(t, nodes[1].rt, memdb.AccessReadOnly)
	verifier, c2 := pkcePair("second")
	a, err := submitConsent(b(1), openConsent(t, b(1), client, c2), pairingCode(t, nodes[1].rt, memdb.AccessReadOnly))
	if err != nil {
		t.Fatal(err)
	}
	code, err := codeOf(a)
	if err != nil {
		t.Fatal(err)
	}

	rep("n1").Pause() // well within its lease: it stops serving, and comes back
	waitFor(t, "n1 not serving", func() bool { return !nodes[0].rt.Node().Serving })
	form := "request=" + page1.request + "&csrf=" + page1.csrf + "&pairing_code=" + pc1 + "&action=approve"
	for _, step := range []struct{ what, method, path, contentType, body string }{
		{"the consent form", http.MethodPost, "/oauth/authorize", "application/x-www-form-urlencoded", form},
		{"the code exchange", http.MethodPost, "/oauth/token", "application/x-www-form-urlencoded",
			"grant_type=authorization_code&code=" + code + "&client_id=" + client + "&redirect_uri=" + oauthRedirect + "&code_verifier=" + verifier},
	} {
		a, err := send(step.method, b(0)+step.path, step.contentType, step.body)
		if err != nil || !gated(a) {
			t.Fatalf("%s on the unavailable n1: %v, %v; want 503 with Retry-After", step.what, a, err)
		}
	}
	if a, err := send(http.MethodGet, b(0)+"/.well-known/oauth-authorization-server", "", ""); err != nil || a.status != http.StatusOK {
		t.Fatalf("the metadata on the unavailable n1: %v, %v; want 200", a, err)
	}
	if _, err := tokensOf(exchangeCode(b(1), client, code, verifier)); err != nil {
		t.Fatalf("the code, refused by the unavailable n1, through n2: %v; want tokens (not spent)", err)
	}
	rep("n1").Resume()
	waitFor(t, "n1 serving again", func() bool { return nodes[0].rt.Node().Serving })
	if a, err := submitConsent(b(1), page1, pc1); err != nil || a.status != http.StatusSeeOther {
		t.Fatalf("n1's page, with the pairing code the unavailable n1 refused, through n2: %v, %v; want 303 (neither spent)", a, err)
	}
}

// TestOAuthConsentSourceFromTheNode: a consent form's client address, by
// which the wrong-code budgets go (SPEC §5c.8), is the one the node it
// reached saw, carried by that node to the page's node — never one the
// client sends (SPEC §5d.9). Wrong codes sent through n2 for n1's pages,
// each claiming another address, all spend the client's loopback budget
// (its right code is then 429); wrong codes that a node forwards to n1's
// internal listener as from 203.0.113.9 spend that source's budget, not
// the client's loopback one. The nodes' clock stands still.
func TestOAuthConsentSourceFromTheNode(t *testing.T) {
	frozen := time.Now()
	nodes := startRuntimes(t, startEtcd(t), 2, withOAuth(mcpruntime.Config{Now: func() time.Time { return frozen }}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	const addrHeader = "Mcpruntime-Client-Addr"
	flood := func(client string, post func(p consentPage, i int) (answer, error)) {
		t.Helper()
		var page consentPage
		for i := range 20 {
			if i%4 == 0 {
				_, challenge := pkcePair("flood")
				page = openConsent(t, b(0), client, challenge)
			}
			if a, err := post(page, i); err != nil || a.status != http.StatusForbidden {
				t.Fatalf("wrong code %d: %v, %v; want 403", i+1, a, err)
			}
		}
	}
	form := func(p consentPage, code string) string {
		return url.Values{"request": {p.request}, "csrf": {p.csrf}, "pairing_code": {code}, "action": {"approve"}}.Encode()
	}
	const formType = "application/x-www-form-urlencoded"

	spoofer := registerClient(t, b(0), "spoofer")
	flood(spoofer, func(p consentPage, i int) (answer, error) {
		return sendWith(http.MethodPost, b(1)+"/oauth/authorize",
			map[string]string{"Content-Type": formType, addrHeader: fmt.Sprintf("198.51.100.%d:4000", i+1)}, form(p, "00000-00000"))
	})
	_, challenge := pkcePair("spoofer")
	a, err := submitConsent(b(1), openConsent(t, b(0), spoofer, challenge), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly))
	if err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("the right code after 20 wrong ones claiming 20 addresses: %v, %v; want 429 (the client's own address was used)", a, err)
	}

	remote := registerClient(t, b(0), "remote")
	internal := "http://" + nodes[0].internalAddr + "/internal/oauth/consent"
	fromRemote := map[string]string{"Content-Type": formType, "Mcpruntime-Node-Auth": testSecret, addrHeader: "203.0.113.9:4000"}
	flood(remote, func(p consentPage, _ int) (answer, error) {
		return sendWith(http.MethodPost, internal, fromRemote, form(p, "00000-00000"))
	})
	_, challenge = pkcePair("remote")
	a, err = sendWith(http.MethodPost, internal, fromRemote, form(openConsent(t, b(0), remote, challenge), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly)))
	if err != nil || a.status != http.StatusTooManyRequests {
		t.Fatalf("a right code forwarded as from 203.0.113.9 after 20 wrong ones from there: %v, %v; want 429", a, err)
	}
	toks := signInAt(t, remote, b(0), b(1), b(0), pairingCode(t, nodes[0].rt, memdb.AccessReadOnly), "remote")
	wantLive(t, nodes, toks.access)
}

// TestOAuthGrantOutlivesCleanShutdown: an OAuth grant whose home shuts
// down cleanly (a rolling restart) is adopted by a survivor with its
// tokens live: its access token authenticates throughout, and its refresh
// token is redeemed through another node once the survivor has it (503
// until then), after which both tokens serve (SPEC §5d.5, §5d.9).
func TestOAuthGrantOutlivesCleanShutdown(t *testing.T) {
	nodes := startRuntimes(t, startEtcd(t), 3, withOAuth(mcpruntime.Config{}))
	b := func(i int) string { return baseOf(nodes[i].mcpURL) }
	client := registerClient(t, b(1), "restart")
	toks := signInAt(t, client, b(1), b(2), b(0), pairingCode(t, nodes[1].rt, memdb.AccessReadOnly), "restart")
	grant := wantLive(t, nodes, toks.access)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := nodes[0].rt.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown of the grant's home: %v", err)
	}
	survivors := nodes[1:]
	for _, n := range survivors {
		if p, err := n.rt.Authenticate(toks.access); err != nil || p.Client != grant {
			t.Fatalf("Authenticate on %s right after its home's shutdown = %+v, %v; want grant %s", n.id, p, err, grant)
		}
	}
	var next oauthTokens
	waitFor(t, "a survivor to adopt the grant and refresh it", func() bool {
		a, err := redeemRefresh(b(2), client, toks.refresh)
		if err == nil && a.status == http.StatusServiceUnavailable && a.header.Get("Retry-After") != "" {
			return false
		}
		if next, err = tokensOf(a, err); err != nil {
			t.Fatalf("refresh through n3 after n1's shutdown: %v", err)
		}
		return true
	})
	if g := wantLive(t, survivors, next.access); g != grant {
		t.Fatalf("the refreshed token is of grant %s, want %s", g, grant)
	}
	wantLive(t, survivors, toks.access)
	if home := homeOf(t, nodes[1], grant); home != "n2" && home != "n3" {
		t.Fatalf("the grant lives on %q after n1's shutdown, want a survivor", home)
	}
}

package transport_test

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// refusals counts an Observer's Refused calls by bound.
type refusals struct {
	mu sync.Mutex
	n  map[string]int
}

func (*refusals) Request(string, string, int, time.Duration) {}
func (*refusals) AuthFailure(string)                         {}
func (*refusals) SessionOpened()                             {}
func (*refusals) SessionClosed(string)                       {}
func (*refusals) Forward(string)                             {}
func (o *refusals) Refused(bound string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.n[bound]++
}

func (o *refusals) count(bound string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.n[bound]
}

// wantRateLimited requires a 429 whose Retry-After is the bucket's refill
// (one token a thousand seconds, a batch needs up to three: more than the
// endpoint's 1 s default) and a
// JSON-RPC error.
func wantRateLimited(t *testing.T, what string, res *ht.Result) {
	t.Helper()
	ht.WantStatus(t, what, res, http.StatusTooManyRequests)
	if secs, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || secs <= 1 || secs > 3000 {
		t.Errorf("%s: Retry-After %q, want the bucket's refill, in (1, 3000] seconds", what, res.Header.Get("Retry-After"))
	}
	if !strings.Contains(string(res.Body), "rate limit") {
		t.Errorf("%s: body %s, want the rate limit's error", what, res.Body)
	}
}

// TestHTTPRatePerNamespace (SPEC §5b.15): with RatePerNamespace, each
// namespace has its own bucket of BurstPerNamespace messages: one
// principal that spent it is throttled — 429 with the refill's
// Retry-After, counted under rate_per_namespace — while another is served;
// each message of a batch takes a token, and a batch that does not fit is
// refused whole; a 2026-07-28 request takes one as well.
func TestHTTPRatePerNamespace(t *testing.T) {
	const burst = 6
	f, tok, other := twoCredentials(t)
	ct, _ := issueClient(t, f, "ide", memdb.AccessReadOnly)
	obs := &refusals{n: map[string]int{}}
	e := newMCPEnv(t, f, transport.Options{RatePerNamespace: 0.001, BurstPerNamespace: burst, Observer: obs})

	sid := e.Initialize(tok) // initialize and notifications/initialized: two tokens
	for i := range burst - 2 {
		e.WantPing("ping "+strconv.Itoa(i)+" within the burst", tok, sid)
	}
	wantRateLimited(t, "a ping past the burst", e.Post(tok, sid, ht.PingBody))
	otherSid := initializeAt(t, e, other, "2025-03-26") // a session that takes batches
	e.WantPing("another principal, while the first is throttled", other, otherSid)
	wantRateLimited(t, "the first, still", e.Post(tok, sid, ht.PingBody))
	if n := obs.count("rate_per_namespace"); n != 2 {
		t.Errorf("rate_per_namespace refusals = %d, want 2", n)
	}

	// other has burst-3 tokens left: a batch of 2 fits; one of 3 then does
	// not — its POST takes the last token, its other two find none — and is
	// counted refused once per message.
	batch := func(n int) string {
		return "[" + strings.TrimSuffix(strings.Repeat(ht.PingBody+",", n), ",") + "]"
	}
	if answers := batchAnswers(t, e.Post(other, otherSid, batch(2))); len(answers) != 2 {
		t.Fatalf("a batch within the bucket: %d answers, want 2", len(answers))
	}
	wantRateLimited(t, "a batch past the bucket", e.Post(other, otherSid, batch(3)))
	if n := obs.count("rate_per_namespace"); n != 5 {
		t.Errorf("rate_per_namespace refusals = %d, want 5 (the batch's three messages each)", n)
	}
	wantRateLimited(t, "other, now spent", e.Post(other, otherSid, ht.PingBody))

	// The 2026-07-28 era: one token a request, the same answer past them.
	for i := range burst {
		res := e.Do(http.MethodPost, modernHeaders(ct.Token, "server/discover", ""), modernBody(strconv.Itoa(i+1), "server/discover", ""))
		ht.WantStatus(t, "server/discover within the burst", res, http.StatusOK)
	}
	wantRateLimited(t, "a 2026-07-28 request past the burst", e.Do(http.MethodPost, modernHeaders(ct.Token, "server/discover", ""), modernBody("9", "server/discover", "")))
}

// TestHTTPRateOff: without RatePerNamespace nothing is rate limited.
func TestHTTPRateOff(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	e := newMCPEnv(t, f, transport.Options{})
	sid := e.Initialize(tok)
	for range 100 {
		e.WantPing("unlimited", tok, sid)
	}
}

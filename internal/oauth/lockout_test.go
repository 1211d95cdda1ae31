package oauth

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The tests of issue 24's rows 2, 3 and 5: no outsider can shut the
// sign-in of others — by wrong pairing codes (SPEC §5c.8) or by pending
// requests (§5c.16) — and the authorization endpoint is no open
// redirector (§5c.6, §5c.7).

const wrongCode = "AAAAA-AAAAA"

// doFrom serves one request in-process as if it came from remote (an
// ip:port), which a test listener on loopback cannot give.
func (e *env) doFrom(remote, method, path, contentType, body string) answer {
	e.t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = strings.TrimPrefix(e.http.URL, "http://")
	req.RemoteAddr = remote
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	w := httptest.NewRecorder()
	e.srv.ServeHTTP(w, req)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return answer{status: res.StatusCode, header: res.Header, body: string(b)}
}

// openConsentFrom is openConsent from remote.
func (e *env) openConsentFrom(remote string, v url.Values) (consentForm, answer) {
	e.t.Helper()
	a := e.doFrom(remote, http.MethodGet, PathAuthorize+"?"+v.Encode(), "", "")
	var f consentForm
	for _, m := range hiddenRe.FindAllStringSubmatch(a.body, -1) {
		if m[1] == "request" {
			f.request = m[2]
		} else {
			f.csrf = m[2]
		}
	}
	return f, a
}

// submitFrom is submit from remote.
func (e *env) submitFrom(remote string, f consentForm, code string) answer {
	e.t.Helper()
	v := url.Values{"request": {f.request}, "csrf": {f.csrf}, "pairing_code": {code}, "action": {"approve"}}
	return e.doFrom(remote, http.MethodPost, PathAuthorize, "application/x-www-form-urlencoded", v.Encode())
}

// guessUntilRefused sends wrong codes for client id, each on a page of its
// own, until one is refused with 429; it returns how many were checked
// (403) before. It gives up after limit guesses.
func (e *env) guessUntilRefused(remote, id string, limit int) int {
	e.t.Helper()
	_, challenge := pkce("flood")
	for n := 0; n < limit; n++ {
		f, a := e.openConsentFrom(remote, e.authParams(id, challenge))
		if a.status != http.StatusOK {
			e.t.Fatalf("flooder's consent page %d = %d", n, a.status)
		}
		switch a := e.submitFrom(remote, f, wrongCode); a.status {
		case http.StatusForbidden:
		case http.StatusTooManyRequests:
			return n
		default:
			e.t.Fatalf("wrong code %d = %d, want 403 or 429", n, a.status)
		}
	}
	return limit
}

// signInFrom runs a sign-in of client id from remote with a right code
// and reports the answer to the consent form.
func (e *env) signInFrom(remote, id string) answer {
	e.t.Helper()
	_, challenge := pkce("right")
	f, a := e.openConsentFrom(remote, e.authParams(id, challenge))
	if a.status != http.StatusOK {
		e.t.Fatalf("consent page = %d %s", a.status, a.body)
	}
	return e.submitFrom(remote, f, e.pair(AccessReadOnly))
}

// Issue 24 row 2: one client's wrong codes spend its own budget, not the
// server's: past it that client gets 429 (a right code included), while
// another client's right code signs in.
func TestWrongCodesOfOneClientSpareAnother(t *testing.T) {
	e := newEnv(t)
	flooder, victim := e.register(), e.register()
	const local = "127.0.0.1:40000"
	if n := e.guessUntilRefused(local, flooder, 3*DefaultClientFailuresPerMinute); n != DefaultClientFailuresPerMinute {
		t.Fatalf("the flooder's wrong codes checked before a 429 = %d, want %d", n, DefaultClientFailuresPerMinute)
	}
	if a := e.signInFrom(local, flooder); a.status != http.StatusTooManyRequests {
		t.Errorf("the flooder's right code while over its budget = %d, want 429", a.status)
	}
	if a := e.signInFrom(local, victim); a.status != http.StatusSeeOther || mustQuery(t, a.header.Get("Location")).Get("code") == "" {
		t.Errorf("another client's right code during the flood = %d %s, want 303 with a code", a.status, a.header.Get("Location"))
	}
	// The flood goes on: the flooder is still refused, the victim still
	// signs in.
	if n := e.guessUntilRefused(local, flooder, 5); n != 0 {
		t.Errorf("the flooder's codes checked while over its budget = %d, want 0", n)
	}
	if a := e.signInFrom(local, victim); a.status != http.StatusSeeOther {
		t.Errorf("another client's second sign-in = %d, want 303", a.status)
	}
	e.clock.Advance(time.Minute)
	if a := e.signInFrom(local, flooder); a.status != http.StatusSeeOther {
		t.Errorf("the flooder's right code once its budget refilled = %d, want 303", a.status)
	}
	if got := e.reasons(kindPairingFailed); !contains(got, "rate_limited") || !contains(got, "wrong_code") {
		t.Errorf("pairing audit reasons = %v, want wrong_code and rate_limited", got)
	}
}

// Issue 24 row 2, from a remote source: registrations are free, so one
// source address has a budget too, whatever clients it uses; another
// source's right code signs in while it is spent.
func TestWrongCodesOfOneSourceSpareAnother(t *testing.T) {
	e := newEnv(t)
	const attacker, other = "203.0.113.7:5000", "198.51.100.9:6000"
	n := 0
	for i := 0; i < 2*DefaultSourceFailuresPerMinute/DefaultClientFailuresPerMinute+2; i++ {
		n += e.guessUntilRefused(attacker, e.register(), 3*DefaultClientFailuresPerMinute)
	}
	if n != DefaultSourceFailuresPerMinute {
		t.Errorf("wrong codes checked from one source with many clients = %d, want %d", n, DefaultSourceFailuresPerMinute)
	}
	if a := e.signInFrom(attacker, e.register()); a.status != http.StatusTooManyRequests {
		t.Errorf("a fresh client's right code from the spent source = %d, want 429", a.status)
	}
	for _, remote := range []string{other, "127.0.0.1:7000", "[2001:db8::1]:1"} {
		if a := e.signInFrom(remote, e.register()); a.status != http.StatusSeeOther {
			t.Errorf("a right code from %s while one source is spent = %d, want 303", remote, a.status)
		}
	}
}

// The server-wide backstop: wrong codes of many clients on loopback (one
// source that is not told apart) can still spend it — what remains of
// row 2, documented in SPEC §5c.8 — but no one client or source alone.
func TestPairingRateLimitGlobal(t *testing.T) {
	e := newEnv(t, func(c *Config) {
		c.ClientFailuresPerMinute, c.SourceFailuresPerMinute, c.FailuresPerMinute = 2, 3, 6
	})
	const local = "127.0.0.1:1"
	if n := e.guessUntilRefused("203.0.113.7:1", e.register(), 10) + e.guessUntilRefused("203.0.113.7:1", e.register(), 10); n != 3 {
		t.Fatalf("one source's wrong codes = %d, want its budget 3", n)
	}
	if n := e.guessUntilRefused(local, e.register(), 10) + e.guessUntilRefused(local, e.register(), 10); n != 3 {
		t.Fatalf("the rest of the backstop = %d, want 3", n)
	}
	id := e.register()
	_, challenge := pkce("abc")
	f, _ := e.openConsentFrom(local, e.authParams(id, challenge))
	good := e.pair(AccessReadOnly)
	if a := e.submitFrom(local, f, good); a.status != http.StatusTooManyRequests {
		t.Fatalf("a right code while the backstop is spent = %d, want 429", a.status)
	}
	e.clock.Advance(time.Minute)
	if a := e.submitFrom(local, f, good); a.status != http.StatusSeeOther {
		t.Errorf("the right code once the backstop refilled = %d, want 303 (it was not spent by the 429)", a.status)
	}
	if got := e.reasons(kindPairingFailed); !contains(got, "rate_limited") || !contains(got, "wrong_code") {
		t.Errorf("pairing audit reasons = %v", got)
	}
}

// A backstop that one client or one source could spend alone is refused.
func TestFailureBudgetsConfig(t *testing.T) {
	for _, test := range []struct {
		name                   string
		client, source, server int
		ok                     bool
	}{
		{"defaults", 0, 0, 0, true},
		{"backstop of one client's budget", 20, 0, 20, false},
		{"backstop of one source's budget", 5, 50, 60, false},
		{"backstop twice the largest", 5, 10, 20, true},
	} {
		t.Run(test.name, func(t *testing.T) {
			_, err := New(Config{
				Issuer: "http://127.0.0.1:1", Resource: "http://127.0.0.1:1/mcp", Secret: []byte(strings.Repeat("s", 32)), Grants: &fakeGrants{},
				ClientFailuresPerMinute: test.client, SourceFailuresPerMinute: test.source, FailuresPerMinute: test.server,
			})
			if (err == nil) != test.ok {
				t.Errorf("New = %v, want ok %v", err, test.ok)
			}
		})
	}
}

func TestSourceKey(t *testing.T) {
	for _, test := range []struct{ remote, want string }{
		{"127.0.0.1:80", ""},
		{"127.9.9.9:80", ""},
		{"[::1]:80", ""},
		{"[::ffff:127.0.0.1]:80", ""},
		{"", ""},
		{"garbage", ""},
		{"203.0.113.7:80", "203.0.113.7"},
		{"[::ffff:203.0.113.7]:80", "203.0.113.7"},
		{"[2001:db8:1:2:3:4:5:6]:80", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2::9]:1", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:1", "fe80::/64"},
	} {
		if got := sourceKey(test.remote); got != test.want {
			t.Errorf("sourceKey(%q) = %q, want %q", test.remote, got, test.want)
		}
	}
}

// Issue 24 row 3: one client's pending requests fill only its share of
// the table (its own oldest go first); another client's sign-in gets its
// consent page and completes during the flood.
func TestPendingFloodOfOneClient(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxPending = 64 })
	flooder, victim := e.register(), e.register()
	_, challenge := pkce("abc")
	var pages []consentForm
	for i := range 100 {
		f, a := e.openConsent(e.authParams(flooder, challenge))
		if a.status != http.StatusOK {
			t.Fatalf("flooder's request %d = %d, want 200 (its own oldest give way)", i, a.status)
		}
		pages = append(pages, f)
	}
	verifier, challenge := pkce("victim")
	q := e.approve(e.authParams(victim, challenge), AccessReadOnly)
	if a := e.exchange(victim, q.Get("code"), verifier); a.status != http.StatusOK {
		t.Errorf("another client's exchange during the flood = %d %s", a.status, a.body)
	}
	if a := e.submit(pages[0], e.pair(AccessReadOnly)); a.status != http.StatusBadRequest {
		t.Errorf("the flooder's oldest request = %d, want 400 (evicted)", a.status)
	}
	if a := e.submit(pages[len(pages)-1], e.pair(AccessReadOnly)); a.status != http.StatusSeeOther {
		t.Errorf("the flooder's newest request = %d, want 303", a.status)
	}
	if n := e.srv.pending.count(); n > 64/16 {
		t.Errorf("%d requests pending, want at most the flooder's share %d", n, 64/16)
	}
}

// When the table is full, the client with the most requests gives way —
// its oldest — not the newcomer.
func TestPendingFullEvictsTheLargest(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxPending = 8; c.MaxPendingPerClient = 4 })
	big, small, mid, newcomer := e.register(), e.register(), e.register(), e.register()
	_, challenge := pkce("abc")
	open := func(id string) consentForm {
		f, a := e.openConsent(e.authParams(id, challenge))
		if a.status != http.StatusOK {
			t.Fatalf("consent page = %d", a.status)
		}
		return f
	}
	var bigs, smalls []consentForm
	smalls = append(smalls, open(small)) // the oldest of all, but of the smaller client
	for range 4 {
		bigs = append(bigs, open(big))
	}
	for range 2 {
		smalls = append(smalls, open(small))
	}
	smalls = append(smalls, open(mid))
	// Full (8: big 4, small 3, mid 1); the next request evicts big's
	// oldest, though small's first is older.
	f := open(newcomer)
	if a := e.submit(bigs[0], e.pair(AccessReadOnly)); a.status != http.StatusBadRequest {
		t.Errorf("the largest client's oldest = %d, want 400 (evicted)", a.status)
	}
	for i, g := range append(append([]consentForm{f}, smalls...), bigs[1:]...) {
		if a := e.submit(g, e.pair(AccessReadOnly)); a.status != http.StatusSeeOther {
			t.Errorf("request %d = %d, want 303 (kept)", i, a.status)
		}
	}
}

// From a remote source the share is per source too: many registrations
// from one address hold at most the source's share.
func TestPendingFloodOfOneSource(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.MaxPending = 64 })
	_, challenge := pkce("abc")
	const attacker = "203.0.113.7:5000"
	for i := range 100 {
		if _, a := e.openConsentFrom(attacker, e.authParams(e.register(), challenge)); a.status != http.StatusOK {
			t.Fatalf("attacker's request %d = %d", i, a.status)
		}
	}
	if n := e.srv.pending.count(); n != 64/8 {
		t.Errorf("%d requests pending from one source, want its share %d", n, 64/8)
	}
	if a := e.signInFrom("198.51.100.9:1", e.register()); a.status != http.StatusSeeOther {
		t.Errorf("another source's sign-in = %d, want 303", a.status)
	}
}

// Issue 24 row 5: before a client's redirect URI has seen a completed
// sign-in, no refusal of the authorization endpoint sends the user agent
// there — a bad parameter or a denial is the server's error page (RFC 9700
// §4.11.2); after one, refusals go back to it (RFC 6749 §4.1.2.1).
func TestAuthorizeNoOpenRedirector(t *testing.T) {
	e := newEnv(t)
	const land = "https://attacker.example/land"
	_, challenge := pkce("abc")
	params := func(id, key, value string) url.Values {
		v := e.authParams(id, challenge)
		v.Set("redirect_uri", land)
		if key != "" {
			v.Set(key, value)
		}
		return v
	}
	bad := []struct{ name, key, value, error string }{
		{"resource naming another server", "resource", "https://other.example/mcp", "invalid_target"},
		{"plain PKCE", "code_challenge_method", "plain", "invalid_request"},
		{"no PKCE", "code_challenge", "", "invalid_request"},
		{"token response type", "response_type", "token", "unsupported_response_type"},
		{"state too long", "state", strings.Repeat("s", maxStateLen+1), "invalid_request"},
	}
	deny := func(id string) answer {
		f, a := e.openConsent(params(id, "", ""))
		if a.status != http.StatusOK {
			t.Fatalf("consent page = %d", a.status)
		}
		v := url.Values{"request": {f.request}, "csrf": {f.csrf}, "action": {"deny"}}
		return e.do(http.MethodPost, PathAuthorize, "application/x-www-form-urlencoded", v.Encode())
	}
	wantPage := func(what string, a answer, status int, code string) {
		t.Helper()
		if a.status != status || a.header.Get("Location") != "" || !strings.Contains(a.body, "Sign-in refused") ||
			!strings.Contains(a.body, `<code id="error-code">`+code+`</code>`) {
			t.Errorf("%s = %d Location %q, want %d and an error page showing %s", what, a.status, a.header.Get("Location"), status, code)
		}
	}
	for i := range 3 {
		id := e.register(land)
		for _, test := range bad {
			a := e.do(http.MethodGet, PathAuthorize+"?"+params(id, test.key, test.value).Encode(), "", "")
			wantPage(fmt.Sprintf("fresh registration %d, %s", i, test.name), a, http.StatusBadRequest, test.error)
		}
		wantPage(fmt.Sprintf("fresh registration %d, deny", i), deny(id), http.StatusForbidden, "access_denied")
	}
	if got := e.reasons(kindAuthFailed); !contains(got, "access_denied") || !contains(got, "pkce_method") {
		t.Errorf("audit reasons %v, want access_denied and pkce_method", got)
	}

	// One completed sign-in confirms this client's redirect URI.
	id := e.register(land, "https://attacker.example/other")
	f, _ := e.openConsent(params(id, "", ""))
	if a := e.submit(f, e.pair(AccessReadOnly)); a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), land+"?code=") {
		t.Fatalf("sign-in = %d %s", a.status, a.header.Get("Location"))
	}
	for _, test := range bad {
		a := e.do(http.MethodGet, PathAuthorize+"?"+params(id, test.key, test.value).Encode(), "", "")
		q := mustQuery(t, a.header.Get("Location"))
		if a.status != http.StatusSeeOther || !strings.HasPrefix(a.header.Get("Location"), land+"?") || q.Get("error") != test.error || q.Get("iss") != e.srv.Issuer() {
			t.Errorf("confirmed, %s = %d %s, want a 303 to %s with %s and iss", test.name, a.status, a.header.Get("Location"), land, test.error)
		}
	}
	if a := deny(id); a.status != http.StatusSeeOther || mustQuery(t, a.header.Get("Location")).Get("error") != "access_denied" {
		t.Errorf("confirmed, deny = %d %s, want a 303 with access_denied", a.status, a.header.Get("Location"))
	}
	// Confirmed is this client's URI: its other registered URI and
	// another client with the same URI are not.
	v := params(id, "response_type", "token")
	v.Set("redirect_uri", "https://attacker.example/other")
	wantPage("confirmed client, unconfirmed URI", e.do(http.MethodGet, PathAuthorize+"?"+v.Encode(), "", ""), http.StatusBadRequest, "unsupported_response_type")
	wantPage("another client with the confirmed URI", e.do(http.MethodGet, PathAuthorize+"?"+params(e.register(land), "response_type", "token").Encode(), "", ""),
		http.StatusBadRequest, "unsupported_response_type")
}

// The confirmed redirect URIs are a bounded set, the least recently used
// going first.
func TestConfirmedRedirectsBounded(t *testing.T) {
	c := newConfirmed(2)
	c.add("a", "https://x/1")
	c.add("b", "https://x/1")
	if !c.has("a", "https://x/1") { // a is now the most recent
		t.Fatal("a not confirmed")
	}
	c.add("c", "https://x/1")
	for _, test := range []struct {
		client string
		want   bool
	}{{"a", true}, {"b", false}, {"c", true}} {
		if got := c.has(test.client, "https://x/1"); got != test.want {
			t.Errorf("has(%q) = %v, want %v", test.client, got, test.want)
		}
	}
}

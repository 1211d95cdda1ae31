package credential_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/fault"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

var t0 = actortest.T0

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// ledger is one test's store, with helpers that write through the ledger
// in one transaction each.
type ledger struct {
	t     *testing.T
	store *memdb.Store
}

func newLedger(t *testing.T) *ledger {
	return &ledger{t: t, store: actortest.NewStore(t)}
}

func (l *ledger) write(fn func(w *memdb.Writer) error) {
	l.t.Helper()
	if err := l.store.Write(fn); err != nil {
		l.t.Fatal(err)
	}
}

// mint mints a provider credential of (thread, instance) at now.
func (l *ledger) mint(thread, instance string, now time.Time, window time.Duration) (*memdb.Credential, string) {
	l.t.Helper()
	var (
		c   *memdb.Credential
		tok string
	)
	l.write(func(w *memdb.Writer) error {
		var err error
		c, tok, err = credential.MintProvider(w, thread, instance, []string{"thread.read"}, now, window)
		return err
	})
	return c, tok
}

func (l *ledger) issue(grant, access string, now time.Time, ttl time.Duration) (*memdb.Credential, string) {
	l.t.Helper()
	var (
		c   *memdb.Credential
		tok string
	)
	l.write(func(w *memdb.Writer) error {
		var err error
		c, tok, err = credential.IssueClient(w, grant, access, "", now, ttl)
		return err
	})
	return c, tok
}

func (l *ledger) row(id string) *memdb.Credential {
	l.t.Helper()
	c, err := l.store.Read().Credential(id)
	if err != nil {
		l.t.Fatalf("Credential(%s) = %v", id, err)
	}
	return c
}

func (l *ledger) thread(id, status string, run *memdb.Run) {
	l.t.Helper()
	l.write(func(w *memdb.Writer) error {
		return w.PutThread(&memdb.Thread{ID: id, Status: status, Run: run, Created: t0})
	})
}

func TestMintProvider(t *testing.T) {
	tests := []struct {
		name        string
		window      time.Duration
		wantExpires time.Time
	}{
		{name: "with a window", window: time.Hour, wantExpires: t0.Add(time.Hour)},
		{name: "no window", window: 0},
		{name: "NoExpiry", window: -1},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			l := newLedger(t)
			c, tok := l.mint("T", "I", t0, test.window)
			if !token.Valid(tok) || token.Hash(tok) != c.TokenHash {
				t.Fatalf("MintProvider token %q does not hash to the row's %q", tok, c.TokenHash)
			}
			want := &memdb.Credential{
				ID: c.ID, TokenHash: c.TokenHash, Kind: memdb.KindProvider, Namespace: principal.ProviderNamespace(c.ID),
				Thread: "T", Instance: "I", Capabilities: []string{"thread.read"},
				Issued: t0, LastLive: t0, Expires: test.wantExpires, State: memdb.StateLive,
			}
			if diff := cmp.Diff(want, l.row(c.ID)); diff != "" {
				t.Errorf("stored row (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(c.ID, "cred_") {
				t.Errorf("id %q, want a cred_ id", c.ID)
			}
		})
	}
}

func TestMintProviderLeavesThePairAlone(t *testing.T) {
	l := newLedger(t)
	old, _ := l.mint("T", "I", t0, time.Hour)
	l.mint("T", "I", t0, time.Hour)
	if got := l.row(old.ID); got.State != memdb.StateLive {
		t.Errorf("a second mint of the pair changed the first: %+v", got)
	}
}

func TestIssueClient(t *testing.T) {
	tests := []struct {
		name        string
		ttl         time.Duration
		wantExpires time.Time
	}{
		{name: "with a ttl", ttl: time.Hour, wantExpires: t0.Add(time.Hour)},
		{name: "no ttl", ttl: 0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			l := newLedger(t)
			c, tok := l.issue("cl_1", memdb.AccessReadOnly, t0, test.ttl)
			if token.Hash(tok) != c.TokenHash {
				t.Fatal("token does not hash to the row's hash")
			}
			want := &memdb.Credential{
				ID: c.ID, TokenHash: c.TokenHash, Kind: memdb.KindClient, Namespace: principal.ClientNamespace("cl_1"),
				Client: "cl_1", Access: memdb.AccessReadOnly,
				Issued: t0, LastLive: t0, Expires: test.wantExpires, State: memdb.StateLive,
			}
			if diff := cmp.Diff(want, l.row(c.ID)); diff != "" {
				t.Errorf("stored row (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRevoke(t *testing.T) {
	tests := []struct {
		name       string
		at         time.Time // when Revoke runs
		already    string    // a reason the row was revoked with before, if any
		reason     string
		wantDone   bool
		wantReason string
		wantAt     time.Time
	}{
		{name: "live", at: t0.Add(time.Minute), reason: credential.ReasonRotated, wantDone: true, wantReason: credential.ReasonRotated, wantAt: t0.Add(time.Minute)},
		{name: "expired records expired", at: t0.Add(2 * time.Hour), reason: credential.ReasonArchived, wantDone: true, wantReason: credential.ReasonExpired, wantAt: t0.Add(2 * time.Hour)},
		{name: "revoked keeps its reason", at: t0.Add(time.Minute), already: credential.ReasonReplaced, reason: credential.ReasonArchived, wantReason: credential.ReasonReplaced, wantAt: t0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			l := newLedger(t)
			c, _ := l.mint("T", "I", t0, time.Hour)
			if test.already != "" {
				l.write(func(w *memdb.Writer) error {
					_, err := credential.Revoke(w, l.row(c.ID), test.already, t0)
					return err
				})
			}
			var done bool
			l.write(func(w *memdb.Writer) error {
				var err error
				done, err = credential.Revoke(w, l.row(c.ID), test.reason, test.at)
				return err
			})
			got := l.row(c.ID)
			if done != test.wantDone || got.State != memdb.StateRevoked || got.RevokeReason != test.wantReason || !got.Revoked.Equal(test.wantAt) {
				t.Errorf("Revoke = %v, row %s %q at %v; want %v, revoked %q at %v", done, got.State, got.RevokeReason, got.Revoked, test.wantDone, test.wantReason, test.wantAt)
			}
		})
	}
}

// states returns each credential id's state and reason, "live" or
// "revoked:<reason>".
func (l *ledger) states(ids ...string) []string {
	l.t.Helper()
	out := make([]string, len(ids))
	for i, id := range ids {
		c := l.row(id)
		out[i] = c.State
		if c.State == memdb.StateRevoked {
			out[i] += ":" + c.RevokeReason
		}
	}
	return out
}

func TestRevokePair(t *testing.T) {
	l := newLedger(t)
	a1, _ := l.mint("T", "A", t0, time.Hour)
	a2, _ := l.mint("T", "A", t0, time.Hour)
	b, _ := l.mint("T", "B", t0, time.Hour)
	other, _ := l.mint("U", "A", t0, time.Hour)
	var revoked []string
	l.write(func(w *memdb.Writer) error {
		var err error
		revoked, err = credential.RevokePair(w, "T", "A", a2.ID, credential.ReasonReplaced, t0)
		return err
	})
	if !slices.Equal(revoked, []string{a1.ID}) {
		t.Errorf("RevokePair revoked %v, want [%s]", revoked, a1.ID)
	}
	want := []string{"revoked:replaced", "live", "live", "live"}
	if got := l.states(a1.ID, a2.ID, b.ID, other.ID); !slices.Equal(got, want) {
		t.Errorf("states of (T,A) old, (T,A) kept, (T,B), (U,A) = %v, want %v", got, want)
	}
}

func TestRevokeThread(t *testing.T) {
	l := newLedger(t)
	a, _ := l.mint("T", "A", t0, time.Hour)
	b, _ := l.mint("T", "B", t0, time.Hour)
	other, _ := l.mint("U", "A", t0, time.Hour)
	var n int
	l.write(func(w *memdb.Writer) error {
		var err error
		n, err = credential.RevokeThread(w, "T", credential.ReasonArchived, t0)
		return err
	})
	want := []string{"revoked:archived", "revoked:archived", "live"}
	if got := l.states(a.ID, b.ID, other.ID); n != 2 || !slices.Equal(got, want) {
		t.Errorf("RevokeThread = %d, states %v; want 2, %v", n, got, want)
	}
}

func TestRevokeExpired(t *testing.T) {
	l := newLedger(t)
	old, _ := l.issue("g", memdb.AccessReadWrite, t0, time.Hour)
	fresh, _ := l.issue("g", memdb.AccessReadWrite, t0.Add(90*time.Minute), time.Hour)
	l.write(func(w *memdb.Writer) error {
		rows, err := w.CredentialsByNamespace(principal.ClientNamespace("g"))
		if err != nil {
			return err
		}
		return credential.RevokeExpired(w, rows, t0.Add(2*time.Hour))
	})
	if got, want := l.states(old.ID, fresh.ID), []string{"revoked:expired", "live"}; !slices.Equal(got, want) {
		t.Errorf("states = %v, want %v", got, want)
	}
}

func TestTouch(t *testing.T) {
	l := newLedger(t)
	live, _ := l.mint("T", "A", t0, time.Hour)
	late, _ := l.mint("T", "B", t0.Add(-2*time.Hour), time.Hour) // expired at t0
	revoked, _ := l.mint("T", "C", t0, time.Hour)
	l.write(func(w *memdb.Writer) error {
		_, err := credential.Revoke(w, l.row(revoked.ID), credential.ReasonRotated, t0)
		return err
	})
	now := t0.Add(30 * time.Minute)
	var n int
	l.write(func(w *memdb.Writer) error {
		var err error
		n, err = credential.Touch(w, "T", now, time.Hour)
		return err
	})
	if n != 1 {
		t.Errorf("Touch refreshed %d, want 1", n)
	}
	if got := l.row(live.ID); !got.Expires.Equal(now.Add(time.Hour)) || !got.LastLive.Equal(now) {
		t.Errorf("live credential after Touch: expires %v, last live %v; want %v, %v", got.Expires, got.LastLive, now.Add(time.Hour), now)
	}
	if got := l.row(late.ID); !got.Expires.Equal(t0.Add(-time.Hour)) {
		t.Errorf("an expired credential came back: expires %v", got.Expires)
	}
}

func TestPruneAndDelete(t *testing.T) {
	l := newLedger(t)
	var ids []string
	for i := range 4 {
		c, _ := l.mint("T", "A", t0, time.Hour)
		ids = append(ids, c.ID)
		if i < 3 {
			l.write(func(w *memdb.Writer) error {
				_, err := credential.Revoke(w, l.row(c.ID), credential.ReasonRotated, t0.Add(time.Duration(i)*time.Minute))
				return err
			})
		}
	}
	l.write(func(w *memdb.Writer) error {
		rows, err := w.CredentialsByThread("T")
		if err != nil {
			return err
		}
		return credential.Prune(w, rows, 1)
	})
	rows, _ := l.store.Read().CredentialsByThread("T")
	var left []string
	for _, c := range rows {
		left = append(left, c.ID)
	}
	slices.Sort(left)
	want := []string{ids[2], ids[3]}
	slices.Sort(want)
	if !slices.Equal(left, want) {
		t.Fatalf("after Prune(1): %v, want the newest revoked and the live one %v", left, want)
	}
	var live int
	l.write(func(w *memdb.Writer) error {
		var err error
		live, err = credential.Delete(w, rows, t0)
		return err
	})
	if rest, _ := l.store.Read().CredentialsByThread("T"); live != 1 || len(rest) != 0 {
		t.Errorf("Delete = %d live, %d rows left; want 1, 0", live, len(rest))
	}
}

func TestNamespaceLive(t *testing.T) {
	l := newLedger(t)
	p, _ := l.mint("T", "A", t0, time.Hour)
	forever, _ := l.mint("T", "B", t0, 0)
	l.issue("g", memdb.AccessReadOnly, t0, time.Hour)
	l.issue("g", memdb.AccessReadOnly, t0.Add(30*time.Minute), time.Hour)
	l.issue("never", memdb.AccessReadOnly, t0, 0)
	// A refresh token without expiry keeps nothing live: it authenticates
	// no request (SPEC §5c).
	l.write(func(w *memdb.Writer) error {
		g := &memdb.ClientGrant{ID: "g", Access: memdb.AccessReadOnly, State: memdb.StateLive}
		key, err := credential.StartFamily(g, "c")
		if err != nil {
			return err
		}
		_, _, err = credential.IssueRefresh(w, g, key, "https://rt/mcp", t0, 0)
		return err
	})
	tests := []struct {
		name      string
		namespace string
		at        time.Time
		wantLive  bool
		wantUntil time.Time
	}{
		{name: "provider", namespace: principal.ProviderNamespace(p.ID), at: t0, wantLive: true, wantUntil: t0.Add(time.Hour)},
		{name: "provider expired", namespace: principal.ProviderNamespace(p.ID), at: t0.Add(time.Hour)},
		{name: "provider without expiry", namespace: principal.ProviderNamespace(forever.ID), at: t0.Add(1000 * time.Hour), wantLive: true},
		{name: "client: the last token", namespace: principal.ClientNamespace("g"), at: t0, wantLive: true, wantUntil: t0.Add(90 * time.Minute)},
		{name: "client: one token left", namespace: principal.ClientNamespace("g"), at: t0.Add(time.Hour), wantLive: true, wantUntil: t0.Add(90 * time.Minute)},
		{name: "client: none left", namespace: principal.ClientNamespace("g"), at: t0.Add(90 * time.Minute)},
		{name: "client without expiry", namespace: principal.ClientNamespace("never"), at: t0.Add(1000 * time.Hour), wantLive: true},
		{name: "unknown credential", namespace: principal.ProviderNamespace("cred_nope"), at: t0},
		{name: "not a namespace", namespace: "cred_" + p.ID, at: t0},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			live, until := credential.NamespaceLive(l.store.Read(), test.namespace, test.at)
			if live != test.wantLive || !until.Equal(test.wantUntil) {
				t.Errorf("NamespaceLive(%s) = %v, %v; want %v, %v", test.namespace, live, until, test.wantLive, test.wantUntil)
			}
		})
	}
}

func TestCheckLive(t *testing.T) {
	l := newLedger(t)
	run := &memdb.Run{ID: "run_1", Instance: "A", Started: t0}
	l.thread("T", memdb.ThreadActive, run)
	l.thread("idle", memdb.ThreadActive, nil)
	l.thread("old", memdb.ThreadArchived, nil)
	a, _ := l.mint("T", "A", t0, time.Hour)
	b, _ := l.mint("T", "B", t0, time.Hour)
	idle, _ := l.mint("idle", "A", t0, time.Hour)
	archived, _ := l.mint("old", "A", t0, time.Hour)
	rw, _ := l.issue("rw", memdb.AccessReadWrite, t0, time.Hour)
	ro, _ := l.issue("ro", memdb.AccessReadOnly, t0, time.Hour)
	tests := []struct {
		name   string
		caller principal.Principal
		at     time.Time
		want   error
	}{
		{name: "the run's instance", caller: credential.Principal(a), at: t0},
		{name: "the run's instance, expired", caller: credential.Principal(a), at: t0.Add(time.Hour), want: fault.ErrNotLive},
		{name: "another instance", caller: credential.Principal(b), at: t0, want: fault.ErrNotLive},
		{name: "another instance claiming the run's", caller: func() principal.Principal { p := credential.Principal(b); p.Instance = "A"; return p }(), at: t0, want: fault.ErrNotLive},
		{name: "no run", caller: credential.Principal(idle), at: t0, want: fault.ErrNotLive},
		{name: "archived thread", caller: credential.Principal(archived), at: t0, want: fault.ErrNotLive},
		{name: "unknown credential", caller: principal.Principal{Kind: principal.KindProvider, CredentialID: "cred_nope"}, at: t0, want: fault.ErrNotLive},
		{name: "read-write client", caller: credential.Principal(rw), at: t0},
		{name: "read-only client", caller: credential.Principal(ro), at: t0, want: fault.ErrReadOnly},
		{name: "read-only client claiming read-write", caller: func() principal.Principal { p := credential.Principal(ro); p.Access = memdb.AccessReadWrite; return p }(), at: t0, want: fault.ErrReadOnly},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			err := credential.CheckLive(l.store.Read(), test.caller, test.at)
			if (test.want == nil) != (err == nil) || (test.want != nil && !errors.Is(err, test.want)) {
				t.Errorf("CheckLive = %v, want %v", err, test.want)
			}
		})
	}
}

// authCase is one credential of authFixture: its row and its token.
type authCase struct {
	row *memdb.Credential
	tok string
}

// authFixture is a ledger at t0 with one credential in each state a token
// can be judged in: a live provider (A), an expired one (B), a revoked one
// (C, rotated), one revoked after it expired (D, recorded expired), and a
// live client token.
func authFixture(t *testing.T) (l *ledger, live, expired, rotated, lapsed, cl authCase) {
	l = newLedger(t)
	live.row, live.tok = l.mint("T", "A", t0, time.Hour)
	expired.row, expired.tok = l.mint("T", "B", t0.Add(-2*time.Hour), time.Hour)
	rotated.row, rotated.tok = l.mint("T", "C", t0, time.Hour)
	lapsed.row, lapsed.tok = l.mint("T", "D", t0.Add(-2*time.Hour), time.Hour)
	cl.row, cl.tok = l.issue("g", memdb.AccessReadOnly, t0, time.Hour)
	l.write(func(w *memdb.Writer) error {
		if _, err := credential.Revoke(w, l.row(rotated.row.ID), credential.ReasonRotated, t0); err != nil {
			return err
		}
		_, err := credential.Revoke(w, l.row(lapsed.row.ID), credential.ReasonArchived, t0) // records expired
		return err
	})
	return l, live, expired, rotated, lapsed, cl
}

func TestAuthenticate(t *testing.T) {
	l, live, expired, rotated, lapsed, cl := authFixture(t)
	unknown, _ := token.New()
	tests := []struct {
		name       string
		tok        string
		want       principal.Principal
		wantReason string
	}{
		{name: "live provider", tok: live.tok, want: credential.Principal(live.row)},
		{name: "live client", tok: cl.tok, want: credential.Principal(cl.row)},
		{name: "malformed", tok: "mcprt_short", wantReason: credential.AuthMalformed},
		{name: "unknown", tok: unknown, wantReason: credential.AuthUnknown},
		{name: "revoked", tok: rotated.tok, wantReason: credential.AuthRevoked},
		{name: "revoked after it expired", tok: lapsed.tok, wantReason: credential.AuthExpired},
		{name: "expired", tok: expired.tok, wantReason: credential.AuthExpired},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			got, err := credential.Authenticate(l.store.Read(), test.tok, t0)
			if test.wantReason == "" {
				if err != nil {
					t.Fatalf("Authenticate = %v", err)
				}
				if diff := cmp.Diff(test.want, got); diff != "" {
					t.Errorf("principal (-want +got):\n%s", diff)
				}
				return
			}
			ae, ok := errors.AsType[*credential.AuthError](err)
			if !ok || ae.Reason != test.wantReason || !errors.Is(err, fault.ErrUnauthenticated) {
				t.Errorf("Authenticate = %v, want an AuthError %q matching ErrUnauthenticated", err, test.wantReason)
			}
		})
	}
}

// TestDead: a principal's row judged again by id gives the reason
// Authenticate gives its token, at the same instant.
func TestDead(t *testing.T) {
	l, live, expired, rotated, lapsed, cl := authFixture(t)
	tests := []struct {
		name, id, tok, want string
	}{
		{name: "live provider", id: live.row.ID, tok: live.tok},
		{name: "live client", id: cl.row.ID, tok: cl.tok},
		{name: "revoked", id: rotated.row.ID, tok: rotated.tok, want: credential.AuthRevoked},
		{name: "revoked after it expired", id: lapsed.row.ID, tok: lapsed.tok, want: credential.AuthExpired},
		{name: "expired", id: expired.row.ID, tok: expired.tok, want: credential.AuthExpired},
		{name: "removed", id: "cred_nope", want: credential.AuthUnknown},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := credential.Dead(l.store.Read(), test.id, t0); got != test.want {
				t.Errorf("Dead(%s) = %q, want %q", test.id, got, test.want)
			}
			if test.tok == "" {
				return
			}
			reason := ""
			if _, err := credential.Authenticate(l.store.Read(), test.tok, t0); err != nil {
				ae, _ := errors.AsType[*credential.AuthError](err)
				reason = ae.Reason
			}
			if reason != test.want {
				t.Errorf("Authenticate of its token: reason %q, Dead %q: the two judgements differ", reason, test.want)
			}
		})
	}
}

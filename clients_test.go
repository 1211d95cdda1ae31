package mcpruntime_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

// issueClient issues a client grant and returns its token and principal.
func issueClient(t *testing.T, rt *mcpruntime.Runtime, label, access string) (mcpruntime.ClientToken, mcpruntime.Principal) {
	t.Helper()
	ct, err := rt.IssueClient(context.Background(), label, access)
	if err != nil {
		t.Fatalf("IssueClient(%q, %q) = %v", label, access, err)
	}
	return ct, assertLive(t, rt, "client "+label, ct.Token)
}

// TestIssueClient: a grant's token authenticates as the grant, in its own
// namespace, with its access level and no thread scope.
func TestIssueClient(t *testing.T) {
	for _, access := range []string{memdb.AccessReadOnly, memdb.AccessReadWrite} {
		t.Run(access, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			ct, p := issueClient(t, rt, "ide", access)
			if ct.ClientID == "" {
				t.Fatal("IssueClient returned no client id")
			}
			if p.Provider() || p.Kind != memdb.KindClient || p.Client != ct.ClientID || p.Access != access ||
				p.Namespace != "client:"+ct.ClientID || p.Thread != "" || p.Instance != "" {
				t.Fatalf("client principal = %+v, want client %s with %s access in namespace client:%s", p, ct.ClientID, access, ct.ClientID)
			}
			other, po := issueClient(t, rt, "other", access)
			if other.ClientID == ct.ClientID || po.Namespace == p.Namespace {
				t.Fatalf("two grants share id or namespace: %+v, %+v", p, po)
			}
		})
	}
}

// TestRefreshClient: a refreshed token shares the grant's namespace; the
// previous tokens stay valid unless revokePrevious.
func TestRefreshClient(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, p1 := issueClient(t, rt, "ide", memdb.AccessReadWrite)

	tok2, err := rt.RefreshClient(ctx, ct.ClientID, false)
	noErr(t, err)
	if tok2 == ct.Token {
		t.Fatal("RefreshClient returned the same token")
	}
	p2 := assertLive(t, rt, "refreshed token", tok2)
	if p2.Namespace != p1.Namespace || p2.Client != ct.ClientID || p2.Access != p1.Access {
		t.Fatalf("refreshed principal = %+v, want the namespace and access of %+v", p2, p1)
	}
	if p2.CredentialID == p1.CredentialID {
		t.Fatalf("refreshed token has the same credential id %s", p1.CredentialID)
	}
	assertLive(t, rt, "first token after a plain refresh", ct.Token)

	tok3, err := rt.RefreshClient(ctx, ct.ClientID, true)
	noErr(t, err)
	p3 := assertLive(t, rt, "token refreshed with revokePrevious", tok3)
	if p3.Namespace != p1.Namespace {
		t.Fatalf("namespace after refresh = %q, want %q", p3.Namespace, p1.Namespace)
	}
	assertReason(t, rt, "first token after revokePrevious", ct.Token, mcpruntime.AuthRevoked)
	assertReason(t, rt, "second token after revokePrevious", tok2, mcpruntime.AuthRevoked)
}

// TestClientTokenTTL: every client token expires ClientTokenTTL after it was
// issued, each on its own schedule; the default is 24 h and NoExpiry never
// expires.
func TestClientTokenTTL(t *testing.T) {
	t.Run("configured", func(t *testing.T) {
		ctx := context.Background()
		clk := newFakeClock()
		rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, ClientTokenTTL: time.Hour})
		ct, p := issueClient(t, rt, "ide", memdb.AccessReadOnly)
		if want := clk.Now().Add(time.Hour); !p.Expires.Equal(want) {
			t.Fatalf("Expires = %v, want %v", p.Expires, want)
		}
		clk.Advance(40 * time.Minute)
		tok2, err := rt.RefreshClient(ctx, ct.ClientID, false)
		noErr(t, err)
		clk.Advance(20*time.Minute - time.Nanosecond)
		assertLive(t, rt, "first token just before its expiry", ct.Token)
		clk.Advance(time.Nanosecond)
		assertReason(t, rt, "first token at its expiry", ct.Token, mcpruntime.AuthExpired)
		assertLive(t, rt, "refreshed token, issued 20 min ago", tok2)
		clk.Advance(40 * time.Minute)
		assertReason(t, rt, "refreshed token at its expiry", tok2, mcpruntime.AuthExpired)
		// The grant outlives its tokens: it can still be refreshed.
		tok3, err := rt.RefreshClient(ctx, ct.ClientID, false)
		noErr(t, err)
		assertLive(t, rt, "token issued after the others expired", tok3)
	})
	t.Run("default", func(t *testing.T) {
		clk := newFakeClock()
		rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now})
		ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
		clk.Advance(24*time.Hour - time.Nanosecond)
		assertLive(t, rt, "just inside 24 h", ct.Token)
		clk.Advance(time.Nanosecond)
		assertReason(t, rt, "at 24 h", ct.Token, mcpruntime.AuthExpired)
	})
	t.Run("NoExpiry", func(t *testing.T) {
		clk := newFakeClock()
		rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, ClientTokenTTL: mcpruntime.NoExpiry})
		ct, p := issueClient(t, rt, "ide", memdb.AccessReadOnly)
		if !p.Expires.IsZero() {
			t.Fatalf("Expires = %v, want zero (never)", p.Expires)
		}
		clk.Advance(100 * 365 * 24 * time.Hour)
		assertLive(t, rt, "a century later", ct.Token)
	})
}

// TestRevokeClient: revoking a grant kills all of its tokens and the grant
// itself; other grants are untouched.
func TestRevokeClient(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
	tok2, err := rt.RefreshClient(ctx, ct.ClientID, false)
	noErr(t, err)
	tok3, err := rt.RefreshClient(ctx, ct.ClientID, false)
	noErr(t, err)
	other, _ := issueClient(t, rt, "other", memdb.AccessReadWrite)

	noErr(t, rt.RevokeClient(ctx, ct.ClientID))
	for what, tok := range map[string]string{"first": ct.Token, "second": tok2, "third": tok3} {
		assertDead(t, rt, what+" token after RevokeClient", tok)
	}
	assertLive(t, rt, "another grant's token", other.Token)
	if _, err := rt.RefreshClient(ctx, ct.ClientID, false); !errors.Is(err, mcpruntime.ErrUnknownClient) {
		t.Fatalf("RefreshClient after revoke = %v, want ErrUnknownClient", err)
	}
	if err := rt.RevokeClient(ctx, ct.ClientID); !errors.Is(err, mcpruntime.ErrUnknownClient) {
		t.Fatalf("second RevokeClient = %v, want ErrUnknownClient", err)
	}
	for _, c := range rt.ClientTokens(ct.ClientID) {
		if c.State == memdb.StateLive {
			t.Fatalf("credential %s of the revoked grant is still live", c.ID)
		}
	}
}

// TestClientErrors: unknown grants and bad arguments.
func TestClientErrors(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	if _, err := rt.RefreshClient(ctx, "cl_nope", false); !errors.Is(err, mcpruntime.ErrUnknownClient) {
		t.Fatalf("RefreshClient(unknown) = %v, want ErrUnknownClient", err)
	}
	if err := rt.RevokeClient(ctx, "cl_nope"); !errors.Is(err, mcpruntime.ErrUnknownClient) {
		t.Fatalf("RevokeClient(unknown) = %v, want ErrUnknownClient", err)
	}
	tests := []struct {
		name, label, access string
	}{
		{"empty access", "ide", ""},
		{"unknown access", "ide", "admin"},
		{"access in upper case", "ide", "READ-ONLY"},
		{"label too long", strings.Repeat("x", 257), memdb.AccessReadOnly},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if ct, err := rt.IssueClient(ctx, test.label, test.access); !errors.Is(err, mcpruntime.ErrInvalidArgument) {
				t.Fatalf("IssueClient(%d-byte label, %q) = %+v, %v; want ErrInvalidArgument", len(test.label), test.access, ct, err)
			}
		})
	}
	if n := rt.Stats().Clients; n != 0 {
		t.Fatalf("refused IssueClient calls left %d grants", n)
	}
}

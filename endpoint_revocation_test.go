package mcpruntime_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// The runtime's revocations and expiries as the MCP endpoint shows them:
// every way a token dies ends the streams opened under it, its calls, and
// the sessions of a namespace left with no live credential; nothing of
// another principal's.

// revocation is a way to end a token: setup returns the token and the call
// that revokes it; sessionEnds says whether its MCP sessions end too (a
// refresh with revokePrevious keeps the grant's namespace live).
type revocation struct {
	name        string
	setup       func(t *testing.T, rt *mcpruntime.Runtime) (tok string, revoke func() error)
	sessionEnds bool
}

func revocations() []revocation {
	ctx := context.Background()
	return []revocation{
		{"release provider session", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ps, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.ReleaseProviderSession(ctx, ps.ID) }
		}, true},
		{"archive thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.Archive(ctx, "T") }
		}, true},
		{"delete thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.DeleteThread(ctx, "T") }
		}, true},
		{"rotate", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }
		}, true},
		{"revoke client", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token, func() error { return rt.RevokeClient(ctx, ct.ClientID) }
		}, true},
		{"refresh client revoking previous", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token, func() error { _, err := rt.RefreshClient(ctx, ct.ClientID, true); return err }
		}, false},
	}
}

// bystander is a session of another thread and another grant, with open
// streams, that no revocation of the test touches.
type bystander struct {
	provTok, provSID string
	provStream       *ht.Stream
	clientTok, cSID  string
	clientStream     *ht.Stream
}

func newBystander(t *testing.T, rt *mcpruntime.Runtime, e *mcpEnv) *bystander {
	t.Helper()
	b := &bystander{}
	_, b.provTok = openMinted(t, rt, "U", "A")
	b.provSID = e.Initialize(b.provTok)
	b.provStream = e.Stream(b.provTok, b.provSID)
	ct, _ := issueClient(t, rt, "bystander", memdb.AccessReadOnly)
	b.clientTok = ct.Token
	b.cSID = e.Initialize(b.clientTok)
	b.clientStream = e.Stream(b.clientTok, b.cSID)
	return b
}

func (b *bystander) check(t *testing.T, e *mcpEnv) {
	t.Helper()
	if !b.provStream.IsOpen() || !b.clientStream.IsOpen() {
		t.Fatalf("a bystander's stream ended: provider %v, client %v", !b.provStream.IsOpen(), !b.clientStream.IsOpen())
	}
	e.WantPing("bystander provider session", b.provTok, b.provSID)
	e.WantPing("bystander client session", b.clientTok, b.cSID)
}

// TestHTTPStreamClosesOnRevoke: the standalone stream opened under a token
// ends once the call that revokes the token returned, for every way of
// revoking one (SPEC §3: within 1 s; the server tells it inside the call,
// see wantEnd); other principals' streams stay open. Keep-alives come every
// 25 s and nothing else is sent: only the revocation can end the stream.
func TestHTTPStreamClosesOnRevoke(t *testing.T) {
	for _, test := range revocations() {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T", "U")
			tok, revoke := test.setup(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{}) // keep-alives every 25 s: they cannot end the stream
			by := newBystander(t, rt, e)
			sid := e.Initialize(tok)
			st := e.Stream(tok, sid)

			noErr(t, revoke())
			st.WantEnd(t, test.name)
			if test.sessionEnds {
				waitSessionGone(t, rt, test.name, sid)
			} else if !hasRecord(rt, sid) {
				t.Fatalf("%s ended session %s", test.name, sid)
			}
			by.check(t, e)
		})
	}
}

// TestHTTPStreamProgressResponseClosesOnRevoke: a tools/call answered as
// an event stream is a stream opened under the caller's token too: its
// context is cancelled by the time the revocation returned — the stream's
// credential watch runs inside the revoking write, so this is checked
// without waiting — and the stream then ends. (A refresh that revokes the
// previous token leaves the grant's session: only the stream's own watch
// can end its call.)
func TestHTTPStreamProgressResponseClosesOnRevoke(t *testing.T) {
	for _, test := range revocations() {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T", "U")
			calls := registerCtxTool(t, rt, "block_progress")
			tok, revoke := test.setup(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.Initialize(tok)
			st, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody("11", "block_progress", `"p"`)))
			if st == nil {
				t.Fatalf("tools/call with progress = %s, want 200 text/event-stream", res)
			}
			var call context.Context
			select {
			case call = <-calls:
			case <-time.After(hangAfter): // detects a hang only
				t.Fatal("the tool never started")
			}
			ht.WaitUntil(t, "first progress event", func() bool {
				return slices.ContainsFunc(st.Snapshot(), func(l string) bool { return strings.Contains(l, "notifications/progress") })
			})

			noErr(t, revoke())
			if call.Err() == nil {
				t.Fatalf("%s returned, and the streaming call's context is live", test.name)
			}
			st.WantEnd(t, test.name)
		})
	}
}

// registerCtxTool registers a read tool name that reports progress (its
// answer becomes an event stream), then hands its context to the test on
// the returned channel and runs until that context is done.
func registerCtxTool(t *testing.T, rt *mcpruntime.Runtime, name string) <-chan context.Context {
	t.Helper()
	calls := make(chan context.Context, 16)
	noErr(t, rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: name},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			call.Progress(1, 0, "started")
			calls <- ctx
			<-ctx.Done()
			return nil, ctx.Err()
		},
	}))
	return calls
}

// TestHTTPStreamClosesOnExpiry: a credential that expires (no turn within
// its liveness window) closes the streams opened under it, with no request
// and no revoke call to trigger it, and the session, whose namespace has no
// live credential left, ends. The clock is fake, so the credential cannot
// expire while the test sets up, however slow the machine; the liveness
// monitor's timer wakes on real time, a window apart, and reads the clock.
func TestHTTPStreamClosesOnExpiry(t *testing.T) {
	const window = 50 * time.Millisecond
	clk := newFakeClock()
	rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: window})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tok := openMinted(t, rt, "T", "A")
	p := assertLive(t, rt, "fresh credential", tok)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{}) // keep-alives every 25 s: they cannot end the stream
	sid := e.Initialize(tok)
	st := e.Stream(tok, sid)

	clk.Advance(p.Expires.Sub(clk.Now()) - time.Nanosecond)
	e.WantPing("a nanosecond before the expiry", tok, sid)
	if !st.IsOpen() {
		t.Fatal("stream ended before its credential expired")
	}
	clk.Advance(time.Nanosecond)
	st.WantEnd(t, "expiry")
	waitSessionGone(t, rt, "expiry", sid)
	ht.Want401(t, "request after expiry", e.Post(tok, sid, `{"jsonrpc":"2.0","id":1,"method":"ping"}`), `Bearer error="invalid_token"`)
}

// TestHTTPOwnerRevokedCredential: once the call that revokes a token
// returns, every request with it gets 401 invalid_token (SPEC §3
// linearizability, §5 step 2), with the body any bad token gets; the
// sessions it owned end and their records go.
func TestHTTPOwnerRevokedCredential(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		// setup returns the token that owns a session and the call that
		// revokes it.
		setup func(t *testing.T, rt *mcpruntime.Runtime) (tok string, revoke func() error)
	}{
		{"release provider session", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ps, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.ReleaseProviderSession(ctx, ps.ID) }
		}},
		{"archive thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.Archive(ctx, "T") }
		}},
		{"delete thread", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { return rt.DeleteThread(ctx, "T") }
		}},
		{"rotate", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() error { _, err := rt.Rotate(ctx, "T", "A"); return err }
		}},
		{"revoke client", func(t *testing.T, rt *mcpruntime.Runtime) (string, func() error) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
			return ct.Token, func() error { return rt.RevokeClient(ctx, ct.ClientID) }
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			tok, revoke := test.setup(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.Initialize(tok)
			e.WantPing("before revocation", tok, sid)

			noErr(t, revoke())
			badToken := e.Post("not-a-real-token", sid, ht.PingBody)
			ht.Want401(t, "unknown token", badToken, ht.InvalidToken)
			for _, k := range sessionRequests {
				res := k.Do(e.Client, tok, sid)
				ht.Want401(t, k.Name+" after revocation", res, ht.InvalidToken)
				if string(res.Body) != string(badToken.Body) {
					t.Fatalf("%s after revocation: body %q, an unknown token's %q; want identical", k.Name, res.Body, badToken.Body)
				}
			}
			// Without a session id too: initialize creates nothing.
			ht.Want401(t, "initialize after revocation", e.Post(tok, "", ht.InitBody(ht.LatestVersion)), ht.InvalidToken)
			waitSessionGone(t, rt, "owner revoked", sid)
			ht.WaitUntil(t, "session count back to 0", func() bool { return e.srv.Sessions() == 0 })
		})
	}
}

// TestHTTPOwnerExpiredCredential: a token past its window (fake clock)
// gets 401 invalid_token on every method.
func TestHTTPOwnerExpiredCredential(t *testing.T) {
	const window = time.Hour
	tests := []struct {
		name  string
		token func(t *testing.T, rt *mcpruntime.Runtime) string
	}{
		{"provider credential", func(t *testing.T, rt *mcpruntime.Runtime) string {
			_, tok := openMinted(t, rt, "T", "A")
			return tok
		}},
		{"client token", func(t *testing.T, rt *mcpruntime.Runtime) string {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token
		}},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			clk := newFakeClock()
			rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, CredentialWindow: window, ClientTokenTTL: window})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			tok := test.token(t, rt)
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.Initialize(tok)
			clk.Advance(window - time.Second)
			e.WantPing("just inside the window", tok, sid)

			clk.Advance(2 * time.Second)
			for _, k := range sessionRequests {
				ht.Want401(t, k.Name+" after expiry", k.Do(e.Client, tok, sid), ht.InvalidToken)
			}
			ht.Want401(t, "initialize after expiry", e.Post(tok, "", ht.InitBody(ht.LatestVersion)), ht.InvalidToken)
		})
	}
}

// TestHTTPOwnerRotatedCredential: a rotated credential is a new principal
// (SPEC §2): the new token gets 404 on the old credential's session, the
// same answer as for a made-up id, and can start its own.
func TestHTTPOwnerRotatedCredential(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, tokOld := openMinted(t, rt, "T", "A")
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.Initialize(tokOld)

	cred, err := rt.Rotate(ctx, "T", "A")
	noErr(t, err)
	tokNew := bearer(t, cred.Authorization)
	for _, k := range sessionRequests {
		got := k.Do(e.Client, tokNew, sid)
		ht.WantStatus(t, "rotated "+k.Name+" on the old session", got, http.StatusNotFound)
		ht.SameAsUnknown(t, "rotated "+k.Name+" on the old session", got, k.Do(e.Client, tokNew, ht.MadeUpSessionID))
	}
	own := e.Initialize(tokNew)
	e.WantPing("rotated token on its own session", tokNew, own)
}

// TestHTTPOwnerRefreshedClientToken: a refreshed client-grant token shares
// the grant's namespace and keeps its sessions (SPEC §2 "trusted
// refresh"), also after the previous tokens are revoked.
func TestHTTPOwnerRefreshedClientToken(t *testing.T) {
	ctx := context.Background()
	rt := quietRuntime(t, mcpruntime.Config{})
	ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.Initialize(ct.Token)

	tok2, err := rt.RefreshClient(ctx, ct.ClientID, false)
	noErr(t, err)
	for _, k := range sessionRequests {
		if k.Name == "DELETE" {
			continue
		}
		ht.WantStatus(t, "refreshed token "+k.Name, k.Do(e.Client, tok2, sid), k.Owner)
	}
	e.WantPing("first token after refresh", ct.Token, sid)

	tok3, err := rt.RefreshClient(ctx, ct.ClientID, true)
	noErr(t, err)
	e.WantPing("token refreshed with revokePrevious", tok3, sid)
	ht.Want401(t, "first token after revokePrevious", e.Post(ct.Token, sid, ht.PingBody), ht.InvalidToken)
	ht.Want401(t, "second token after revokePrevious", e.Post(tok2, sid, ht.PingBody), ht.InvalidToken)
	if !hasRecord(rt, sid) {
		t.Fatalf("session %s ended on a refresh with revokePrevious", sid)
	}
	ht.WantStatus(t, "DELETE with the newest token", e.Del(tok3, sid), http.StatusNoContent)
	ht.WantStatus(t, "ping after DELETE", e.Post(tok3, sid, ht.PingBody), http.StatusNotFound)
}

// TestHTTPReleaseEndsCallsInFlight: releasing the provider session whose
// credential owns an MCP session revokes that credential: a call in flight
// on the session has its context cancelled and, in JSON mode, answers the
// session's 404, as a request arriving now would; the session ends.
func TestHTTPReleaseEndsCallsInFlight(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "A")
	tool := registerBlockingTool(t, rt, "block", false)
	e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
	sid := e.Initialize(tok)
	call := e.AsyncPost(tok, sid, ht.CallBody(`"c-1"`, "block", ""))
	tool.WaitStarted(t, "blocking call")
	e.WantPing("while the call is in flight", tok, sid)
	unknown := e.Post(tok, ht.MadeUpSessionID, ht.PingBody)

	noErr(t, rt.ReleaseProviderSession(context.Background(), ps.ID))
	tool.WantCancelled(t, "release provider session")
	ht.SameAsUnknown(t, "the call whose session ended", call.Await(t, "the call"), unknown)
	waitSessionGone(t, rt, "release provider session", sid)
}

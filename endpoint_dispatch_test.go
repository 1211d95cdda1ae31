package mcpruntime_test

import (
	"context"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// dispatchBodies are the messages a held POST carries: every kind the
// endpoint dispatches.
var dispatchBodies = ht.DispatchBodies(`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"thread_list","arguments":{}}}`)

// TestHTTPDispatchRevokedWhileBodyArrives: authentication counts at
// dispatch (SPEC §5 step 0). A POST is admitted on its headers, its token
// is revoked while the last byte of its body is held back — a fresh
// request already gets 401 — and when the byte arrives the held request
// gets 401 too, whatever it carries: it is never served.
func TestHTTPDispatchRevokedWhileBodyArrives(t *testing.T) {
	ctx := context.Background()
	const window = time.Hour
	revocations := []struct {
		name string
		// token returns a live token; revoke makes it fail.
		token func(t *testing.T, rt *mcpruntime.Runtime) (tok string, revoke func())
	}{
		{"client refresh with revokePrevious", func(t *testing.T, rt *mcpruntime.Runtime) (string, func()) {
			ct, _ := issueClient(t, rt, "ide", memdb.AccessReadWrite)
			return ct.Token, func() {
				_, err := rt.RefreshClient(ctx, ct.ClientID, true)
				noErr(t, err)
			}
		}},
		{"rotate", func(t *testing.T, rt *mcpruntime.Runtime) (string, func()) {
			_, tok := openMinted(t, rt, "T", "A")
			return tok, func() {
				_, err := rt.Rotate(ctx, "T", "A")
				noErr(t, err)
			}
		}},
		{"client token expiry", nil}, // filled in below: it needs the clock
	}
	for _, rev := range revocations {
		for _, msg := range dispatchBodies {
			t.Run(rev.name+"/"+msg.Name, func(t *testing.T) {
				clk := newFakeClock()
				rt := quietRuntime(t, mcpruntime.Config{Now: clk.Now, ClientTokenTTL: window})
				registerInproc(t, rt, "A")
				createThreads(t, rt, "T")
				token := rev.token
				if token == nil {
					token = func(t *testing.T, rt *mcpruntime.Runtime) (string, func()) {
						ct, _ := issueClient(t, rt, "ide", memdb.AccessReadOnly)
						return ct.Token, func() { clk.Advance(window + time.Second) }
					}
				}
				tok, revoke := token(t, rt)
				e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
				sid := ""
				if msg.OnSession {
					sid = e.Initialize(tok)
				}
				held := e.HoldPost(ht.Headers(tok, sid), msg.Body, 1)
				e.waitInFlight("admitted on its headers", transport.InFlight{Requests: 1, BodyBytes: int64(len(msg.Body))})

				revoke()
				ht.Want401(t, "a fresh request after the revocation", e.Post(tok, sid, ht.PingBody), ht.InvalidToken)
				res := held.Finish()
				ht.Want401(t, "the held "+msg.Name+" once its body is in", res, ht.InvalidToken)
				ht.WantErrorWithoutID(t, "the held "+msg.Name, res)
				if !msg.OnSession {
					if recs := mcpRecords(t, rt); len(recs) != 0 {
						t.Fatalf("sessions %v after a refused initialize, want none", recs)
					}
				}
			})
		}
	}
}

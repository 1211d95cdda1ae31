package mcpruntime_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
	"github.com/agenthost/mcpruntime/memdb"
)

// dispatchBodies are the messages a held POST carries: every kind the
// endpoint dispatches. onSession: the message names the test's session.
var dispatchBodies = []struct {
	name      string
	body      string
	onSession bool
}{
	{"ping", pingBody, true},
	{"tools/list", toolsListBody, true},
	{"tools/call thread_list", `{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"thread_list","arguments":{}}}`, true},
	{"notification", initializedBody, true},
	{"response", `{"jsonrpc":"2.0","id":99,"result":{}}`, true},
	{"initialize", initBody(latestVersion), false},
}

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
			t.Run(rev.name+"/"+msg.name, func(t *testing.T) {
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
				if msg.onSession {
					sid = e.initialize(tok)
				}
				held := e.holdPost(mcpHeaders(tok, sid), msg.body, 1)
				e.waitInFlight("admitted on its headers", mcphttp.InFlight{Requests: 1, BodyBytes: int64(len(msg.body))})

				revoke()
				want401(t, "a fresh request after the revocation", e.post(tok, sid, pingBody), invalidToken)
				res := held.finish()
				want401(t, "the held "+msg.name+" once its body is in", res, invalidToken)
				wantErrorWithoutID(t, "the held "+msg.name, res)
				if !msg.onSession {
					if recs := mcpRecords(t, rt); len(recs) != 0 {
						t.Fatalf("sessions %v after a refused initialize, want none", recs)
					}
				}
			})
		}
	}
}

// TestHTTPDispatchSessionEndedWhileBodyArrives: the owner check counts at
// dispatch too. A POST on a session is admitted on its headers, the session
// is DELETEd while its body is held back, and the held request then gets
// the same 404 as a made-up session id, whatever it carries.
func TestHTTPDispatchSessionEndedWhileBodyArrives(t *testing.T) {
	for _, msg := range dispatchBodies {
		if !msg.onSession {
			continue
		}
		t.Run(msg.name, func(t *testing.T) {
			rt := quietRuntime(t, mcpruntime.Config{})
			registerInproc(t, rt, "A")
			createThreads(t, rt, "T")
			_, tok := openMinted(t, rt, "T", "A")
			e := newMCPEnv(t, rt, mcpruntime.MCPOptions{})
			sid := e.initialize(tok)
			held := e.holdPost(mcpHeaders(tok, sid), msg.body, 1)
			e.waitInFlight("admitted on its headers", mcphttp.InFlight{Requests: 1, BodyBytes: int64(len(msg.body))})

			wantStatus(t, "DELETE", e.del(tok, sid), http.StatusNoContent)
			res := held.finish()
			wantStatus(t, "the held "+msg.name, res, http.StatusNotFound)
			sameAsUnknown(t, "the held "+msg.name, res, e.post(tok, madeUpSessionID, msg.body))
		})
	}
}

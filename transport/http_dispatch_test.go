package transport_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// dispatchBodies are the messages a held POST carries: every kind the
// endpoint dispatches.
var dispatchBodies = ht.DispatchBodies(whoamiCall)

// TestHTTPDispatchRevokedWhileBodyArrives: authentication counts at
// dispatch (SPEC §5 step 0). A POST is admitted on its headers; its
// credential is revoked, removed or expires while the last byte of its body
// is held back — a fresh request already gets 401 — and when the byte
// arrives the held request gets 401 too, whatever it carries: it is never
// served. The runtime's ways of revoking are the root's
// TestHTTPDispatchRevokedWhileBodyArrives.
func TestHTTPDispatchRevokedWhileBodyArrives(t *testing.T) {
	const window = time.Hour
	kills := []struct {
		name string
		kill func(f *fake, id string)
	}{
		{"revoked", func(f *fake, id string) { f.revoke(id) }},
		{"removed", func(f *fake, id string) { f.remove(id) }},
		{"expired", func(f *fake, _ string) { f.clock.Advance(window + time.Second) }},
	}
	for _, k := range kills {
		for _, msg := range dispatchBodies {
			t.Run(k.name+"/"+msg.Name, func(t *testing.T) {
				f := newFake(t)
				tok, id := f.client("ide", memdb.AccessReadOnly, window)
				e := newMCPEnv(t, f, transport.Options{})
				sid := ""
				if msg.OnSession {
					sid = e.Initialize(tok)
				}
				held := e.HoldPost(ht.Headers(tok, sid), msg.Body, 1)
				e.waitInFlight("admitted on its headers", transport.InFlight{Requests: 1, BodyBytes: int64(len(msg.Body))})

				k.kill(f, id)
				ht.Want401(t, "a fresh request after it", e.Post(tok, sid, ht.PingBody), ht.InvalidToken)
				res := held.Finish()
				ht.Want401(t, "the held "+msg.Name+" once its body is in", res, ht.InvalidToken)
				ht.WantErrorWithoutID(t, "the held "+msg.Name, res)
				if !msg.OnSession {
					if recs := mcpRecords(t, f); len(recs) != 0 {
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
		if !msg.OnSession {
			continue
		}
		t.Run(msg.Name, func(t *testing.T) {
			f := newFake(t)
			_, tok := openMinted(t, f, "T", "A")
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.Initialize(tok)
			held := e.HoldPost(ht.Headers(tok, sid), msg.Body, 1)
			e.waitInFlight("admitted on its headers", transport.InFlight{Requests: 1, BodyBytes: int64(len(msg.Body))})

			ht.WantStatus(t, "DELETE", e.Del(tok, sid), http.StatusNoContent)
			res := held.Finish()
			ht.WantStatus(t, "the held "+msg.Name, res, http.StatusNotFound)
			ht.SameAsUnknown(t, "the held "+msg.Name, res, e.Post(tok, ht.MadeUpSessionID, msg.Body))
		})
	}
}

package transport_test

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/names"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// closeOnEviction is an Observer that closes the endpoint when a session is
// evicted for the namespace cap: from inside the initialize that evicts it,
// between the new session's Reserve and its Commit.
type closeOnEviction struct {
	srv *transport.Server
}

func (*closeOnEviction) Request(string, string, int, time.Duration) {}
func (*closeOnEviction) AuthFailure(string)                         {}
func (*closeOnEviction) SessionOpened()                             {}
func (*closeOnEviction) Refused(string)                             {}
func (*closeOnEviction) Forward(string)                             {}

func (o *closeOnEviction) SessionClosed(reason string) {
	if reason == "cap" {
		o.srv.Close()
	}
}

// sessionActors counts the MCP session actors alive in sys.
func sessionActors(sys *actor.ActorSystem) int {
	n := 0
	for _, bucket := range sys.ProcessRegistry.LocalPIDs.LocalPIDs {
		for _, id := range bucket.Keys() {
			if strings.HasPrefix(id, names.MCPSession("")) {
				n++
			}
		}
	}
	return n
}

// TestInitializeCommittingAfterCloseEndsItsSession: an initialize whose
// slot was reserved before the endpoint's Close, and that commits after
// it, must not leave a session behind — Close did not see it, so nobody
// else would end it. It answers 503 (the endpoint is closing) and its
// session ends: no actor, no ownership record, no slot. The initialize
// evicts the namespace's only session (one per namespace), and ending that
// session closes the endpoint, so Close lands in the window every time.
func TestInitializeCommittingAfterCloseEndsItsSession(t *testing.T) {
	f := newFake(t)
	tok, _ := f.provider("T", "A", 0)
	sys := actortest.NewSystem(t)
	obs := &closeOnEviction{}
	srv := transport.New(f, f.store, sys, transport.Options{
		MaxSessionsPerNamespace: 1, Observer: obs, Logger: slog.New(slog.DiscardHandler),
	}, transport.Host{Now: f.clock.Now})
	obs.srv = srv
	c := ht.New(t, srv)
	first := c.Initialize(tok)

	res := c.Post(tok, "", ht.InitBody(ht.LatestVersion))
	if res.Status != http.StatusServiceUnavailable {
		t.Fatalf("initialize committing after Close = %s, want 503 (closing)", res)
	}
	if sid := res.Header.Get("Mcp-Session-Id"); sid != "" {
		t.Errorf("initialize committing after Close named session %s", sid)
	}
	ht.WaitUntil(t, "every session actor stopped", func() bool { return sessionActors(sys) == 0 })
	if got := srv.Sessions(); got != 0 {
		t.Errorf("Sessions() = %d after Close, want 0", got)
	}
	if recs := mcpRecords(t, f); len(recs) != 0 {
		t.Errorf("ownership records %v after Close, want none (the evicted %s included)", recs, first)
	}
}

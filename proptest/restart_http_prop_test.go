package proptest

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"pgregory.net/rapid"
)

// The HTTP machine on a state file (SPEC §3.8): TestHTTPMachineDurable
// interleaves the lifecycle machine's Restart and Crash with every HTTP
// action, so that the endpoint's promises — foreign and unknown sessions
// answer alike, mutations need the active run, revoked tokens stay out,
// OAuth sign-ins and refresh tokens of a grant — hold on a restarted
// runtime. A restart also ends what lives in the process only: the MCP
// sessions (their old ids are then the unknown session's 404, byte for
// byte), their asks, the listen streams (ended as a shutdown ends them,
// with their requests' results), and the 2026-07-28 request states given
// before it (refused as a made-up state is). TestConcurrentMachineDurable
// runs the concurrent machine's batches on a state file, without restarts:
// group commit keeps them linearizable.

// durableHTTPChecks: how many checks the durable HTTP machine and the
// durable concurrent machine run when -rapid.checks (or RAPID_CHECKS) is not
// given explicitly.
const durableHTTPChecks = 15

// newDurableHTTPMachine is the HTTP machine on a state file in a temporary
// directory.
func newDurableHTTPMachine(t *rapid.T) *httpMachine {
	dir, err := os.MkdirTemp("", "prop-state-")
	if err != nil {
		t.Fatalf("MkdirTemp: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) }) // last: after the runtime's Close
	path := filepath.Join(dir, "state.db")
	h := newHTTPMachineOn(t, path)
	h.durable = &durableState{dir: dir, path: path, gone: map[string]bool{}}
	return h
}

func durableHTTPProp(t *rapid.T) {
	h := newDurableHTTPMachine(t)
	actions := weighted(rapid.StateMachineActions(h), httpWeight)
	actions["Restart"] = func(t *rapid.T) { h.restartHTTP(t, h.restart) }
	actions["Crash"] = func(t *rapid.T) { h.restartHTTP(t, h.crash) }
	t.Repeat(actions)
	h.finish(t)
}

// TestHTTPMachineDurable runs the HTTP state machine on a state file, with
// Restart and Crash among its actions.
func TestHTTPMachineDurable(t *testing.T) {
	rapid.Check(t, limited(explicitOr(durableHTTPChecks), durableHTTPProp))
}

func durableConcurrentProp(t *rapid.T) {
	h := newDurableHTTPMachine(t)
	actions := rapid.StateMachineActions(h)
	actions["Batch"] = h.batch
	t.Repeat(weighted(actions, concurrentWeight))
	h.finish(t)
}

// TestConcurrentMachineDurable runs the concurrent state machine on a state
// file: every batch's answers must still be explained by some sequential
// order.
func TestConcurrentMachineDurable(t *testing.T) {
	rapid.Check(t, limited(explicitOr(durableHTTPChecks), durableConcurrentProp))
}

// restartHTTP is a Restart or a Crash (how) of the HTTP machine. Before
// the old runtime closes, its listen streams are ended as a shutdown does
// (finishListens). Afterwards the endpoint is a new one of the same
// options behind the same listener; every MCP session of before is gone,
// and every request state of before is refused.
func (h *httpMachine) restartHTTP(t *rapid.T, how func(*rapid.T)) {
	h.finishListens(t)
	how(t)
	for _, s := range h.mcp.sessions {
		s.deleted = true // gone with its process: 404 to everyone, its owner too
	}
	for _, st := range h.states {
		st.used = true // refused, as a used one is
	}
	ep, err := h.rt.MCPHandler(h.opts)
	if err != nil {
		t.Fatalf("MCPHandler after the restart: %v", err)
	}
	h.ep, h.srv = ep, ep
	h.handler.h.Store(ep)
	h.statsSeen = -1
	registerAskTool(t, h.rt)
	registerAskPostTool(t, h.rt)
	// An MCP session of before, asked for by a token of its owner that is
	// still live (a client grant's), is the unknown session's 404; the
	// newest few, and any later action may name any of them.
	for _, s := range h.mcp.sessions[max(0, len(h.mcp.sessions)-3):] {
		for _, c := range h.m.creds {
			if !h.m.live(c) || h.m.principal(c).Namespace != s.owner {
				continue
			}
			call := fmt.Sprintf("after the restart, GET of session %s by its owner", s.id)
			h.exchange(t, call, http.MethodGet, caller{token: c.token}, s.id, func() []byte { return nil }, http.StatusNotFound)
			break
		}
	}
}

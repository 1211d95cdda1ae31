package proptest

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// TestBatchExplainsPostAnswered404: a call whose session ends under it gets
// the session's 404 (SPEC §5.2) whether or not its tool had run to the end,
// so a post answered 404 by a session that a DELETE of its batch ended may
// have happened. On a loaded run the concurrent machine took such a 404 for
// a call with no effect, then found the message in the runtime's thread:
// "the orders that explain the batch's answers ... all leave a state the
// runtime does not show". That interleaving (the tool returns, the DELETE
// ends the session, the handler finds its call cancelled) cannot be forced
// from outside, so here the post and the DELETE run one after the other and
// the post's answer is the one the race gave: the checker must explain the
// batch by the order post, DELETE.
func TestBatchExplainsPostAnswered404(t *testing.T) {
	rapid.Check(t, limited(1, func(rt *rapid.T) {
		h := newHTTPMachine(rt)
		if err := h.m.createThread("t0", "i0"); err != nil {
			rt.Fatal(err)
		}
		if _, err := h.rt.CreateThread(h.ctx, "t0", mcpruntime.ThreadOptions{Instance: "i0"}); err != nil {
			rt.Fatal(err)
		}
		out := h.m.predictOpen("t0", "i0")
		ps, err := h.rt.OpenProviderSession(h.ctx, "t0", "i0")
		if err != nil {
			rt.Fatal(err)
		}
		tok := strings.TrimPrefix(ps.Authorization, "Bearer ")
		h.m.applyOpen("t0", "i0", out, ps.ID, ps.CredentialID, tok)
		if err := h.m.predictStartRun("t0", "i0"); err != nil {
			rt.Fatal(err)
		}
		run, err := h.rt.StartRun(h.ctx, "t0", "i0")
		if err != nil {
			rt.Fatal(err)
		}
		h.m.applyStartRun("t0", "i0", run)
		who := caller{token: tok}
		h.issued++
		init := h.do(http.MethodPost, who, "", initializeBody(h.nextID()))
		sid := init.header.Get("Mcp-Session-Id")
		if init.err != nil || init.status != http.StatusOK || sid == "" {
			rt.Fatalf("initialize = %d %s %v", init.status, init.body, init.err)
		}
		h.mcp.add(sid, h.m.principal(h.m.credOf(tok)).Namespace)

		h.texts++
		text := fmt.Sprintf("batch message %d", h.texts)
		post := h.httpOp("tools/call thread_post", "post", http.MethodPost, who, sid,
			callBody(h.nextID(), "thread_post", map[string]string{"text": text}),
			func(w world, c *modelCred) toolOutcome { return applyPost(w.m, c, "", text) }, text)
		post.callSID = sid
		del := h.httpOp("DELETE", "delete", http.MethodDelete, who, sid, nil, nil, "")
		del.deleteSID = sid
		post.deleteRacing = true

		if got := post.run().(result); got.err != nil || got.status != http.StatusOK || !h.posted(text) {
			rt.Fatalf("post = %d %s %v, want its message stored", got.status, got.body, got.err)
		}
		post.obs = result{reply: reply{status: http.StatusNotFound, body: []byte(`{"jsonrpc":"2.0","error":{"code":-32001,"message":"session not found"}}`)}}
		if del.obs = del.run(); del.obs.(result).status != http.StatusNoContent {
			rt.Fatalf("DELETE = %d", del.obs.(result).status)
		}
		h.settle(rt)

		ops := []*cop{post, del}
		var found []explained
		if _, ok := h.explain([]world{{m: h.m, mcp: h.mcp}}, ops, make([]bool, len(ops)), nil, &found); !ok {
			var why strings.Builder
			for _, e := range found {
				fmt.Fprintf(&why, "\n  %q: %s", e.order, e.why)
			}
			rt.Fatalf("a post answered 404 by a session its batch DELETEd, with its message stored, is not explained:%s", why.String())
		}
	}))
}

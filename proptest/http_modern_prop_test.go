package proptest

import (
	"encoding/json"
	"fmt"
	"net/http"

	"pgregory.net/rapid"
)

// The HTTP machine's 2026-07-28 actions (SPEC §6.9–11): stateless
// tools/calls interleaved with the sessions, on the same tokens and
// namespaces, racing nothing but the machine's own revoke, switch, archive
// and rotate actions. Each carries a session id drawn like a session
// request's (its own, a foreign one, a made-up one or none), which must
// change nothing: the answer is the model's for the token alone, and the
// session checks of Check (invariant 7) see no session created or ended.

// modernCallBody is callBody with the 2026-07-28 _meta.
func modernCallBody(id int, tool string, args map[string]string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": map[string]any{
		"name": tool, "arguments": args,
		"_meta": map[string]any{"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": map[string]any{}},
	}})
	return b
}

// modernCall is one stateless tools/call: 401 for a token that is not
// live at dispatch (invariant 1), else 200 and the model's outcome
// whatever the session id (invariants 2, 10).
func (h *httpMachine) modernCall(t *rapid.T, tool string, args map[string]string, predict func(c *modelCred) toolOutcome) {
	who := h.genCaller(t)
	sid := h.genSession(t, who)
	call := fmt.Sprintf("modern tools/call %s %v (%v, stale session %q)", tool, args, who, sid)
	want, c := admit(h.m, h.mcp, who, "")
	var before any
	if sid != "" {
		before = h.record(sid)
	}
	var out toolOutcome
	var mayMutate bool
	if want == 0 {
		want = http.StatusOK
		mayMutate = h.m.mayMutate(c)
		out = predict(c)
	}
	extra := http.Header{"Mcp-Protocol-Version": {"2026-07-28"}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {tool}}
	r := h.doWith(http.MethodPost, who, sid, modernCallBody(h.nextID(), tool, args), extra)
	if r.err != nil {
		t.Fatalf("%s: %v", call, r.err)
	}
	h.issued++
	h.settle(t)
	if r.status != want {
		t.Fatalf("%s = %d %s, want %d", call, r.status, r.body, want)
	}
	if r.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("%s echoed a session id", call)
	}
	if sid != "" && fmt.Sprint(before) != fmt.Sprint(h.record(sid)) {
		t.Fatalf("%s changed session %s's record", call, sid)
	}
	if r.status != http.StatusOK {
		return
	}
	checkTool(t, call, r.body, out)
	if tool == "thread_post" && !out.isError && !mayMutate {
		t.Fatalf("%s succeeded for a caller that is not live", call)
	}
}

// ModernCallRead calls thread_read statelessly.
func (h *httpMachine) ModernCallRead(t *rapid.T) {
	target := h.genTarget(t)
	args := map[string]string{}
	if target != "" {
		args["threadId"] = target
	}
	h.modernCall(t, "thread_read", args, func(c *modelCred) toolOutcome { return predictRead(h.m, c, target) })
}

// ModernCallPost calls thread_post statelessly.
func (h *httpMachine) ModernCallPost(t *rapid.T) {
	target := h.genTarget(t)
	h.texts++
	text := fmt.Sprintf("modern message %d", h.texts)
	args := map[string]string{"text": text}
	if target != "" {
		args["threadId"] = target
	}
	h.modernCall(t, "thread_post", args, func(c *modelCred) toolOutcome { return applyPost(h.m, c, target, text) })
}

package proptest

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"pgregory.net/rapid"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The HTTP machine's request states (SPEC §5a.6, §6.11): 2026-07-28
// tools/calls of the two asking tools — ask_confirm (read) and ask_post
// (mutate: it posts once the client confirmed, and only on a retry that
// brings its sealed state back) — whose first round answers input_required
// with a requestState. ModernRetry retries a state the machine was given:
// as the token it was given to, another of the namespace, another
// namespace's, a dead or made-up one; as it is, altered, or for other
// arguments; once or again. The model says what each retry gets: 401 for a
// token that is not live (a revocation between the rounds refuses the
// retry as any revoked token is refused), the tool's answer for a state
// that opens for this namespace, tool and arguments, unexpired and unused
// — which uses it, whatever the tool then answers —, and otherwise the
// answer a malformed state gets, byte for byte, leaving the state as it
// was. ask_post's post happens exactly when the model's post does, for a
// caller the model says may mutate (invariant 6).

const (
	askPostTool  = "ask_post"
	askPostState = "confirm-post" // the backend state ask_post asks with
	// testStateTTL is the HTTP machine's MCPOptions.RequestStateTTL:
	// within the credentials' window and past some of the clock's steps,
	// so that some retries come too late for a token still live.
	testStateTTL = 15 * time.Minute
	// madeUpState is no state the endpoint sealed.
	madeUpState = "bm90LWEtc3RhdGU"
)

// registerAskPostTool registers ask_post on rt: asked with no sealed state
// of its own, it asks the client to confirm; retried with it and a
// confirmation, it posts text to threadId ("" the caller's own thread),
// checked as thread_post is.
func registerAskPostTool(t *rapid.T, rt *mcpruntime.Runtime) {
	err := rt.RegisterTool(mcpruntime.Tool{
		Tool: mcp.Tool{Name: askPostTool, Description: "posts once the client confirmed",
			InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","minLength":1},"threadId":{"type":"string","minLength":1}},"required":["text"],"additionalProperties":false}`)},
		Access:       mcpruntime.AccessMutate,
		AllowClients: true,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			ans, ok := call.Input("ok")
			if call.State() != askPostState || !ok {
				return mcpruntime.InputRequired(mcp.InputRequestMap{"ok": &mcp.ElicitParams{
					Message:         "Post?",
					RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"ok": map[string]any{"type": "boolean"}}, "required": []string{"ok"}},
				}}, askPostState), nil
			}
			if r, _ := ans.(*mcp.ElicitResult); r == nil || r.Content["ok"] != true {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "declined"}}}, nil
			}
			var args struct {
				Text     string `json:"text"`
				ThreadID string `json:"threadId"`
			}
			if err := json.Unmarshal(call.Arguments, &args); err != nil {
				return nil, err
			}
			m, err := call.Runtime().Post(ctx, call.Caller, args.ThreadID, args.Text)
			if err != nil {
				return nil, err
			}
			return &mcp.CallToolResult{Content: []mcp.Content{}, StructuredContent: map[string]any{"seq": m.Seq, "author": m.Author}}, nil
		},
	})
	if err != nil {
		t.Fatalf("RegisterTool(%s): %v", askPostTool, err)
	}
}

// modelState is one requestState the endpoint gave the machine. It names
// its holder by token and namespace, never by a pointer into the model.
type modelState struct {
	token  string // the token it was given to
	ns     string
	tool   string
	args   map[string]string
	sealed string
	issued time.Time
	used   bool
}

// modernAnswer is what the machine reads of a modern tools/call's answer.
type modernAnswer struct {
	status     int
	rpcError   int // a JSON-RPC error's code
	resultType string
	tool       toolOutcome // isError, the refusal's code, ask_post's seq and author
	text       string      // the first text block of a result without structuredContent
	asks       bool        // input_required asking "ok"
}

func parseModern(status int, body []byte) (modernAnswer, string, error) {
	out := modernAnswer{status: status}
	var resp struct {
		Error  *struct{ Code int }
		Result *struct {
			ResultType        string                     `json:"resultType"`
			IsError           bool                       `json:"isError"`
			StructuredContent json.RawMessage            `json:"structuredContent"`
			Content           []struct{ Text string }    `json:"content"`
			InputRequests     map[string]json.RawMessage `json:"inputRequests"`
			RequestState      string                     `json:"requestState"`
		}
	}
	if status == http.StatusUnauthorized {
		return out, "", nil
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		return out, "", fmt.Errorf("body %s: %v", body, err)
	}
	switch {
	case resp.Error != nil:
		out.rpcError = resp.Error.Code
		return out, "", nil
	case resp.Result == nil:
		return out, "", fmt.Errorf("body %s is neither a result nor an error", body)
	}
	r := resp.Result
	out.resultType = r.ResultType
	out.asks = r.InputRequests["ok"] != nil
	if len(r.StructuredContent) > 0 {
		tool, err := parseTool(fmt.Appendf(nil, `{"result":{"isError":%v,"structuredContent":%s}}`, r.IsError, r.StructuredContent))
		if err != nil {
			return out, "", err
		}
		out.tool = tool
	} else {
		out.tool.isError = r.IsError
		if len(r.Content) > 0 {
			out.text = r.Content[0].Text
		}
	}
	return out, r.RequestState, nil
}

// modernToolBody is a modern tools/call of tool with args, caps and, when
// retry, inputResponses answering ok and the requestState state (omitted
// when "").
func modernToolBody(id int, tool string, args map[string]string, caps map[string]any, retry bool, ok bool, state string) []byte {
	params := map[string]any{"name": tool, "arguments": args, "_meta": modernMeta(caps)}
	if retry {
		params["inputResponses"] = map[string]any{"ok": map[string]any{"action": "accept", "content": map[string]any{"ok": ok}}}
		if state != "" {
			params["requestState"] = state
		}
	}
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
	return b
}

func modernToolHeader(tool string) http.Header {
	return http.Header{"Mcp-Protocol-Version": {modernProto}, "Mcp-Method": {"tools/call"}, "Mcp-Name": {tool}}
}

// firstRound is what a round of tool without a state of its own answers c
// in the model: ask_post refuses a read-only grant and an empty text first
// (its class, then its schema); then the tool asks, which a client that
// did not declare elicitation gets as -32021.
func firstRound(c *modelCred, tool string, args map[string]string, elicits bool) modernAnswer {
	ok := modernAnswer{status: http.StatusOK, resultType: "complete"}
	if tool == askPostTool {
		switch {
		case c.kind == kindClient && c.access != readWrite:
			ok.tool = toolOutcome{isError: true, code: mcpruntime.CodeCapabilityDenied}
			return ok
		case args["text"] == "":
			ok.tool = toolOutcome{isError: true, code: mcpruntime.CodeInvalidArguments}
			return ok
		}
	}
	if !elicits {
		return modernAnswer{status: http.StatusBadRequest, rpcError: -32021}
	}
	return modernAnswer{status: http.StatusOK, resultType: "input_required", asks: true}
}

// askArgs draws the arguments of a first round of tool.
func (h *httpMachine) askArgs(t *rapid.T, tool string) map[string]string {
	if tool == askTool {
		return map[string]string{}
	}
	h.texts++
	args := map[string]string{"text": fmt.Sprintf("confirmed message %d", h.texts)}
	if rapid.IntRange(0, 9).Draw(t, "emptyText") == 0 {
		args["text"] = ""
	}
	if target := h.genTarget(t); target != "" {
		args["threadId"] = target
	}
	return args
}

// ModernAsk is the first round of an asking tool, by any token.
func (h *httpMachine) ModernAsk(t *rapid.T) {
	who := h.genCaller(t)
	tool := rapid.SampledFrom([]string{askTool, askPostTool}).Draw(t, "tool")
	args := h.askArgs(t, tool)
	caps := map[string]any{"elicitation": map[string]any{}}
	elicits := rapid.IntRange(0, 9).Draw(t, "undeclared") > 0
	if !elicits {
		caps = nil
	}
	call := fmt.Sprintf("modern tools/call %s %v, first round (%v, elicitation declared %v)", tool, args, who, elicits)
	want := modernAnswer{status: http.StatusUnauthorized}
	st, c := admit(h.m, h.mcp, who, "")
	if st == 0 {
		want = firstRound(c, tool, args, elicits)
	}
	got, sealed := h.modernExchange(t, call, who, tool, modernToolBody(h.nextID(), tool, args, caps, false, false, ""))
	if got != want {
		t.Fatalf("%s = %+v, want %+v", call, got, want)
	}
	if got.resultType == "input_required" {
		h.addState(t, call, c, tool, args, sealed)
	}
}

// addState records a state the endpoint gave c.
func (h *httpMachine) addState(t *rapid.T, call string, c *modelCred, tool string, args map[string]string, sealed string) {
	if sealed == "" {
		t.Fatalf("%s: input_required without a requestState", call)
	}
	for _, s := range h.states {
		if s.sealed == sealed {
			t.Fatalf("%s: requestState %q was given before", call, sealed)
		}
	}
	h.states = append(h.states, &modelState{token: c.token, ns: h.m.principal(c).Namespace, tool: tool, args: args, sealed: sealed, issued: h.m.now})
}

// modernExchange sends one modern tools/call of tool and waits until the
// endpoint finished it.
func (h *httpMachine) modernExchange(t *rapid.T, call string, who caller, tool string, body []byte) (modernAnswer, string) {
	t.Helper()
	r := h.modernSend(t, call, who, tool, body)
	got, sealed, err := parseModern(r.status, r.body)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	return got, sealed
}

func (h *httpMachine) modernSend(t *rapid.T, call string, who caller, tool string, body []byte) reply {
	t.Helper()
	r := h.doWith(http.MethodPost, who, "", body, modernToolHeader(tool))
	if r.err != nil {
		t.Fatalf("%s: %v", call, r.err)
	}
	h.issued++
	h.settle(t)
	if r.header.Get("Mcp-Session-Id") != "" {
		t.Fatalf("%s echoed a session id", call)
	}
	return r.reply
}

// ModernRetry retries a state the machine was given.
func (h *httpMachine) ModernRetry(t *rapid.T) {
	if len(h.states) == 0 {
		t.Skip("no requestState given yet")
	}
	if rapid.IntRange(0, 3).Draw(t, "late") == 0 {
		// To the last minute of a state's life, or past it.
		h.advance(t, rapid.SampledFrom([]time.Duration{testStateTTL - time.Minute, time.Minute}).Draw(t, "by"))
	}
	// Mostly a state not used yet: one used is refused whatever else.
	var unused []*modelState
	for _, st := range h.states {
		if !st.used {
			unused = append(unused, st)
		}
	}
	st := pick(t, "state", h.states)
	if len(unused) > 0 && rapid.IntRange(0, 3).Draw(t, "unused") > 0 {
		st = pick(t, "unusedState", unused)
	}
	who := caller{token: st.token}
	// Another live token of the state's namespace (a client grant's
	// refreshed one), or of another namespace.
	var same, other []*modelCred
	for _, c := range h.m.creds {
		switch {
		case !h.m.live(c) || c.token == st.token:
		case h.m.principal(c).Namespace == st.ns:
			same = append(same, c)
		default:
			other = append(other, c)
		}
	}
	switch n := rapid.IntRange(0, 9).Draw(t, "retrier"); {
	case n < 2:
		who = h.genCaller(t)
	case n < 4 && len(same) > 0:
		who = caller{token: pick(t, "sameNamespace", same).token}
	case n < 6 && len(other) > 0:
		who = caller{token: pick(t, "otherNamespace", other).token}
	}
	sealed := st.sealed
	altered := false
	switch rapid.IntRange(0, 9).Draw(t, "variant") {
	case 0:
		b := []byte(sealed)
		i := rapid.IntRange(0, len(b)-1).Draw(t, "flip")
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		sealed, altered = string(b), true
	case 1:
		sealed, altered = sealed+"A", true
	case 2:
		sealed = "" // answers without a state: a first round with them
	}
	args := st.args
	if st.tool == askPostTool && rapid.IntRange(0, 3).Draw(t, "otherArgs") == 0 {
		args = maps.Clone(st.args)
		args["text"] += " (other)"
	}
	ok := rapid.Bool().Draw(t, "ok")
	caps := map[string]any{"elicitation": map[string]any{}}
	id := h.nextID()
	call := fmt.Sprintf("modern tools/call %s %v, retry (%v, state of %s given %v, altered %v, no state %v, ok %v)",
		st.tool, args, who, st.ns, st.issued.Format(time.TimeOnly), altered, sealed == "", ok)

	want := modernAnswer{status: http.StatusUnauthorized}
	refused := false
	var mayMutate bool
	adm, c := admit(h.m, h.mcp, who, "")
	switch {
	case adm != 0:
	case sealed == "":
		want = firstRound(c, st.tool, args, true)
		if st.tool == askTool {
			want = modernAnswer{status: http.StatusOK, resultType: "complete", text: fmt.Sprintf("confirmed %v", ok)}
		}
	case altered || st.used || h.m.principal(c).Namespace != st.ns || !maps.Equal(args, st.args) || !h.m.now.Before(st.issued.Add(testStateTTL)):
		refused = true
		want = modernAnswer{status: http.StatusBadRequest, rpcError: -32602}
	default:
		st.used = true // used, whatever the tool now answers
		want = modernAnswer{status: http.StatusOK, resultType: "complete"}
		switch {
		case st.tool == askTool:
			want.text = fmt.Sprintf("confirmed %v", ok)
		case !ok:
			want.text = "declined"
		default:
			mayMutate = h.m.mayMutate(c)
			want.tool = applyPost(h.m, c, args["threadId"], args["text"])
		}
	}
	r := h.modernSend(t, call, who, st.tool, modernToolBody(id, st.tool, args, caps, true, ok, sealed))
	got, fresh, err := parseModern(r.status, r.body)
	if err != nil {
		t.Fatalf("%s: %v", call, err)
	}
	if got != want {
		t.Fatalf("%s = %+v %s, want %+v", call, got, r.body, want)
	}
	if got.resultType == "input_required" {
		h.addState(t, call, c, st.tool, args, fresh)
	}
	if st.tool == askPostTool && got.tool.author != "" && !mayMutate {
		t.Fatalf("%s posted for a caller that is not live", call)
	}
	if refused {
		// Invariant 11: the answer of a state no namespace was given, byte
		// for byte (headers other than Date too).
		twin := h.modernSend(t, call+" with a made-up state", who, st.tool, modernToolBody(id, st.tool, args, caps, true, ok, madeUpState))
		sameAnswer(t, call, r, twin)
	}
}

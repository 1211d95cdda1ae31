package transport_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// askState is the state "ask" returns with its question: long enough that
// no sealed state contains it by chance.
const askState = "backend-private-state-of-ask"

// asking registers "ask": with no answer it asks the client for a name
// (state askState); with one it answers "hello <name>, state <State>".
func asking(f *fake) {
	f.serveTool("ask", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		if r, ok := req.InputResponses["name"].(*mcp.ElicitResult); ok {
			return transport.Response{Result: textResult("hello " + r.Content["name"].(string) + ", state " + req.State)}
		}
		return transport.Response{InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "name?", RequestedSchema: map[string]any{"type": "object"}}}, State: askState}
	})
}

// askBody is modernBody from a client that declares what the tools here
// ask for: elicitation and roots.
func askBody(id, method, rest string) string {
	return `{"jsonrpc":"2.0","id":` + id + `,"method":"` + method + `","params":{` + rest + `,` + modernMeta(`{"elicitation":{},"roots":{}}`) + `}}`
}

type inputResult struct {
	ResultType    string                     `json:"resultType"`
	InputRequests map[string]json.RawMessage `json:"inputRequests"`
	RequestState  string                     `json:"requestState"`
	Content       []struct{ Text string }    `json:"content"`
}

// askOnce sends ask's first round with arguments args and returns its
// requestState.
func askOnce(t *testing.T, e *mcpEnv, tok, args string) string {
	t.Helper()
	res := e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "ask"), askBody("1", "tools/call", `"name":"ask","arguments":`+args))
	var a struct{ Result inputResult }
	if err := json.Unmarshal(res.Body, &a); err != nil || a.Result.ResultType != "input_required" || a.Result.InputRequests["name"] == nil || a.Result.RequestState == "" {
		t.Fatalf("first round = %s, want input_required asking name with a requestState", res)
	}
	return a.Result.RequestState
}

// retry is ask's second round with state and arguments args.
func retry(e *mcpEnv, tok, args, state string) *ht.Result {
	st, _ := json.Marshal(state)
	return e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "ask"), askBody("2", "tools/call",
		`"name":"ask","arguments":`+args+`,"inputResponses":{"name":{"action":"accept","content":{"name":"Alice"}}},"requestState":`+string(st)))
}

// TestHTTPModernRequestState: SPEC §5a.6 — an input_required result's
// requestState is sealed by the endpoint: its retry gets the backend's
// State back with the answers; the same state again (replayed), altered,
// presented by another namespace, for other arguments, or expired gets
// the answer a malformed one gets, byte for byte.
func TestHTTPModernRequestState(t *testing.T) {
	f, tok, other := twoCredentials(t)
	asking(f)
	e := newMCPEnv(t, f, transport.Options{RequestStateTTL: time.Minute})
	state := askOnce(t, e, tok, `{"a":1,"b":2}`)
	if strings.Contains(state, askState) {
		t.Fatalf("requestState %q shows the backend's state", state)
	}
	// The same arguments in another order are the same arguments.
	res := retry(e, tok, `{"b":2, "a":1}`, state)
	var a struct{ Result inputResult }
	if err := json.Unmarshal(res.Body, &a); err != nil || a.Result.ResultType != "complete" || len(a.Result.Content) != 1 || a.Result.Content[0].Text != "hello Alice, state "+askState {
		t.Fatalf("retry = %s, want complete: hello Alice, state %s", res, askState)
	}
	malformed := retry(e, tok, `{"a":1,"b":2}`, "not a state")
	ht.WantStatus(t, "a malformed state", malformed, http.StatusBadRequest)
	if a := malformed.RPC(t); a.Error == nil || a.Error.Code != -32602 {
		t.Fatalf("a malformed state = %s, want -32602", malformed)
	}
	altered := askOnce(t, e, tok, `{}`)
	b := []byte(altered)
	b[len(b)/2] ^= 1
	foreign := askOnce(t, e, tok, `{}`)
	otherArgs := askOnce(t, e, tok, `{}`)
	expired := askOnce(t, e, tok, `{}`)
	cases := []struct {
		name      string
		tok, args string
		state     string
		before    func()
	}{
		{"replayed", tok, `{"a":1,"b":2}`, state, nil},
		{"altered", tok, `{}`, string(b), nil},
		{"suffixed", tok, `{}`, altered + "-TAMPERED", nil},
		{"another namespace's", other, `{}`, foreign, nil},
		{"for other arguments", tok, `{"a":2}`, otherArgs, nil},
		{"expired", tok, `{}`, expired, func() { f.clock.Advance(time.Minute) }},
	}
	for _, c := range cases {
		if c.before != nil {
			c.before()
		}
		got := retry(e, c.tok, c.args, c.state)
		if got.Status != malformed.Status || !bytes.Equal(got.Body, malformed.Body) {
			t.Fatalf("%s state = %s, want the malformed one's answer %s", c.name, got, malformed)
		}
	}
	// A first-round-shaped call with answers but no state (the revision's
	// stateless round) reaches the backend with them, decoded by shape; an
	// answer that is not an object is refused.
	res = e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "ask"), askBody("3", "tools/call",
		`"name":"ask","arguments":{},"inputResponses":{"name":{"action":"accept","content":{"name":"Bob"}},"extra":{"x":1}}`))
	if !strings.Contains(string(res.Body), "hello Bob, state ") {
		t.Fatalf("answers without a state = %s, want hello Bob", res)
	}
	res = e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "ask"), askBody("4", "tools/call", `"name":"ask","arguments":{},"inputResponses":{"name":12345}`))
	if a := res.RPC(t); res.Status != 400 || a.Error == nil || a.Error.Code != -32602 {
		t.Fatalf("a non-object answer = %s, want 400 -32602", res)
	}
}

// TestHTTPModernAnswersChecked: SPEC §5a.6 — a retry's answers reach the
// backend only for what its sealed round asked, and an accepted form's
// content only if it validates against the requested schema, as in a
// session (§5b.20): an invalid or unasked answer counts as none, so the
// handler asks again. A requested schema that does not compile is the
// handler's fault: -32603, no state handed out.
func TestHTTPModernAnswersChecked(t *testing.T) {
	f := newFake(t)
	tok, _ := f.provider("T", "A", 0)
	schema := map[string]any{"type": "object", "properties": map[string]any{"age": map[string]any{"type": "integer", "minimum": 0}}, "required": []string{"age"}}
	f.serveTool("ask", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		var got []string
		for k, v := range req.InputResponses {
			got = append(got, fmt.Sprintf("%s=%+v", k, v))
		}
		if len(got) > 0 {
			slices.Sort(got)
			return transport.Response{Result: textResult(strings.Join(got, " "))}
		}
		return transport.Response{InputRequests: mcp.InputRequestMap{
			"form":  &mcp.ElicitParams{Message: "age?", RequestedSchema: schema},
			"roots": &mcp.ListRootsParams{},
		}}
	})
	f.serveTool("bad_schema", func(context.Context, *transport.Request, json.RawMessage) transport.Response {
		return transport.Response{InputRequests: mcp.InputRequestMap{"form": &mcp.ElicitParams{Message: "?", RequestedSchema: map[string]any{"type": 12}}}}
	})
	e := newMCPEnv(t, f, transport.Options{})
	call := func(id, name, rest string) *ht.Result {
		return e.Do(http.MethodPost, modernHeaders(tok, "tools/call", name), askBody(id, "tools/call", `"name":"`+name+`","arguments":{}`+rest))
	}
	first := func() string {
		var a struct{ Result inputResult }
		res := call("1", "ask", "")
		if err := json.Unmarshal(res.Body, &a); err != nil || a.Result.ResultType != "input_required" {
			t.Fatalf("first round = %s, want input_required", res)
		}
		st, _ := json.Marshal(a.Result.RequestState)
		return string(st)
	}
	for _, c := range []struct {
		name, answers, want string
	}{
		{"valid", `{"form":{"action":"accept","content":{"age":7}}}`, `form=&{Meta:map[] Action:accept Content:map[age:7]}`},
		{"declined", `{"form":{"action":"decline"}}`, `form=&{Meta:map[] Action:decline Content:map[]}`},
		{"not a form answer's shape beside a valid roots one", `{"form":{"roots":[]},"roots":{"roots":[]}}`, `roots=&{Meta:map[] Roots:[]}`},
		{"invalid content", `{"form":{"action":"accept","content":{"age":-1}}}`, ""},
		{"missing content", `{"form":{"action":"accept"}}`, ""},
		{"an action MCP does not define", `{"form":{"action":"maybe","content":{"age":7}}}`, ""},
		{"a key not asked", `{"other":{"action":"accept","content":{"age":7}}}`, ""},
	} {
		res := call("2", "ask", `,"inputResponses":`+c.answers+`,"requestState":`+first())
		var a struct{ Result inputResult }
		if err := json.Unmarshal(res.Body, &a); err != nil {
			t.Fatalf("%s: %s", c.name, res)
		}
		switch {
		case c.want == "" && a.Result.ResultType != "input_required":
			t.Errorf("%s: retry = %s, want input_required again (no valid answer)", c.name, res)
		case c.want != "" && (a.Result.ResultType != "complete" || len(a.Result.Content) != 1 || a.Result.Content[0].Text != c.want):
			t.Errorf("%s: retry = %s, want complete: %s", c.name, res, c.want)
		}
	}
	res := call("3", "bad_schema", "")
	if a := res.RPC(t); a.Error == nil || a.Error.Code != -32603 || !strings.Contains(a.Error.Message, "elicitation schema is invalid") || strings.Contains(string(res.Body), "requestState") {
		t.Fatalf("a handler's invalid schema = %s, want -32603 naming it", res)
	}
}

// TestHTTPModernMissingCapability: SPEC §5a — a handler that asks what
// the request did not declare is answered 400 -32021, naming what it
// needs in data.requiredCapabilities; no requestState is handed out.
func TestHTTPModernMissingCapability(t *testing.T) {
	f := newFake(t)
	tok, _ := f.provider("T", "A", 0)
	asking(f)
	e := newMCPEnv(t, f, transport.Options{})
	res := e.Do(http.MethodPost, modernHeaders(tok, "tools/call", "ask"), modernBody("1", "tools/call", `"name":"ask","arguments":{}`))
	ht.WantStatus(t, "undeclared elicitation", res, http.StatusBadRequest)
	var a struct {
		Error struct {
			Code int
			Data map[string]any
		}
	}
	if err := json.Unmarshal(res.Body, &a); err != nil || a.Error.Code != -32021 || strings.Contains(string(res.Body), "requestState") {
		t.Fatalf("undeclared elicitation = %s, want -32021 and no requestState", res)
	}
	want := map[string]any{"requiredCapabilities": map[string]any{"elicitation": map[string]any{"form": map[string]any{}}}}
	if diff := cmp.Diff(want, a.Error.Data); diff != "" {
		t.Errorf("data (-want +got):\n%s", diff)
	}
}

package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/actors/session"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// askCaps are the capabilities of a client that may be asked everything.
const askCaps = `{"elicitation":{},"sampling":{},"roots":{}}`

// initAsking creates a session for tok whose client declared caps, and
// returns its id.
func (e *mcpEnv) initAsking(tok, caps string) string {
	e.T.Helper()
	res := e.Post(tok, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":`+caps+`,"clientInfo":{"name":"asks","version":"1"}}}`)
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || sid == "" {
		e.T.Fatalf("initialize = %s", res)
	}
	return sid
}

// askEnv is an endpoint over a fake with the asking tools.
func askEnv(t *testing.T, opts transport.Options) (e *mcpEnv, tok, other string) {
	t.Helper()
	f, tok, other := twoCredentials(t)
	askingTools(f)
	return newMCPEnv(t, f, opts), tok, other
}

// waitAsked waits until the endpoint holds n pending asks.
func (e *mcpEnv) waitAsked(what string, n int) {
	e.T.Helper()
	ht.WaitUntil(e.T, fmt.Sprintf("%s: %d asks pending", what, n), func() bool { return e.srv.AsksPending() == n })
}

func answerBody(id, result string) string {
	return `{"jsonrpc":"2.0","id":"` + id + `","result":` + result + `}`
}

const acceptAda = `{"action":"accept","content":{"name":"Ada"}}`

// wantToolText requires that the event stream res ends with the tool
// result of text (and isError as given).
func wantToolText(t *testing.T, what string, res *ht.Result, text string, isError bool) {
	t.Helper()
	events := ht.SSEEvents(t, res.Body)
	if len(events) == 0 {
		t.Fatalf("%s: no events in %s", what, res)
	}
	last := events[len(events)-1]
	var tr ht.ToolResult
	if last.Result == nil || json.Unmarshal(last.Result, &tr) != nil || len(tr.Content) != 1 {
		t.Fatalf("%s: last event %+v is not a tool result", what, last)
	}
	if tr.Content[0].Text != text || tr.IsError != isError {
		t.Fatalf("%s: result %q isError %v, want %q isError %v", what, tr.Content[0].Text, tr.IsError, text, isError)
	}
}

// TestAskForeignResponse: a response posted by another namespace for this
// session's ask id, naming this session, is the unknown session's 404, byte
// for byte; posted on its own session it is 202 and reaches nothing. The
// ask stays pending either way, and the owner's answer completes the call.
func TestAskForeignResponse(t *testing.T) {
	e, tok, other := askEnv(t, transport.Options{})
	sid := e.initAsking(tok, askCaps)
	otherSid := e.initAsking(other, askCaps)
	call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_name", ""))
	e.waitAsked("ask_name", 1)

	foreign := e.Post(other, sid, answerBody("srv-1", `{"action":"accept","content":{"name":"Mallory"}}`))
	unknown := e.Post(other, ht.MadeUpSessionID, answerBody("srv-1", `{"action":"accept","content":{"name":"Mallory"}}`))
	ht.SameAsUnknown(t, "a response naming another namespace's session", foreign, unknown)
	ht.WantStatus(t, "the foreign response", foreign, http.StatusNotFound)
	own := e.Post(other, otherSid, answerBody("srv-1", `{"action":"accept","content":{"name":"Mallory"}}`))
	ht.WantStatus(t, "the same id on the other namespace's own session", own, http.StatusAccepted)
	if n := e.srv.AsksPending(); n != 1 {
		t.Fatalf("after the foreign responses %d asks pending, want 1", n)
	}

	ht.WantStatus(t, "the owner's answer", e.Post(tok, sid, answerBody("srv-1", acceptAda)), http.StatusAccepted)
	wantToolText(t, "ask_name", call.Await(t, "ask_name"), "hello Ada (state 1)", false)
}

// TestAskUnknownResponseFlood: responses nothing awaits — unknown ids,
// ids of other shapes, errors — are 202 each and leave nothing behind: the
// one pending ask is still the only one, and it is still answerable.
func TestAskUnknownResponseFlood(t *testing.T) {
	e, tok, _ := askEnv(t, transport.Options{})
	sid := e.initAsking(tok, askCaps)
	call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_roots", ""))
	e.waitAsked("ask_roots", 1)
	for i := range 300 {
		var body string
		switch i % 3 {
		case 0:
			body = answerBody(fmt.Sprintf("srv-%d", 1000+i), `{"roots":[]}`)
		case 1:
			body = fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{}}`, i) // the number, not the string
		default:
			body = fmt.Sprintf(`{"jsonrpc":"2.0","id":"x-%d","error":{"code":-1,"message":"no"}}`, i)
		}
		if res := e.Post(tok, sid, body); res.Status != http.StatusAccepted {
			t.Fatalf("unknown response %d = %s, want 202", i, res)
		}
	}
	if n := e.srv.AsksPending(); n != 1 {
		t.Fatalf("after the flood %d asks pending, want 1", n)
	}
	ht.WantStatus(t, "the real answer", e.Post(tok, sid, answerBody("srv-1", `{"roots":[{"uri":"file:///r"}]}`)), http.StatusAccepted)
	wantToolText(t, "ask_roots", call.Await(t, "ask_roots"), "roots: 1 file:///r", false)
	if n := e.srv.AsksPending(); n != 0 {
		t.Fatalf("after the call %d asks pending, want 0", n)
	}
}

// TestAskOversizedAnswer: an answer over MaxBodyBytes is 413 before it is
// read, and the ask stays pending; an answer within it completes the call.
func TestAskOversizedAnswer(t *testing.T) {
	e, tok, _ := askEnv(t, transport.Options{MaxBodyBytes: 2048})
	sid := e.initAsking(tok, askCaps)
	call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_name", ""))
	e.waitAsked("ask_name", 1)
	big := answerBody("srv-1", `{"action":"accept","content":{"name":"`+strings.Repeat("a", 4096)+`"}}`)
	ht.WantStatus(t, "the oversized answer", e.Post(tok, sid, big), http.StatusRequestEntityTooLarge)
	if n := e.srv.AsksPending(); n != 1 {
		t.Fatalf("after the oversized answer %d asks pending, want 1", n)
	}
	ht.WantStatus(t, "the answer", e.Post(tok, sid, answerBody("srv-1", acceptAda)), http.StatusAccepted)
	wantToolText(t, "ask_name", call.Await(t, "ask_name"), "hello Ada (state 1)", false)
}

// TestAskRoundsBounded: a handler that still needs input after ten rounds
// of asks gets a tool error; the client was asked exactly ten times.
func TestAskRoundsBounded(t *testing.T) {
	e, tok, _ := askEnv(t, transport.Options{})
	sid := e.initAsking(tok, askCaps)
	call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_always", ""))
	for n := 1; n <= 10; n++ {
		e.waitAsked(fmt.Sprintf("round %d", n), 1)
		ht.WantStatus(t, "an answer", e.Post(tok, sid, answerBody(fmt.Sprintf("srv-%d", n), `{"roots":[]}`)), http.StatusAccepted)
	}
	res := call.Await(t, "ask_always")
	asks := 0
	for _, ev := range ht.SSEEvents(t, res.Body) {
		if ev.Method == "roots/list" {
			asks++
		}
	}
	if asks != 10 {
		t.Fatalf("the client was asked %d times, want 10", asks)
	}
	wantToolText(t, "ask_always", res, "the request still needed the client's input after 10 rounds of requests to the client", true)
}

// TestAskEndsWithSession: DELETE of the session, and revocation of the
// credential, while an ask is pending end the call (its stream ends with
// no response, and nothing more is sent to the client that ended the
// session or lost its credential); the table holds nothing afterwards, and
// a response racing the end is 202 (matched or dropped) or the session's
// 404 — never anything else.
func TestAskEndsWithSession(t *testing.T) {
	for _, end := range []string{"delete", "revoke"} {
		t.Run(end, func(t *testing.T) {
			f, _, _ := twoCredentials(t)
			askingTools(f)
			tok, cred := f.provider("V", "A", 0)
			e := newMCPEnv(t, f, transport.Options{})
			sid := e.initAsking(tok, askCaps)
			call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_name", ""))
			e.waitAsked("ask_name", 1)
			var wg sync.WaitGroup
			var raced *ht.Result
			wg.Go(func() { raced = e.Post(tok, sid, answerBody("srv-1", acceptAda)) })
			switch end {
			case "delete":
				if res := e.Del(tok, sid); res.Status != http.StatusNoContent && res.Status != http.StatusNotFound {
					t.Errorf("DELETE = %s", res)
				}
			case "revoke":
				f.revoke(cred)
			}
			wg.Wait()
			if raced.Status != http.StatusAccepted && raced.Status != http.StatusNotFound && raced.Status != http.StatusUnauthorized {
				t.Errorf("the racing answer = %s, want 202, 404 or 401", raced)
			}
			res := call.Await(t, "ask_name")
			for _, ev := range ht.SSEEvents(t, res.Body) {
				switch {
				case ev.Method == "notifications/cancelled":
					t.Errorf("%s: the runtime told a client whose session ended that it cancelled its ask: %+v", end, ev)
				case ev.Result != nil && !strings.Contains(string(ev.Result), "hello Ada"):
					t.Errorf("%s: unexpected result %s", end, ev.Result)
				}
			}
			waitSessionGone(t, f, end, sid)
			if n := e.srv.AsksPending(); n != 0 {
				t.Fatalf("%s: %d asks pending after the session ended, want 0", end, n)
			}
		})
	}
}

// TestAskHandlerFaults: input requests the client cannot be asked — a
// requested schema that does not compile, a nil request, a type that is
// no request to a client — fail the call with a tool error and send the
// client nothing: it is the handler's fault, not the client's.
func TestAskHandlerFaults(t *testing.T) {
	tests := []struct {
		name string
		reqs mcp.InputRequestMap
		want string
	}{
		{"schema", mcp.InputRequestMap{"x": &mcp.ElicitParams{Message: "?", RequestedSchema: map[string]any{"type": 5}}}, "the request's elicitation schema is invalid"},
		{"nil", mcp.InputRequestMap{"x": (*mcp.ElicitParams)(nil)}, `input request "x" is nil`},
		{"type", mcp.InputRequestMap{"x": notARequest{}}, `input request "x": transport_test.notARequest is not a request the client can be asked`},
	}
	e, tok, _ := askEnv(t, transport.Options{})
	sid := e.initAsking(tok, askCaps)
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			e.f.serveTool("faulty", func(context.Context, *transport.Request, json.RawMessage) transport.Response {
				return transport.Response{InputRequests: test.reqs}
			})
			res := e.Post(tok, sid, ht.CallBody("2", "faulty", ""))
			if ct := res.Header.Get("Content-Type"); ct != "application/json" {
				t.Fatalf("faulty = %s (%s), want a JSON answer: nothing sent to the client", res, ct)
			}
			var tr ht.ToolResult
			ht.DecodeResult(t, res, &tr)
			if !tr.IsError || len(tr.Content) != 1 || !strings.HasPrefix(tr.Content[0].Text, test.want) {
				t.Fatalf("faulty = %s, want an isError result starting %q", res, test.want)
			}
			if n := e.srv.AsksPending(); n != 0 {
				t.Fatalf("%d asks pending, want 0", n)
			}
		})
	}
}

// notARequest is an InputRequest of no method the client knows.
type notARequest struct{ mcp.InputRequest }

// TestAskPendingBound: a session holds at most session.MaxPendingAsks
// asks over all its calls; one call more is a tool error at once, with
// nothing sent to the client, and the calls within the bound all complete
// with their own answers, answered concurrently.
func TestAskPendingBound(t *testing.T) {
	e, tok, _ := askEnv(t, transport.Options{})
	sid := e.initAsking(tok, askCaps)
	calls := make([]*ht.Pending, session.MaxPendingAsks)
	for i := range calls {
		calls[i] = e.AsyncPost(tok, sid, ht.CallBody(fmt.Sprint(100+i), "ask_roots", ""))
	}
	e.waitAsked("every call asked", session.MaxPendingAsks)

	over := e.Post(tok, sid, ht.CallBody("99", "ask_roots", ""))
	var tr ht.ToolResult
	ht.DecodeResult(t, over, &tr)
	if !tr.IsError || len(tr.Content) != 1 || !strings.HasPrefix(tr.Content[0].Text, "too many requests to the client pending") {
		t.Fatalf("the call past the bound = %s, want a tool error", over)
	}

	var wg sync.WaitGroup
	for n := 1; n <= session.MaxPendingAsks; n++ {
		wg.Go(func() {
			body := answerBody(fmt.Sprintf("srv-%d", n), fmt.Sprintf(`{"roots":[{"uri":"file:///%d"}]}`, n))
			if res := e.Post(tok, sid, body); res.Status != http.StatusAccepted {
				t.Errorf("answer srv-%d = %s", n, res)
			}
		})
	}
	wg.Wait()
	seen := map[string]bool{}
	for i, c := range calls {
		res := c.Await(t, fmt.Sprint("call ", i))
		events := ht.SSEEvents(t, res.Body)
		var askID string
		_ = json.Unmarshal(events[0].ID, &askID)
		wantToolText(t, fmt.Sprint("call ", i), res, "roots: 1 file:///"+strings.TrimPrefix(askID, "srv-"), false)
		if seen[askID] {
			t.Fatalf("ask id %s given twice", askID)
		}
		seen[askID] = true
	}
	if n := e.srv.AsksPending(); n != 0 {
		t.Fatalf("%d asks pending after every call, want 0", n)
	}
}

// TestAskResumed: an ask outlives its client's connection (a disconnection
// is no cancellation): the client comes back with GET and Last-Event-ID,
// answers the ask it saw, and the call's result arrives on the resumed
// stream.
func TestAskResumed(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	askingTools(f)
	e, gone := newNoticingEnv(t, f)
	sid := e.initAsking(tok, askCaps)
	st, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody("2", "ask_name", "")))
	if st == nil {
		t.Fatalf("POST = %s, want an event stream", res)
	}
	ht.WaitUntil(t, "the ask's event", func() bool { return len(st.Events()) == 2 }) // priming, the ask
	ask := st.Events()[1]
	if !strings.Contains(ask.Data, `"method":"elicitation/create"`) {
		t.Fatalf("second event %+v, want the elicitation", ask)
	}
	st.Close()
	<-gone // the server saw the client go: the stream waits for its GET
	resumed := e.StreamWith(ht.ResumeHeaders(tok, sid, ask.ID))
	ht.WantStatus(t, "the answer", e.Post(tok, sid, answerBody("srv-1", acceptAda)), http.StatusAccepted)
	resumed.WantEnd(t, "the resumed stream")
	events := resumed.Events()
	if len(events) == 0 || !strings.Contains(events[len(events)-1].Data, `"text":"hello Ada (state 1)"`) {
		t.Fatalf("the resumed stream carried %+v, want the call's result last", events)
	}
}

// TestAskNoticeResumed: an ask whose client dropped the call's stream
// and never answered passes AskTimeout; its notifications/cancelled is
// kept in the call's stream, so the client that resumes it from the ask's
// event reads the notice (its dialog closes) and then the call's end — and
// the session's standalone stream, open all along, carries it too.
func TestAskNoticeResumed(t *testing.T) {
	f, tok, _ := twoCredentials(t)
	askingTools(f)
	e, gone := newNoticingEnvWith(t, f, transport.Options{AskTimeout: 300 * time.Millisecond})
	sid := e.initAsking(tok, askCaps)
	standalone := e.StreamWith(ht.Headers(tok, sid))
	st, res := e.OpenSSE(e.NewRequest(context.Background(), http.MethodPost, ht.Headers(tok, sid), ht.CallBody("2", "ask_name", "")))
	if st == nil {
		t.Fatalf("POST = %s, want an event stream", res)
	}
	ht.WaitUntil(t, "the ask's event", func() bool { return len(st.Events()) == 2 }) // priming, the ask
	ask := st.Events()[1]
	if !strings.Contains(ask.Data, `"method":"elicitation/create"`) || !strings.Contains(ask.Data, `"id":"srv-1"`) {
		t.Fatalf("second event %+v, want the elicitation srv-1", ask)
	}
	st.Close()
	<-gone                    // the server saw the client go
	e.waitAsked("timeout", 0) // AskTimeout passed: the ask was abandoned
	resumed := e.StreamWith(ht.ResumeHeaders(tok, sid, ask.ID))
	resumed.WantEnd(t, "the resumed stream")
	events := resumed.Events()
	if len(events) < 2 || !isCancelNotice(events[0].Data, "srv-1") {
		t.Fatalf("the resumed stream carried %+v, want notifications/cancelled for srv-1 first, then the call's end", events)
	}
	if !strings.Contains(events[len(events)-1].Data, `"id":"2"`) && !strings.Contains(events[len(events)-1].Data, `"id":2`) {
		t.Fatalf("the resumed stream ended with %+v, want the call's answer", events[len(events)-1])
	}
	ht.WaitUntil(t, "the notice on the standalone stream", func() bool {
		for _, ev := range standalone.Events() {
			if isCancelNotice(ev.Data, "srv-1") {
				return true
			}
		}
		return false
	})
	standalone.Close()
}

// isCancelNotice reports whether data is notifications/cancelled for the
// ask id.
func isCancelNotice(data, id string) bool {
	var n struct {
		Method string `json:"method"`
		Params struct {
			RequestID string `json:"requestId"`
		} `json:"params"`
	}
	return json.Unmarshal([]byte(data), &n) == nil && n.Method == "notifications/cancelled" && n.Params.RequestID == id
}

// TestAskInBatch: on a 2025-03-26 session a request of a batch that needs
// the client fails at once (its answer is one element of a JSON array:
// nothing can be asked before it) instead of waiting out AskTimeout; and a
// response inside a batch answers the session's pending ask like one
// POSTed alone.
func TestAskInBatch(t *testing.T) {
	e, tok, _ := askEnv(t, transport.Options{AskTimeout: 30 * time.Second})
	res := e.Post(tok, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-03-26","capabilities":{"sampling":{},"roots":{}},"clientInfo":{"name":"asks","version":"1"}}}`)
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || sid == "" {
		t.Fatalf("initialize = %s", res)
	}
	ht.WantStatus(t, "initialized", e.Post(tok, sid, ht.InitializedBody), http.StatusAccepted)

	answers := batchAnswers(t, e.Post(tok, sid, `[`+ht.CallBody("11", "ask_roots", "")+`]`))
	if len(answers) != 1 {
		t.Fatalf("batch of one call = %d answers, want 1", len(answers))
	}
	var result mcp.CallToolResult
	if err := json.Unmarshal(answers[0].Result, &result); err != nil {
		t.Fatalf("batched ask_roots = %+v: %v", answers[0], err)
	}
	text, _ := result.Content[0].(*mcp.TextContent)
	if !result.IsError || text == nil || !strings.Contains(text.Text, "a request in a JSON-RPC batch cannot ask the client") {
		t.Fatalf("batched ask_roots = %+v, want an isError result saying a batch cannot ask", answers[0])
	}
	if n := e.srv.AsksPending(); n != 0 {
		t.Fatalf("%d asks pending after the batch, want 0", n)
	}

	call := e.AsyncPost(tok, sid, ht.CallBody("2", "ask_roots", ""))
	e.waitAsked("ask_roots", 1)
	ht.WantStatus(t, "an answer in a batch", e.Post(tok, sid, `[`+answerBody("srv-1", `{"roots":[{"uri":"file:///w"}]}`)+`]`), http.StatusAccepted)
	wantToolText(t, "ask_roots", call.Await(t, "ask_roots"), "roots: 1 file:///w", false)
}

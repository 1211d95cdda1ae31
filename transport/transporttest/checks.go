package transporttest

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// Set returns an edit of headers: each name, value pair is set, or deleted
// when the value is "".
func Set(kv ...string) func(h http.Header) {
	return func(h http.Header) {
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				h.Del(kv[i])
				continue
			}
			h.Set(kv[i], kv[i+1])
		}
	}
}

// WantHeader returns a check that an answer has exactly one value of the
// header name, value.
func WantHeader(name, value string) func(t *testing.T, res *Result) {
	return func(t *testing.T, res *Result) {
		t.Helper()
		if got := res.Header.Values(name); len(got) != 1 || got[0] != value {
			t.Fatalf("%s = %q, want [%q]", name, got, value)
		}
	}
}

// WantErrorWithoutID requires a JSON body that is a JSON-RPC error with no
// id member: an error about a request whose id is not known omits the id
// (the schema has no null id).
func WantErrorWithoutID(t *testing.T, what string, res *Result) {
	t.Helper()
	if ct := res.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s = %s, Content-Type %q; want application/json", what, res, ct)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(res.Body, &m); err != nil {
		t.Fatalf("%s = %s: body is not a JSON object: %v", what, res, err)
	}
	if string(m["jsonrpc"]) != `"2.0"` || len(m["error"]) == 0 {
		t.Fatalf("%s = %s, want a JSON-RPC error", what, res)
	}
	if id, ok := m["id"]; ok {
		t.Fatalf("%s = %s carries id %s, want no id member", what, res, id)
	}
}

// WantValidJSON requires a body that is valid UTF-8 JSON.
func WantValidJSON(t *testing.T, what string, res *Result) {
	t.Helper()
	if !utf8.Valid(res.Body) || !json.Valid(res.Body) {
		t.Fatalf("%s = %d %q: not valid UTF-8 JSON", what, res.Status, res.Body)
	}
}

// WantRetryLater requires status with a Retry-After of secs, and a
// JSON-RPC error without an id.
func WantRetryLater(t *testing.T, what string, res *Result, status int, secs string) {
	t.Helper()
	WantStatus(t, what, res, status)
	WantHeader("Retry-After", secs)(t, res)
	WantErrorWithoutID(t, what, res)
}

// DecodeResult decodes the result of a JSON-RPC answer into v.
func DecodeResult(t *testing.T, res *Result, v any) {
	t.Helper()
	a := res.RPC(t)
	if a.Error != nil {
		t.Fatalf("answer %s: JSON-RPC error, want a result", res)
	}
	if err := json.Unmarshal(a.Result, v); err != nil {
		t.Fatalf("answer %s: result: %v", res, err)
	}
}

// Padded is a ping whose body is exactly n bytes.
func Padded(n int) string {
	return PingBody + strings.Repeat(" ", n-len(PingBody))
}

// WaitUntil polls cond until it holds, and fails the test if it does not
// within HangAfter: a wait for a state, not a timing.
func WaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(HangAfter)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %v", what, HangAfter)
		}
		time.Sleep(time.Millisecond)
	}
}

// SessionRequest is one kind of request that names a session.
type SessionRequest struct {
	Name string
	// Owner is the status the session's owner gets.
	Owner int
	Do    func(c *Client, tok, sid string) *Result
}

// SessionRequests are the requests that name a session: call (a
// tools/call body), a ping, a GET, a DELETE. A GET that opens a stream
// closes it at once and returns its status and headers.
func SessionRequests(call string) []SessionRequest {
	return []SessionRequest{
		{"POST tools/call", http.StatusOK, func(c *Client, tok, sid string) *Result { return c.Post(tok, sid, call) }},
		{"POST ping", http.StatusOK, func(c *Client, tok, sid string) *Result { return c.Post(tok, sid, PingBody) }},
		{"GET", http.StatusOK, func(c *Client, tok, sid string) *Result {
			s, res := c.OpenStream(GetHeaders(tok, sid))
			if s != nil {
				s.Close()
			}
			return res
		}},
		{"DELETE", http.StatusNoContent, func(c *Client, tok, sid string) *Result { return c.Del(tok, sid) }},
	}
}

// DispatchBody is a message a held POST carries. OnSession: it names a
// session.
type DispatchBody struct {
	Name      string
	Body      string
	OnSession bool
}

// DispatchBodies are the messages of every kind the endpoint dispatches;
// call is a tools/call body.
func DispatchBodies(call string) []DispatchBody {
	return []DispatchBody{
		{"ping", PingBody, true},
		{"tools/list", ToolsListBody, true},
		{"tools/call", call, true},
		{"notification", InitializedBody, true},
		{"response", `{"jsonrpc":"2.0","id":99,"result":{}}`, true},
		{"initialize", InitBody(LatestVersion), false},
	}
}

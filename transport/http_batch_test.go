package transport_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/transport"
	ht "github.com/agenthost/mcpruntime/transport/transporttest"
)

// countToThree reports progress twice, then answers.
func countToThree(_ context.Context, _ principal.Principal, _ json.RawMessage, out transport.Output) (*mcp.CallToolResult, error) {
	out.Progress(1, 3, "one")
	out.Progress(2, 3, "two")
	return textResult("three"), nil
}

// initializeAt opens a session negotiated at version and returns its id.
func initializeAt(t *testing.T, e *mcpEnv, tok, version string) string {
	t.Helper()
	res := e.Post(tok, "", ht.InitBody(version))
	sid := res.Header.Get("Mcp-Session-Id")
	if res.Status != http.StatusOK || sid == "" {
		t.Fatalf("initialize at %s = %s", version, res)
	}
	ht.WantStatus(t, "initialized", e.Post(tok, sid, ht.InitializedBody), http.StatusAccepted)
	return sid
}

// batchAnswers decodes a batch's answer: a JSON array of responses.
func batchAnswers(t *testing.T, res *ht.Result) []ht.Answer {
	t.Helper()
	if res.Status != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("batch = %s, want 200 application/json", res)
	}
	var out []ht.Answer
	if err := json.Unmarshal(res.Body, &out); err != nil {
		t.Fatalf("batch answer %s: %v", res.Body, err)
	}
	return out
}

// TestHTTPBatch: on a 2025-03-26 session a batch is answered with one JSON
// array of its requests' responses, in the batch's order: a notification
// and a response get none, an element that is not a message -32600 without
// an id (never "id": null), initialize -32600 as on any session; a request that reports
// progress sends none (the answer is JSON), its result comes.
func TestHTTPBatch(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := initializeAt(t, e, tok, "2025-03-26")
	batch := `[` + strings.Join([]string{
		`{"jsonrpc":"2.0","id":"p","method":"ping"}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		ht.CallBody(`7`, "count_to_three", `"tok"`),
		`42`,
		`{"jsonrpc":"2.0","id":"r","result":{}}`,
		ht.InitBody("2025-03-26"),
		`{"jsonrpc":"2.0","id":"u","method":"no/such"}`,
	}, ",") + `]`
	f.tool("count_to_three", countToThree)
	got := batchAnswers(t, e.Post(tok, sid, batch))
	want := []struct {
		id   string
		code int // 0: a result
	}{{`"p"`, 0}, {`7`, 0}, {``, transport.CodeInvalidRequest}, {`1`, transport.CodeInvalidRequest}, {`"u"`, transport.CodeMethodNotFound}}
	if len(got) != len(want) {
		t.Fatalf("batch answered %d responses %+v, want %d", len(got), got, len(want))
	}
	for i, w := range want {
		a := got[i]
		switch {
		case string(a.ID) != w.id:
			t.Errorf("response %d has id %s, want %s", i, a.ID, w.id)
		case w.code == 0 && (a.Error != nil || a.Result == nil):
			t.Errorf("response %d = %+v, want a result", i, a)
		case w.code != 0 && (a.Error == nil || a.Error.Code != w.code):
			t.Errorf("response %d = %+v, want error %d", i, a, w.code)
		case a.Method != "":
			t.Errorf("response %d is a notification %s", i, a.Method)
		}
	}
}

// TestHTTPBatchNotifications: a batch of notifications and responses only
// is 202, no body.
func TestHTTPBatchNotifications(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	sid := initializeAt(t, e, tok, "2025-03-26")
	res := e.Post(tok, sid, `[{"jsonrpc":"2.0","method":"notifications/roots/list_changed"},{"jsonrpc":"2.0","id":9,"result":{}}]`)
	if res.Status != http.StatusAccepted || len(res.Body) != 0 {
		t.Fatalf("batch of notifications = %s, want 202 and no body", res)
	}
}

// TestHTTPBatchRefused: a batch is 400 -32600 everywhere but on a
// 2025-03-26 session: without a session (initialize cannot be batched), on
// sessions of later versions; and on a 2025-03-26 session when it is empty
// or holds more than 64 messages. Nothing of a refused batch runs.
func TestHTTPBatchRefused(t *testing.T) {
	f := newFake(t)
	_, tok := openMinted(t, f, "T", "A")
	e := newMCPEnv(t, f, transport.Options{})
	old := initializeAt(t, e, tok, "2025-03-26")
	tooMany := `[` + strings.TrimSuffix(strings.Repeat(ht.PingBody+",", 65), ",") + `]`
	for _, test := range []struct {
		name, sid, body string
	}{
		{"no session, initialize", "", `[` + ht.InitBody("2025-03-26") + `]`},
		{"2025-11-25 session", initializeAt(t, e, tok, "2025-11-25"), `[` + ht.PingBody + `]`},
		{"2025-06-18 session", initializeAt(t, e, tok, "2025-06-18"), `[` + ht.PingBody + `]`},
		{"empty", old, `[]`},
		{"65 messages", old, tooMany},
	} {
		res := e.Post(tok, test.sid, test.body)
		if a := res.RPC(t); res.Status != http.StatusBadRequest || a.Error == nil || a.Error.Code != transport.CodeInvalidRequest {
			t.Errorf("%s: batch = %s, want 400 -32600", test.name, res)
		}
	}
	// 64 is the bound: served.
	if got := batchAnswers(t, e.Post(tok, old, `[`+strings.TrimSuffix(strings.Repeat(ht.PingBody+",", 64), ",")+`]`)); len(got) != 64 {
		t.Fatalf("a batch of 64 pings answered %d responses, want 64", len(got))
	}
}

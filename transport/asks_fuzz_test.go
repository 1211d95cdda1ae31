package transport

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agenthost/mcpruntime/actors/session"
)

// FuzzAskResponse checks the path of a client's response to the runtime's
// asks on arbitrary bodies: the body is decoded as any POST is; a response
// reaches a session's pending ask only when its id is, by value, the ask's
// own id, and only once; and the answer handed to the handler is a valid
// answer of the method asked — an elicitation's action one of accept,
// decline, cancel, an accepted form's content valid against the requested
// schema — or none at all.
func FuzzAskResponse(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept","content":{"name":"Ada"}}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept","content":{"name":""}}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept"}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"decline"}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"maybe","content":{"name":"x"}}}`,
		`{"jsonrpc":"2.0","id":"\u0073rv-1","result":{"action":"cancel"}}`,
		`{"jsonrpc":"2.0","id":"srv-2","result":{"action":"accept","content":{"name":"Ada"}}}`,
		`{"jsonrpc":"2.0","id":1,"result":{}}`,
		`{"jsonrpc":"2.0","id":"srv-1","error":{"code":-1,"message":"no"}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":{"action":"accept","content":{"name":7}}}`,
		`{"jsonrpc":"2.0","id":"srv-1","result":null}`,
	} {
		f.Add([]byte(s))
	}
	sch, err := compileRequested(map[string]any{
		"type": "object", "properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 1}}, "required": []string{"name"},
	})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var asks session.Asks
		round, err := asks.Begin(1)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := decodeMessage(body)
		if err != nil || !msg.isResponse() {
			return
		}
		key, ok := idKey(msg.ID)
		matched := false
		if ok {
			var result, rpcErr []byte
			if len(msg.Error) > 0 {
				rpcErr = msg.Error
			} else {
				result = msg.Result
			}
			matched = asks.Answer(key, result, rpcErr)
			if again := asks.Answer(key, result, rpcErr); again {
				t.Fatalf("a second response with id %s reached the ask", msg.ID)
			}
		}
		if want := ok && key == `"srv-1"`; matched != want {
			t.Fatalf("response with id %s matched = %v, want %v", msg.ID, matched, want)
		}
		if !matched {
			if left := asks.End(round); len(left) != 1 {
				t.Fatalf("the unanswered ask left %d pending, want 1", len(left))
			}
			return
		}
		a := <-round.Answers()
		if a.Error != nil {
			return
		}
		q := &question{method: "elicitation/create", schema: sch}
		v, ok := decodeElicit(a.Result, q)
		if !ok {
			return
		}
		res := v.(*mcp.ElicitResult)
		switch res.Action {
		case "accept":
			var raw struct {
				Content json.RawMessage `json:"content"`
			}
			_ = json.Unmarshal(a.Result, &raw)
			if len(raw.Content) == 0 || string(raw.Content) == "null" {
				raw.Content = json.RawMessage(`{}`)
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw.Content))
			if err != nil || sch.Validate(doc) != nil {
				t.Fatalf("accepted content %s handed to the handler does not validate", raw.Content)
			}
		case "decline", "cancel":
		default:
			t.Fatalf("action %q handed to the handler", res.Action)
		}
	})
}

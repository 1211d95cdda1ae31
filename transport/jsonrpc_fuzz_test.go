package transport

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"unicode/utf8"
)

// FuzzDecodeMessage checks decodeMessage on arbitrary bodies: it never
// panics; it accepts only a single JSON object whose "jsonrpc" member is
// exactly "2.0"; and an accepted message is exactly one of request,
// notification and response, and keeps that classification (and its
// members) when re-marshalled and decoded again.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25"}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":"a","result":{}}`,
		`{"jsonrpc":"2.0","id":-7,"error":{"code":-32600,"message":"x"}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"ping"}]`,
		`{"jsonrpc":"1.0","id":1,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":null,"method":"ping"}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping","result":1}`,
		`{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0"}`,
		" \r\n\t{\"jsonrpc\":\"2.0\",\"method\":\"x\"}\n",
		`{"jsonrpc":2.0,"method":"x"}`,
		`"2.0"`,
		`null`,
		``,
		`{`,
		"{\"jsonrpc\":\"2.0\",\"id\":\"\xff\",\"method\":\"ping\"}",
		`{"jsonrpc":"2.0","id":"\ud800","method":"ping"}`,
		`{"jsonrpc":"2.0","id":"\ud83d\ude00","method":"ping"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := decodeMessage(body)
		if err != nil {
			if m != nil {
				t.Fatalf("decodeMessage(%q) = %+v with error %v", body, m, err)
			}
			return
		}
		if m == nil {
			t.Fatalf("decodeMessage(%q) = nil, nil", body)
		}
		// Valid UTF-8 JSON text, decoding without loss.
		if !utf8.Valid(body) {
			t.Fatalf("decodeMessage accepted %q, which is not valid UTF-8", body)
		}
		// A single JSON object, nothing before or after it but whitespace.
		trimmed := bytes.TrimSpace(body)
		if !json.Valid(body) || len(trimmed) == 0 || trimmed[0] != '{' {
			t.Fatalf("decodeMessage accepted %q, which is not a single JSON object", body)
		}
		var members map[string]json.RawMessage
		if err := json.Unmarshal(body, &members); err != nil {
			t.Fatalf("decodeMessage accepted %q, which does not decode as an object: %v", body, err)
		}
		var version string
		if json.Unmarshal(members["jsonrpc"], &version) != nil || version != "2.0" {
			t.Fatalf("decodeMessage accepted %q without \"jsonrpc\": \"2.0\"", body)
		}
		if m.JSONRPC != "2.0" {
			t.Fatalf("decodeMessage(%q).JSONRPC = %q", body, m.JSONRPC)
		}
		kind := classify(t, body, m)

		again, err := json.Marshal(m)
		if err != nil {
			t.Fatalf("re-marshal of %q: %v", body, err)
		}
		m2, err := decodeMessage(again)
		if err != nil {
			t.Fatalf("decodeMessage(%q) accepted, its re-marshalled form %q refused: %v", body, again, err)
		}
		if kind2 := classify(t, again, m2); kind2 != kind {
			t.Fatalf("%q is a %s, its re-marshalled form %q a %s", body, kind, again, kind2)
		}
		if m2.Method != m.Method {
			t.Fatalf("method %q became %q after re-marshal", m.Method, m2.Method)
		}
		for _, f := range []struct {
			name   string
			before json.RawMessage
			after  json.RawMessage
		}{
			{"id", m.ID, m2.ID},
			{"params", m.Params, m2.Params},
			{"result", m.Result, m2.Result},
			{"error", m.Error, m2.Error},
		} {
			if !sameJSON(f.before, f.after) {
				t.Fatalf("%s %s became %s after re-marshal of %q", f.name, f.before, f.after, body)
			}
		}
	})
}

// classify returns the message's kind and fails unless exactly one of the
// three predicates holds.
func classify(t *testing.T, body []byte, m *message) string {
	t.Helper()
	var kinds []string
	if m.isRequest() {
		kinds = append(kinds, "request")
	}
	if m.isNotification() {
		kinds = append(kinds, "notification")
	}
	if m.isResponse() {
		kinds = append(kinds, "response")
	}
	if len(kinds) != 1 {
		t.Fatalf("decodeMessage(%q) classified as %v, want exactly one kind", body, kinds)
	}
	return kinds[0]
}

// sameJSON reports whether a and b are both absent or encode the same
// value.
func sameJSON(a, b json.RawMessage) bool {
	if len(a) == 0 || len(b) == 0 {
		return len(a) == len(b)
	}
	va, oka := decodeAny(a)
	vb, okb := decodeAny(b)
	return oka && okb && reflect.DeepEqual(va, vb)
}

func decodeAny(raw json.RawMessage) (any, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	return v, true
}

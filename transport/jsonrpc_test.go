package transport

import (
	"encoding/json"
	"testing"
)

func TestProgressToken(t *testing.T) {
	tests := []struct {
		params string
		want   string // "" for none
	}{
		{`{"name":"x","_meta":{"progressToken":"p-1","other":{"progressToken":2}}}`, `"p-1"`},
		{` { "arguments" : [1, {"_meta":"}"}] , "_meta" : { "progressToken" : 7 } } `, `7`},
		{`{"_meta":{"progressToken":1},"_meta":{"progressToken":2}}`, `2`}, // the last one wins, as in encoding/json
		{`{"_meta":{"progressToken":null}}`, ""},
		{`{"_meta":null}`, ""},
		{`{"_Meta":{"progressToken":1}}`, ""}, // names are case-sensitive
		{`{"arguments":{"_meta":{"progressToken":1}}}`, ""},
		{`{}`, ""},
	}
	for _, tt := range tests {
		if got := progressToken(json.RawMessage(tt.params)); string(got) != tt.want {
			t.Errorf("progressToken(%s) = %s, want %s", tt.params, got, tt.want)
		}
	}
}

func TestDecodeMessageMembers(t *testing.T) {
	m, err := decodeMessage([]byte(`{"params":{"id":9,"method":"no"},"id":"a\"b","method":"tools/call","jsonrpc":"2.0"}`))
	if err != nil {
		t.Fatal(err)
	}
	if m.Method != "tools/call" || string(m.ID) != `"a\"b"` || string(m.Params) != `{"id":9,"method":"no"}` {
		t.Fatalf("decoded %+v: nested members must not be taken for top-level ones", m)
	}
	for _, body := range []string{
		`{"jsonrpc":"2.0","Method":"ping","id":1}`, // case-sensitive: no method, so a response without result: invalid
		`{"jsonrpc":"2.0","method":1,"id":1}`,
		`{"jsonrpc":"2.0","method":"ping","id":{}}`,
	} {
		if _, err := decodeMessage([]byte(body)); err != errInvalid {
			t.Errorf("decodeMessage(%s) = %v, want errInvalid", body, err)
		}
	}
}

func TestLosslessUnicode(t *testing.T) {
	tests := []struct {
		name string
		body string
		want bool
	}{
		{"ascii", `{"a":"b"}`, true},
		{"raw multibyte", `{"a":"héllo 😀"}`, true},
		{"escapes", `{"a":"\n\t\"\\\/\u0041\u00e9"}`, true},
		{"surrogate pair", `{"a":"\ud83d\ude00"}`, true},
		{"surrogate pair upper case", `{"a":"\uD83D\uDE00"}`, true},
		{"escaped backslash then u", `{"a":"\\ud800"}`, true},
		{"escaped backslashes then a pair", `{"a":"\\\\\ud83d\ude00"}`, true},
		{"U+FFFD escaped", `{"a":"\ufffd"}`, true},
		{"raw 0xff", "{\"a\":\"\xff\"}", false},
		{"raw 0xff in a name", "{\"\xff\":1}", false},
		{"truncated sequence", "{\"a\":\"\xc3\"}", false},
		{"encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", false},
		{"lone high", `{"a":"\ud800"}`, false},
		{"lone high then letter", `{"a":"\ud800x"}`, false},
		{"high then escape", `{"a":"\ud800\n"}`, false},
		{"two highs", `{"a":"\ud800\ud800"}`, false},
		{"lone low", `{"a":"\udc00"}`, false},
		{"low then high", `{"a":"\ude00\ud83d"}`, false},
		{"lone high after escaped backslash", `{"a":"\\\ud800"}`, false},
		{"lone high in a name", `{"\ud800":1}`, false},
	}
	for _, test := range tests {
		if !json.Valid([]byte(test.body)) {
			t.Fatalf("%s: %s is not valid JSON", test.name, test.body)
		}
		if got := losslessUnicode([]byte(test.body)); got != test.want {
			t.Errorf("losslessUnicode(%s) = %v, want %v (%s)", test.body, got, test.want, test.name)
		}
	}
}

func TestIDKey(t *testing.T) {
	same := [][]string{
		{`"1"`, `"\u0031"`},
		{`"a/b"`, `"a\/b"`, `"\u0061\/b"`},
		{`"é"`, `"\u00e9"`, `"\u00E9"`},
		{`""`},
		{`1`, `1.0`, `1e0`, `10e-1`, `0.1e1`},
		{`0`, `-0`, `0.0`, `-0e3`},
		{`-7`, `-7.00`, `-0.7e1`},
		{`9223372036854775807`, `9.223372036854775807e18`},
	}
	keys := map[string]string{} // key -> the first spelling that had it
	for _, group := range same {
		want, ok := idKey([]byte(group[0]))
		if !ok {
			t.Fatalf("idKey(%s) not ok", group[0])
		}
		if first, dup := keys[want]; dup {
			t.Fatalf("idKey(%s) = %q, the key of %s too", group[0], want, first)
		}
		keys[want] = group[0]
		for _, spelling := range group[1:] {
			if got, ok := idKey([]byte(spelling)); !ok || got != want {
				t.Errorf("idKey(%s) = %q, %v; want %q, the key of %s", spelling, got, ok, want, group[0])
			}
		}
	}
	for _, raw := range []string{``, `1.5`, `1e-1`, `9223372036854775808`, `1e19`, `null`, `true`, `{}`, `[1]`} {
		if key, ok := idKey([]byte(raw)); ok {
			t.Errorf("idKey(%s) = %q, want not ok", raw, key)
		}
	}
}

package transport

import (
	"bytes"
	"encoding/json"
	"testing"
)

func TestSplitBatch(t *testing.T) {
	for _, test := range []struct {
		name, body string
		want       []string // nil: errInvalid
	}{
		{"one", `[{"a":1}]`, []string{`{"a":1}`}},
		{"spaces", " [ 1 ,\n\"x\" , [2,3] ,{} ] ", []string{`1`, `"x"`, `[2,3]`, `{}`}},
		{"empty", `[]`, nil},
		{"empty with space", `[ ]`, nil},
		{"not an array", `{"a":[1]}`, nil},
	} {
		t.Run(test.name, func(t *testing.T) {
			got, err := splitBatch([]byte(test.body))
			if test.want == nil {
				if err == nil {
					t.Fatalf("splitBatch(%q) = %q, want an error", test.body, got)
				}
				return
			}
			if err != nil || len(got) != len(test.want) {
				t.Fatalf("splitBatch(%q) = %q, %v; want %q", test.body, got, err, test.want)
			}
			for i := range got {
				if string(got[i]) != test.want[i] {
					t.Errorf("splitBatch(%q)[%d] = %q, want %q", test.body, i, got[i], test.want[i])
				}
			}
		})
	}
}

// FuzzSplitBatch: for every valid JSON array, splitBatch's elements are
// encoding/json's, byte for byte, and it never reads out of bounds; a
// valid JSON value that is not a non-empty array is refused.
func FuzzSplitBatch(f *testing.F) {
	f.Add([]byte(`[{"jsonrpc":"2.0","id":1,"method":"ping"}, 2 ,"x"]`))
	f.Add([]byte(`[[],[[]],{"a":[1,{"b":"]"}]}]`))
	f.Add([]byte(`[]`))
	f.Add([]byte(` {"a":1} `))
	f.Fuzz(func(t *testing.T, body []byte) {
		if !json.Valid(body) {
			return
		}
		got, err := splitBatch(body)
		var want []json.RawMessage
		if json.Unmarshal(body, &want) != nil || len(want) == 0 {
			if err == nil {
				t.Fatalf("splitBatch(%q) = %q, want an error", body, got)
			}
			return
		}
		if err != nil || len(got) != len(want) {
			t.Fatalf("splitBatch(%q) = %q, %v; want %q", body, got, err, want)
		}
		for i := range got {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("splitBatch(%q)[%d] = %q, want %q", body, i, got[i], want[i])
			}
		}
	})
}

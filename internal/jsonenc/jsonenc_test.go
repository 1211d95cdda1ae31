package jsonenc

import (
	"encoding/json"
	"testing"
)

// TestEncodedIsMarshal: an Encoded holds json.Marshal's bytes for its
// value (HTML and line separators escaped, compact), writes them
// unchanged inside another value and through JSON (as JSON writes any
// other value), and the zero Encoded is null.
func TestEncodedIsMarshal(t *testing.T) {
	v := map[string]any{"b": []any{1, "<a & b>"}, "a": "\u2028 x"}
	want, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	e, err := Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if string(e.Bytes()) != string(want) {
		t.Fatalf("Bytes = %s, want %s", e.Bytes(), want)
	}
	outer, err := json.Marshal(struct {
		X Encoded `json:"x"`
	}{e})
	if err != nil || string(outer) != `{"x":`+string(want)+`}` {
		t.Fatalf("inside a struct: %s, %v", outer, err)
	}
	if b, err := JSON(e); err != nil || string(b) != string(want) {
		t.Fatalf("JSON(Encoded) = %s, %v; want %s", b, err, want)
	}
	if b, err := JSON(v); err != nil || string(b) != string(want) {
		t.Fatalf("JSON(value) = %s, %v; want %s", b, err, want)
	}
	if b, err := json.Marshal(Encoded{}); err != nil || string(b) != "null" {
		t.Fatalf("zero Encoded = %s, %v; want null", b, err)
	}
	if _, err := Marshal(func() {}); err == nil {
		t.Fatal("Marshal of a func: no error")
	}
}

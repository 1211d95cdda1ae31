package transport

import (
	"fmt"
	"testing"
)

func TestParseEventID(t *testing.T) {
	tests := []struct {
		id          string
		ok          bool
		stream, seq uint32
	}{
		{"1.0", true, 1, 0},
		{"12.345", true, 12, 345},
		{"4294967295.4294967295", true, 1<<32 - 1, 1<<32 - 1},
		{"4294967296.0", false, 0, 0},
		{"1.4294967296", false, 0, 0},
		{"0.1", false, 0, 0}, // stream ids start at 1
		{"01.1", false, 0, 0},
		{"1.01", false, 0, 0},
		{"1.", false, 0, 0},
		{".1", false, 0, 0},
		{"1", false, 0, 0},
		{"1.2.3", false, 0, 0},
		{"+1.2", false, 0, 0},
		{"-1.2", false, 0, 0},
		{" 1.2", false, 0, 0},
		{"1.2 ", false, 0, 0},
		{"1e3.2", false, 0, 0},
		{"", false, 0, 0},
		{"١.٢", false, 0, 0}, // digits of another script
	}
	for _, tt := range tests {
		stream, seq, ok := parseEventID(tt.id)
		if ok != tt.ok || stream != tt.stream || seq != tt.seq {
			t.Errorf("parseEventID(%q) = %d, %d, %v; want %d, %d, %v", tt.id, stream, seq, ok, tt.stream, tt.seq, tt.ok)
		}
	}
}

// FuzzEventID: every id the endpoint writes reads back as itself, and
// every string that reads as an id is the one the endpoint would write
// for it (one spelling per event, so one event cannot be named twice).
func FuzzEventID(f *testing.F) {
	f.Add("1.0")
	f.Add("4294967295.17")
	f.Add("01.2")
	f.Add("1..2")
	f.Add("99999999999.1")
	f.Fuzz(func(t *testing.T, id string) {
		stream, seq, ok := parseEventID(id)
		if !ok {
			return
		}
		if got := string(appendEventID(nil, stream, seq)); got != id {
			t.Fatalf("parseEventID(%q) = %d.%d, which is written %q", id, stream, seq, got)
		}
	})
}

func FuzzEventIDRoundTrip(f *testing.F) {
	f.Add(uint32(1), uint32(0))
	f.Add(uint32(1<<32-1), uint32(1<<32-1))
	f.Fuzz(func(t *testing.T, stream, seq uint32) {
		id := string(appendEventID(nil, stream, seq))
		gs, gq, ok := parseEventID(id)
		if stream == 0 {
			if ok {
				t.Fatalf("parseEventID(%q) accepted stream 0", id)
			}
			return
		}
		if !ok || gs != stream || gq != seq {
			t.Fatalf("parseEventID(%q) = %d, %d, %v", id, gs, gq, ok)
		}
	})
}

func ExampleappendEvent() {
	fmt.Printf("%s", appendEvent(nil, 3, 7, []byte(`{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}`)))
	// Output:
	// id: 3.7
	// event: message
	// data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}
}

package result

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestReadSkipsHumanLines(t *testing.T) {
	want := Result{Impl: "runtime", Mode: ModeCalls, Sessions: 16, Rate: 1234.5, P99Ms: 3.25}
	line, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	in := "building...\n" + string(line) + "\n" + want.String() + "\n\n"
	got, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("Read = %+v, want [%+v]", got, want)
	}
}

func TestReadReportsBadJSON(t *testing.T) {
	if _, err := Read(strings.NewReader("{\"impl\":\n")); err == nil {
		t.Fatal("Read of a truncated JSON line: no error")
	}
}

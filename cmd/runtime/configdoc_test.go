package main

import (
	"flag"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite docs/configuration.md from the flags")

// TestConfigurationDoc keeps docs/configuration.md what configurationDoc
// renders from the flags, so the page cannot drift from the command line;
// -update rewrites it.
func TestConfigurationDoc(t *testing.T) {
	const path = "../../docs/configuration.md"
	got, err := configurationDoc()
	if err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/runtime -run TestConfigurationDoc -update)", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("docs/configuration.md is not what the flags say (-want +got); run with -update:\n%s", diff)
	}
}

package codex_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/codex"
)

// schemaFile is the part of a generated schema file the test reads: the
// message variants, each with its method's one-value enum and its params.
type schemaFile struct {
	OneOf []struct {
		Properties struct {
			Method struct {
				Enum []string `json:"enum"`
			} `json:"method"`
			Params struct {
				Ref string `json:"$ref"`
			} `json:"params"`
		} `json:"properties"`
	} `json:"oneOf"`
	Definitions map[string]struct {
		Properties map[string]json.RawMessage `json:"properties"`
	} `json:"definitions"`
}

// TestProtocolPinned regenerates the app-server's JSON schema from the
// pinned binary and checks that every method the driver sends, answers or
// listens to exists in it, and that every params field it sends is one
// the schema declares.
func TestProtocolPinned(t *testing.T) {
	bin := agenttest.Binary(t, "codex")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "app-server", "generate-json-schema", "--out", dir)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + agenttest.Home(t), "CODEX_HOME=" + t.TempDir()}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("codex app-server generate-json-schema: %v\n%s", err, out)
	}
	for file, methods := range codex.UsedMethods {
		raw, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		var s schemaFile
		if err := json.Unmarshal(raw, &s); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		params := map[string]string{} // method → its params definition
		for _, v := range s.OneOf {
			for _, m := range v.Properties.Method.Enum {
				params[m] = strings.TrimPrefix(v.Properties.Params.Ref, "#/definitions/")
			}
		}
		for _, m := range methods {
			def, ok := params[m]
			if !ok {
				t.Errorf("%s: no method %q in Codex %s's schema", file, m, "0.169.0")
				continue
			}
			p, sent := codex.RequestParams[m]
			if !sent {
				continue
			}
			props := s.Definitions[def].Properties
			for _, f := range jsonFields(reflect.TypeOf(p)) {
				if _, ok := props[f]; !ok {
					t.Errorf("%s: %s params (%s) has no field %q", file, m, def, f)
				}
			}
		}
	}
}

// jsonFields returns the JSON names of a struct type's fields.
func jsonFields(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			out = append(out, name)
		}
	}
	return out
}

package fastschema_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"pgregory.net/rapid"

	"github.com/agenthost/mcpruntime/internal/fastschema"
)

// full is the reference: the validator the runtime asks when the fast
// path cannot tell, compiled as the runtime compiles a tool's schema.
func full(t interface {
	Helper()
	Fatal(...any)
	Fatalf(string, ...any)
}, schema string) func(args []byte) error {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(schema))
	if err != nil {
		t.Fatalf("schema %s: %v", schema, err)
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	if err := c.AddResource("test.json", doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile("test.json")
	if err != nil {
		t.Fatalf("compile %s: %v", schema, err)
	}
	return func(args []byte) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
		if err != nil {
			return err
		}
		return sch.Validate(v)
	}
}

// TestCompile: schemas in the subset compile, others do not (their calls
// all go to the full validator).
func TestCompile(t *testing.T) {
	for _, tt := range []struct {
		schema string
		fast   bool
	}{
		{`{"type":"object"}`, true},
		{`{"type":"object","properties":{}}`, true},
		{`{"type":"object","properties":{"text":{"type":"string","minLength":1,"maxLength":65536,"description":"d"}},"required":["text"],"additionalProperties":false,"x-mcp-header":1}`, true},
		{`{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number"},"b":{"type":"boolean"},"any":{}}}`, true},
		{`{"$schema":"https://json-schema.org/draft/2020-12/schema","type":"object","title":"t"}`, true},
		{`{"type":"object","properties":{"a":{"type":"string","format":"email"}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"array"}}}`, false},
		{`{"type":"object","properties":{"a":{"type":["string","null"]}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"integer","minimum":1}}}`, false},
		{`{"type":"object","properties":{"a":{"type":"integer","minLength":1}}}`, false},
		{`{"type":"object","properties":{"a":{"enum":["x"]}}}`, false},
		{`{"type":"object","properties":{"a":true}}`, false},
		{`{"type":"object","additionalProperties":{"type":"string"}}`, false},
		{`{"type":"object","patternProperties":{"^a":{}}}`, false},
		{`{"type":"object","$ref":"#/$defs/x","$defs":{"x":{}}}`, false},
		{`{"type":"object","required":["z"],"additionalProperties":false}`, false},
		{`{"type":"string"}`, false},
		{`{"type":["object"]}`, false},
		{`[]`, false},
	} {
		if got := fastschema.Compile(json.RawMessage(tt.schema)) != nil; got != tt.fast {
			t.Errorf("Compile(%s) fast = %v, want %v", tt.schema, got, tt.fast)
		}
	}
}

// TestValid: what the fast path calls valid, and what it leaves to the full
// validator (it never says "invalid": false means "ask").
func TestValid(t *testing.T) {
	const schema = `{"type":"object","properties":{"text":{"type":"string","minLength":1,"maxLength":3},` +
		`"n":{"type":"integer"},"x":{"type":"number"},"b":{"type":"boolean"},"any":{}},"required":["text"],"additionalProperties":false}`
	s := fastschema.Compile(json.RawMessage(schema))
	if s == nil {
		t.Fatal("schema not compiled")
	}
	ref := full(t, schema)
	for _, tt := range []struct {
		args string
		fast bool
	}{
		{`{"text":"hi"}`, true},
		{` { "text" : "héé" , "n" : -12, "x": 1.5e3, "b": false, "any": {"deep":[1,{"a":"}"}]} } `, true},
		{`{"text":"héé!"}`, false},       // too long: the full validator says why
		{`{"text":""}`, false},           // too short
		{`{"text":"\u0068i"}`, false},    // an escape in a bounded string: ask
		{`{"text":"hi","n":1.0}`, false}, // an integer written 1.0: ask (the full validator takes it)
		{`{"text":"hi","n":"1"}`, false},
		{`{"text":"hi","text":"ho"}`, false}, // a key twice
		{`{"text":"hi","zz":1}`, false},      // not allowed
		{`{"n":1}`, false},                   // required missing
		{`{"text":null}`, false},
		{`{}`, false},
		{`[]`, false},
		{`{"text":"hi"} x`, false},
		{`{"text":"hi"`, false},
		{`{"te\u0078t":"hi"}`, false}, // an escaped key: ask
	} {
		got := s.Valid([]byte(tt.args))
		if got != tt.fast {
			t.Errorf("Valid(%s) = %v, want %v", tt.args, got, tt.fast)
		}
		if got {
			if err := ref([]byte(tt.args)); err != nil {
				t.Errorf("Valid(%s) = true, but the full validator says %v", tt.args, err)
			}
		}
	}
	open := fastschema.Compile(json.RawMessage(`{"type":"object"}`))
	for _, args := range []string{`{}`, `{"a":[1,2,{"b":"]"}],"c":"\\"}`} {
		if !open.Valid([]byte(args)) {
			t.Errorf("open schema: Valid(%s) = false, want true", args)
		}
	}
	if s := (*fastschema.Schema)(nil); s.Valid([]byte(`{}`)) {
		t.Error("a nil Schema said valid")
	}
}

// TestValidAllocatesNothing: the point of the fast path.
func TestValidAllocatesNothing(t *testing.T) {
	s := fastschema.Compile(json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","maxLength":10}},"required":["text"]}`))
	args := []byte(`{"text":"hello","other":{"a":[1,2]}}`)
	if n := testing.AllocsPerRun(100, func() {
		if !s.Valid(args) {
			t.Fatal("not valid")
		}
	}); n != 0 {
		t.Errorf("Valid allocates %v times a call, want 0", n)
	}
}

var names = []string{"a", "b", "text", "n", "é"}

// genSchema draws a schema of the subset.
func genSchema(t *rapid.T) string {
	var props []string
	for _, name := range rapid.SliceOfDistinct(rapid.SampledFrom(names), func(s string) string { return s }).Draw(t, "props") {
		var kw []string
		switch rapid.IntRange(0, 4).Draw(t, "kind") {
		case 0:
		case 1:
			kw = append(kw, `"type":"string"`)
			if rapid.Bool().Draw(t, "min") {
				kw = append(kw, fmt.Sprintf(`"minLength":%d`, rapid.IntRange(0, 3).Draw(t, "minLength")))
			}
			if rapid.Bool().Draw(t, "max") {
				kw = append(kw, fmt.Sprintf(`"maxLength":%d`, rapid.IntRange(0, 4).Draw(t, "maxLength")))
			}
		case 2:
			kw = append(kw, `"type":"integer"`)
		case 3:
			kw = append(kw, `"type":"number"`)
		case 4:
			kw = append(kw, `"type":"boolean"`)
		}
		if rapid.Bool().Draw(t, "description") {
			kw = append(kw, `"description":"d"`)
		}
		props = append(props, fmt.Sprintf(`%q:{%s}`, name, strings.Join(kw, ",")))
	}
	kw := []string{`"type":"object"`, `"properties":{` + strings.Join(props, ",") + `}`}
	if req := rapid.SliceOfDistinct(rapid.SampledFrom(names), func(s string) string { return s }).Draw(t, "required"); len(req) > 0 {
		b, _ := json.Marshal(req)
		kw = append(kw, `"required":`+string(b))
	}
	switch rapid.IntRange(0, 2).Draw(t, "additional") {
	case 1:
		kw = append(kw, `"additionalProperties":false`)
	case 2:
		kw = append(kw, `"additionalProperties":true`)
	}
	return "{" + strings.Join(kw, ",") + "}"
}

// genValue draws a JSON value, some of the kinds the fast path must be
// careful with among them.
func genValue(t *rapid.T, depth int) string {
	choices := []string{`""`, `"a"`, `"hé"`, `"abcd"`, `"\u0061"`, `"a\"b"`, `"\\"`, `"]}"`,
		`0`, `-0`, `1`, `-12`, `1.0`, `1e2`, `-1.5`, `123456789012345678901234567890`,
		`true`, `false`, `null`}
	if depth < 2 {
		switch rapid.IntRange(0, 5).Draw(t, "composite") {
		case 0:
			return "[" + genValue(t, depth+1) + "," + genValue(t, depth+1) + "]"
		case 1:
			return `{"k":` + genValue(t, depth+1) + "}"
		}
	}
	return rapid.SampledFrom(choices).Draw(t, "value")
}

// genArgs draws arguments: mostly an object of the schema's names and
// others (some escaped, some twice), sometimes something else.
func genArgs(t *rapid.T) string {
	switch rapid.IntRange(0, 9).Draw(t, "shape") {
	case 0:
		return rapid.SampledFrom([]string{`[]`, `null`, `"x"`, `{`, `{"a":1}}`, `{"a":}`, ``, `{} {}`}).Draw(t, "odd")
	}
	keys := append(append([]string(nil), names...), "zz", `\u0061`)
	var members []string
	for range rapid.IntRange(0, 5).Draw(t, "members") {
		key := rapid.SampledFrom(keys).Draw(t, "key")
		members = append(members, `"`+key+`":`+genValue(t, 0))
	}
	space := rapid.SampledFrom([]string{"", " ", "\n\t"}).Draw(t, "space")
	return space + "{" + space + strings.Join(members, space+","+space) + space + "}" + space
}

// TestFastPathIsSound: for any schema of the subset and any arguments,
// whatever the fast path calls valid the full validator accepts.
func TestFastPathIsSound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		schema := genSchema(t)
		s := fastschema.Compile(json.RawMessage(schema))
		if s == nil {
			// A required name the schema neither describes nor allows: no
			// fast path (every call to the full validator).
			if !strings.Contains(schema, `"additionalProperties":false`) {
				t.Fatalf("a schema of the subset did not compile: %s", schema)
			}
			return
		}
		ref := full(t, schema)
		for range 8 {
			args := genArgs(t)
			if s.Valid([]byte(args)) {
				if err := ref([]byte(args)); err != nil {
					t.Fatalf("schema %s: the fast path calls %s valid, the full validator: %v", schema, args, err)
				}
			}
		}
	})
}

// TestValidJSONIsJSONValid: the fast path's own JSON check agrees with
// json.Valid on every input, well-formed or not (FuzzValidJSON goes on
// from here).
func TestValidJSONIsJSONValid(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var in []byte
		if rapid.Bool().Draw(t, "json") {
			in = []byte(genArgs(t))
			// A mangled byte or two, now and then.
			for range rapid.IntRange(0, 2).Draw(t, "mangles") {
				if len(in) > 0 {
					in[rapid.IntRange(0, len(in)-1).Draw(t, "at")] = rapid.SampledFrom([]byte(`{}[]":,\\ 0-.eE+tfnu"a`)).Draw(t, "byte")
				}
			}
		} else {
			in = rapid.SliceOfN(rapid.SampledFrom([]byte(`{}[]":,\\ 0123-.eE+truefalsn\t\x01\xff`)), 0, 24).Draw(t, "bytes")
		}
		if got, want := fastschema.ValidJSON(in), json.Valid(in); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid %v", in, got, want)
		}
	})
}

func FuzzValidJSON(f *testing.F) {
	for _, seed := range []string{`{}`, `{"a":[1,2.5e-3,"\\u00e9",true,null]}`, `[`, `01`, `"\\x"`, `1.`, `-`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if got, want := fastschema.ValidJSON(in), json.Valid(in); got != want {
			t.Fatalf("ValidJSON(%q) = %v, json.Valid %v", in, got, want)
		}
	})
}

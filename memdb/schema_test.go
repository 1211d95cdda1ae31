package memdb

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	gomemdb "github.com/hashicorp/go-memdb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the current code")

// recordTypes maps every table to the record type stored in it.
var recordTypes = map[string]reflect.Type{
	TableThreads:          reflect.TypeFor[Thread](),
	TableInstances:        reflect.TypeFor[Instance](),
	TableProviderSessions: reflect.TypeFor[ProviderSession](),
	TableCredentials:      reflect.TypeFor[Credential](),
	TableClientGrants:     reflect.TypeFor[ClientGrant](),
	TableMCPSessions:      reflect.TypeFor[MCPSession](),
	tableRevisions:        reflect.TypeFor[revision](),
}

func TestSchemaValid(t *testing.T) {
	schema := Schema()
	if err := schema.Validate(); err != nil {
		t.Fatalf("Schema().Validate() = %v, want nil", err)
	}
	if _, err := gomemdb.NewMemDB(Schema()); err != nil {
		t.Fatalf("gomemdb.NewMemDB(Schema()) = %v, want nil", err)
	}

	wantTables := sortedKeys(recordTypes)
	gotTables := sortedKeys(schema.Tables)
	if diff := cmp.Diff(wantTables, gotTables); diff != "" {
		t.Errorf("Schema() tables mismatch (-want +got):\n%s", diff)
	}

	for _, name := range gotTables {
		table := schema.Tables[name]
		t.Run(name, func(t *testing.T) {
			if table.Name != name {
				t.Errorf("Tables[%q].Name = %q, want %q", name, table.Name, name)
			}
			for key, idx := range table.Indexes {
				if idx.Name != key {
					t.Errorf("Indexes[%q].Name = %q, want %q", key, idx.Name, key)
				}
			}
			id, ok := table.Indexes[IndexID]
			if !ok {
				t.Fatalf("table %q has no %q index", name, IndexID)
			}
			if !id.Unique {
				t.Errorf("table %q index %q Unique = false, want true", name, IndexID)
			}
			if id.AllowMissing {
				t.Errorf("table %q index %q AllowMissing = true, want false", name, IndexID)
			}
			var want gomemdb.Indexer = &gomemdb.StringFieldIndex{Field: "ID"}
			if name == TableMCPSessions {
				want = mcpSessionIDIndex{} // the same keys (TestMCPSessionIDIndex)
			}
			if diff := cmp.Diff(want, id.Indexer); diff != "" {
				t.Errorf("table %q index %q indexer mismatch (-want +got):\n%s", name, IndexID, diff)
			}
		})
	}
}

// TestSchemaFieldsExist checks that every field an indexer names exists on
// the table's record type with a type the indexer can read. go-memdb only
// notices a misspelt field when a row is inserted.
func TestSchemaFieldsExist(t *testing.T) {
	stringType := reflect.TypeFor[string]()
	stringsType := reflect.TypeFor[[]string]()
	var check func(t *testing.T, rec reflect.Type, where string, ix gomemdb.Indexer)
	check = func(t *testing.T, rec reflect.Type, where string, ix gomemdb.Indexer) {
		var field string
		var want reflect.Type
		switch ix := ix.(type) {
		case *gomemdb.StringFieldIndex:
			field, want = ix.Field, stringType
		case *gomemdb.StringSliceFieldIndex:
			field, want = ix.Field, stringsType
		case mcpSessionIDIndex:
			field, want = "ID", stringType
		case *gomemdb.CompoundIndex:
			for i, sub := range ix.Indexes {
				check(t, rec, fmt.Sprintf("%s sub-index %d", where, i), sub)
			}
			return
		default:
			t.Errorf("%s: indexer %T is not covered by this test; extend it", where, ix)
			return
		}
		f, ok := rec.FieldByName(field)
		if !ok {
			t.Errorf("%s: field %q does not exist on %v", where, field, rec)
			return
		}
		if f.Type != want {
			t.Errorf("%s: field %v.%s has type %v, want %v", where, rec, field, f.Type, want)
		}
	}
	schema := Schema()
	for _, name := range sortedKeys(schema.Tables) {
		rec, ok := recordTypes[name]
		if !ok {
			t.Errorf("table %q has no record type in recordTypes", name)
			continue
		}
		for _, idx := range sortedKeys(schema.Tables[name].Indexes) {
			check(t, rec, fmt.Sprintf("table %q index %q", name, idx), schema.Tables[name].Indexes[idx].Indexer)
		}
	}
}

// TestSchemaIsFresh checks that Schema returns a new value each call, so a
// caller changing one cannot change the schema of a store built later.
func TestSchemaIsFresh(t *testing.T) {
	a := Schema()
	delete(a.Tables, TableThreads)
	a.Tables[TableCredentials].Indexes[IndexTokenHash].Unique = false

	b := Schema()
	if _, ok := b.Tables[TableThreads]; !ok {
		t.Errorf("Schema() after deleting a table from an earlier result lacks table %q", TableThreads)
	}
	if !b.Tables[TableCredentials].Indexes[IndexTokenHash].Unique {
		t.Errorf("Schema() after changing an earlier result: %s.%s Unique = false, want true", TableCredentials, IndexTokenHash)
	}
}

func TestSchemaGolden(t *testing.T) {
	got := dumpSchema(Schema())
	path := filepath.Join("testdata", "schema.golden")
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s", path)
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run `go test ./memdb -run TestSchemaGolden -update` to create it): %v", err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("schema dump mismatch (-want +got); if the change is intended, rerun with -update:\n%s", diff)
	}
}

// TestDumpSchemaDeterministic guards the golden test itself: the dump must
// not depend on map iteration order.
func TestDumpSchemaDeterministic(t *testing.T) {
	first := dumpSchema(Schema())
	for range 20 {
		if got := dumpSchema(Schema()); got != first {
			t.Fatalf("dumpSchema(Schema()) differs between calls:\n%s", cmp.Diff(first, got))
		}
	}
}

// dumpSchema renders schema as text: tables sorted by name, indexes sorted by
// name, each with its flags and a description of its indexer.
func dumpSchema(schema *gomemdb.DBSchema) string {
	var b strings.Builder
	for _, name := range sortedKeys(schema.Tables) {
		table := schema.Tables[name]
		fmt.Fprintf(&b, "table %s (name=%q)\n", name, table.Name)
		for _, key := range sortedKeys(table.Indexes) {
			idx := table.Indexes[key]
			fmt.Fprintf(&b, "  index %s (name=%q) unique=%t allow_missing=%t\n", key, idx.Name, idx.Unique, idx.AllowMissing)
			fmt.Fprintf(&b, "    %s\n", describe(reflect.ValueOf(idx.Indexer)))
		}
	}
	return b.String()
}

// describe renders an indexer value deterministically: type names, exported
// fields in declaration order, slices element by element, and no pointers.
func describe(v reflect.Value) string {
	switch v.Kind() {
	case reflect.Invalid:
		return "nil"
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return "nil"
		}
		return describe(v.Elem())
	case reflect.Func:
		if v.IsNil() {
			return "nil"
		}
		return "func"
	case reflect.Struct:
		var fields []string
		for i := range v.NumField() {
			f := v.Type().Field(i)
			if !f.IsExported() {
				continue
			}
			fields = append(fields, f.Name+": "+describe(v.Field(i)))
		}
		return typeName(v.Type()) + "{" + strings.Join(fields, ", ") + "}"
	case reflect.Slice, reflect.Array:
		elems := make([]string, v.Len())
		for i := range v.Len() {
			elems[i] = describe(v.Index(i))
		}
		return "[" + strings.Join(elems, ", ") + "]"
	case reflect.String:
		return fmt.Sprintf("%q", v.String())
	default:
		return fmt.Sprintf("%v", v.Interface())
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// typeName names go-memdb's types gomemdb.X, as this package imports them,
// so they cannot be mistaken for this package's own.
func typeName(t reflect.Type) string {
	if t.PkgPath() == "github.com/hashicorp/go-memdb" {
		return "gomemdb." + t.Name()
	}
	return t.String()
}

// TestMCPSessionIDIndex: the typed id index of mcp_sessions makes the keys
// gomemdb.StringFieldIndex{Field: "ID"} makes, from records and from
// arguments, and fails where it fails.
func TestMCPSessionIDIndex(t *testing.T) {
	ref := &gomemdb.StringFieldIndex{Field: "ID"}
	typed := mcpSessionIDIndex{}
	for _, id := range []string{"mcps_abc", "", "a\x00b", "é"} {
		wantOK, wantKey, wantErr := ref.FromObject(&MCPSession{ID: id})
		gotOK, gotKey, gotErr := typed.FromObject(&MCPSession{ID: id})
		if gotOK != wantOK || string(gotKey) != string(wantKey) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("FromObject(ID %q) = %v, %q, %v, want %v, %q, %v", id, gotOK, gotKey, gotErr, wantOK, wantKey, wantErr)
		}
		wantArg, wantErr := ref.FromArgs(id)
		gotArg, gotErr := typed.FromArgs(id)
		if string(gotArg) != string(wantArg) || (gotErr == nil) != (wantErr == nil) {
			t.Errorf("FromArgs(%q) = %q, %v, want %q, %v", id, gotArg, gotErr, wantArg, wantErr)
		}
	}
	for _, args := range [][]any{nil, {"a", "b"}, {1}} {
		if _, err := typed.FromArgs(args...); err == nil {
			t.Errorf("FromArgs(%v) = nil error, want one", args)
		}
	}
	if _, _, err := typed.FromObject(&Thread{ID: "t"}); err == nil {
		t.Errorf("FromObject(*Thread) = nil error, want one")
	}
}

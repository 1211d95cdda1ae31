package memdb

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestEveryIndexHasAReader holds the schema to its comments' promise: an
// index exists only where a Reader method queries it, and a Reader method
// exists only where production code (outside memdb, tests not counted)
// calls it. A stale index costs a radix-tree path per row for a query no
// code runs.
func TestEveryIndexHasAReader(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "store.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	consts := schemaConstants(t)
	// queried: "table/index" pairs named by a Reader method's call of first,
	// list or count, or by a direct txn read.
	queried := map[string]bool{}
	var methods []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil || !isReaderRecv(fn.Recv) || !fn.Name.IsExported() {
			continue
		}
		methods = append(methods, fn.Name.Name)
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			var tableIdx []ast.Expr
			for _, a := range call.Args {
				if id, ok := a.(*ast.Ident); ok && (strings.HasPrefix(id.Name, "Table") || strings.HasPrefix(id.Name, "Index")) {
					tableIdx = append(tableIdx, id)
				}
			}
			if len(tableIdx) >= 2 {
				queried[consts[tableIdx[0].(*ast.Ident).Name]+"/"+consts[tableIdx[1].(*ast.Ident).Name]] = true
			}
			return true
		})
	}
	for name, table := range Schema().Tables {
		if name == tableRevisions {
			continue // internal: read by a write through a Log (log.go), not by a Reader method
		}
		for idx := range table.Indexes {
			if !queried[name+"/"+idx] {
				t.Errorf("index %s.%s: no Reader method queries it; delete it (and its comment) or add the read that needs it", name, idx)
			}
		}
	}

	prod := productionSources(t)
	for _, m := range methods {
		if !regexp.MustCompile(`\.` + m + `\(`).MatchString(prod) {
			t.Errorf("Reader.%s: no production code outside memdb calls it; delete it, or keep it with the caller that needs it", m)
		}
	}
}

func isReaderRecv(fl *ast.FieldList) bool {
	if len(fl.List) != 1 {
		return false
	}
	star, ok := fl.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	id, ok := star.X.(*ast.Ident)
	return ok && id.Name == "Reader"
}

// schemaConstants maps the Table* and Index* constants of schema.go to
// their values.
func schemaConstants(t *testing.T) map[string]string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "schema.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			vs := s.(*ast.ValueSpec)
			for i, n := range vs.Names {
				if lit, ok := vs.Values[i].(*ast.BasicLit); ok {
					out[n.Name], _ = strconv.Unquote(lit.Value)
				}
			}
		}
	}
	return out
}

// productionSources returns the module's non-test Go sources outside memdb
// (and outside bench/, a module of its own), concatenated.
func productionSources(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch filepath.Base(path) {
			case "memdb", "bench", "testdata", ".git":
				if path != ".." {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		b.Write(src)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

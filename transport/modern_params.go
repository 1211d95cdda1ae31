package transport

import (
	"encoding/json"
	"math/big"
	"net/http"
	"strings"

	"github.com/agenthost/mcpruntime/internal/principal"
)

// ParamHeader is one tool parameter marked x-mcp-header: the argument at
// Path (property names from the arguments object down), mirrored in the
// header Mcp-Param-{Header}; Type is its schema type ("string", "integer"
// or "boolean").
type ParamHeader struct {
	Header string
	Path   []string
	Type   string
}

// ParamHeaders is implemented by a Backend whose tools mark parameters
// x-mcp-header: the marks of the tool named, as p sees it (none for a tool
// p may not call or that does not exist).
type ParamHeaders interface {
	ParamHeaders(p principal.Principal, tool string) []ParamHeader
}

// checkParamHeaders is ladder step 7: each x-mcp-header parameter of the
// tool called present in params.arguments (not null) must come with its
// Mcp-Param-* header, equal once decoded (numbers compared as numbers,
// booleans as true/false); else -32020. Headers of no mark are ignored.
func (s *Server) checkParamHeaders(r *http.Request, p caller, params json.RawMessage) *rejection {
	ph, ok := s.backend.(ParamHeaders)
	if !ok {
		return nil
	}
	var name string
	var args []byte
	_ = eachMember(params, func(n, value []byte) error {
		switch string(n) {
		case "name":
			_ = stringValue(value, &name)
		case "arguments":
			args = value
		}
		return nil
	})
	marks := ph.ParamHeaders(p.Principal, name)
	if len(marks) == 0 || args == nil || args[0] != '{' {
		return nil
	}
	for _, m := range marks {
		v := memberAt(args, m.Path)
		if v == nil || string(v) == "null" {
			continue // absent or null: no header expected
		}
		got, ok := headerValue(r.Header.Values(headerParamStart + m.Header))
		if !ok || !sameParam(v, got) {
			return &rejection{f: failHeaderMismatch, message: "Mcp-Param-" + m.Header + " header does not match params.arguments." + strings.Join(m.Path, ".")}
		}
	}
	return nil
}

// memberAt is the raw value at path in the object obj, or nil.
func memberAt(obj []byte, path []string) []byte {
	for _, name := range path {
		if len(obj) == 0 || obj[0] != '{' {
			return nil
		}
		var next []byte
		_ = eachMember(obj, func(n, value []byte) error {
			if string(n) == name {
				next = value
			}
			return nil
		})
		obj = next
	}
	return obj
}

// sameParam reports whether the header value h mirrors the JSON value v.
func sameParam(v []byte, h string) bool {
	switch {
	case v[0] == '"':
		var s string
		return stringValue(v, &s) == nil && s == h
	case string(v) == "true" || string(v) == "false":
		return string(v) == h
	}
	a, ok1 := new(big.Rat).SetString(string(v))
	b, ok2 := new(big.Rat).SetString(h)
	return ok1 && ok2 && a.Cmp(b) == 0
}

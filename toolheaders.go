package mcpruntime

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/agenthost/mcpruntime/transport"
)

// x-mcp-header (MCP 2026-07-28, SEP-2243): a tool's input property marked
// "x-mcp-header": "Name" is mirrored by clients in the header
// Mcp-Param-Name; the endpoint checks the two agree (SPEC §5a.9).
// Registration refuses a marking that breaks the revision's rules, which
// clients would drop the tool for: the name a non-empty HTTP token, unique
// ignoring case; the property of type string, integer or boolean; reached
// from the schema's root through "properties" alone.

// dataKeywords hold JSON values, not schemas: a marking inside them is data.
var dataKeywords = map[string]bool{"enum": true, "const": true, "default": true, "examples": true}

// paramHeaders returns the markings of the input schema in, sorted by
// header, or an error naming the first rule broken.
func paramHeaders(in json.RawMessage) ([]transport.ParamHeader, error) {
	var root any
	if err := json.Unmarshal(in, &root); err != nil {
		return nil, err
	}
	var out []transport.ParamHeader
	seen := map[string]bool{}
	var walk func(node any, path []string, direct bool) error
	walk = func(node any, path []string, direct bool) error {
		switch n := node.(type) {
		case []any:
			for _, v := range n {
				if err := walk(v, nil, false); err != nil {
					return err
				}
			}
		case map[string]any:
			if mark, ok := n["x-mcp-header"]; ok {
				name, _ := mark.(string)
				typ, _ := n["type"].(string)
				switch {
				case !direct || len(path) == 0:
					return fmt.Errorf("x-mcp-header %v: only on a property reached from the root through properties", mark)
				case !httpToken(name):
					return fmt.Errorf("x-mcp-header %v: not a non-empty HTTP token", mark)
				case seen[strings.ToLower(name)]:
					return fmt.Errorf("x-mcp-header %q: used twice (names are compared ignoring case)", name)
				case typ != "string" && typ != "integer" && typ != "boolean":
					return fmt.Errorf("x-mcp-header %q: property %s has type %q, want string, integer or boolean", name, strings.Join(path, "."), typ)
				}
				seen[strings.ToLower(name)] = true
				out = append(out, transport.ParamHeader{Header: name, Path: append([]string(nil), path...), Type: typ})
			}
			for k, v := range n {
				switch {
				case dataKeywords[k]:
				case k == "properties":
					props, _ := v.(map[string]any)
					for name, sub := range props {
						if err := walk(sub, append(path[:len(path):len(path)], name), direct); err != nil {
							return err
						}
					}
				default:
					if err := walk(v, nil, false); err != nil {
						return err
					}
				}
			}
		}
		return nil
	}
	if err := walk(root, nil, true); err != nil {
		return nil, err
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Header < out[j].Header })
	return out, nil
}

// httpToken reports whether s is a non-empty RFC 9110 token.
func httpToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// ParamHeaders implements transport.ParamHeaders: the markings of the tool
// named, none for an unknown one (the call then fails as unknown).
func (b *mcpBackend) ParamHeaders(_ Principal, tool string) []transport.ParamHeader {
	t, ok := b.r.tools.get(tool)
	if !ok {
		return nil
	}
	return t.headers
}

// Package fastschema answers, without decoding, whether a tool's arguments
// surely match its input schema, for the schemas most tools have: an
// object of named properties of the primitive types, some required, string
// lengths bounded, other properties allowed or not. A full JSON Schema
// validator decodes the arguments into a tree of maps and values first —
// about fifteen allocations for `{"text":"hi"}` — and most calls pass; this
// scans the JSON once and allocates nothing.
//
// It is a fast path in front of the full validator, never instead of it:
// [Schema.Valid] says true only when the arguments surely match, and false
// whenever it cannot tell (a mismatch, an escape in a bounded string, a
// number written 1.0, a key given twice, malformed JSON …), and the caller
// then asks the full validator, which decides and says why. [Compile]
// returns nil for a schema outside the subset: every call goes to the full
// validator. The property test holds it to that: whatever it calls valid,
// the full validator does too.
package fastschema

import (
	"bytes"
	"encoding/json"
	"math"
	"unicode/utf8"
)

// maxProps bounds the properties of a schema the fast path takes (a bit
// each, for the keys seen).
const maxProps = 64

// Schema is the compiled fast path of one object schema; nil when the
// schema is outside the subset.
type Schema struct {
	props      []prop
	required   uint64 // bits of props that must be there
	additional bool   // properties not named are allowed
}

// prop is one named property.
type prop struct {
	name     []byte
	kind     kind
	min, max int // string length bounds in code points; max < 0: none
}

type kind uint8

const (
	kindAny kind = iota // {} or no type: any value
	kindString
	kindInteger
	kindNumber
	kindBoolean
)

var kinds = map[string]kind{"string": kindString, "integer": kindInteger, "number": kindNumber, "boolean": kindBoolean}

// annotations are the keywords that never change a validation's outcome;
// keys starting with "x-" are extensions, ignored as well.
var annotations = map[string]bool{
	"title": true, "description": true, "default": true, "examples": true, "$comment": true,
	"deprecated": true, "readOnly": true, "writeOnly": true,
}

func ignored(key string) bool { return annotations[key] || len(key) > 2 && key[:2] == "x-" }

// Compile returns the fast path of an input schema, or nil when it is not
// one the fast path takes: a JSON object whose keywords are type "object",
// properties (each {} or of type string — with minLength and maxLength —
// integer, number or boolean, and annotations), required, additionalProperties
// (a boolean), $schema and annotations.
func Compile(raw json.RawMessage) *Schema {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return nil
	}
	s := &Schema{additional: true}
	var typ string
	if err := json.Unmarshal(top["type"], &typ); err != nil || typ != "object" {
		return nil
	}
	var props map[string]map[string]json.RawMessage
	var required []string
	for key, v := range top {
		var err error
		switch key {
		case "type", "$schema":
		case "properties":
			err = json.Unmarshal(v, &props)
		case "required":
			err = json.Unmarshal(v, &required)
		case "additionalProperties":
			err = json.Unmarshal(v, &s.additional)
		default:
			if !ignored(key) {
				return nil
			}
		}
		if err != nil {
			return nil
		}
	}
	if len(props) > maxProps {
		return nil
	}
	for name, ps := range props {
		p, ok := compileProp(name, ps)
		if !ok {
			return nil
		}
		s.props = append(s.props, p)
	}
	for _, name := range required {
		i := s.index([]byte(name))
		if i < 0 {
			// A required property the schema does not describe: allowed
			// with any value only if others are.
			if !s.additional || len(s.props) == maxProps {
				return nil
			}
			s.props = append(s.props, prop{name: []byte(name), kind: kindAny, max: -1})
			i = len(s.props) - 1
		}
		s.required |= 1 << i
	}
	return s
}

func compileProp(name string, ps map[string]json.RawMessage) (prop, bool) {
	p := prop{name: []byte(name), kind: kindAny, max: -1}
	if ps == nil {
		return prop{}, false // not an object (true or false as a schema)
	}
	for key, v := range ps {
		switch key {
		case "type":
			var typ string
			if json.Unmarshal(v, &typ) != nil {
				return prop{}, false
			}
			k, ok := kinds[typ]
			if !ok {
				return prop{}, false
			}
			p.kind = k
		case "minLength", "maxLength":
			var n float64
			if json.Unmarshal(v, &n) != nil || n < 0 || n != math.Trunc(n) || n > math.MaxInt32 {
				return prop{}, false
			}
			if key == "minLength" {
				p.min = int(n)
			} else {
				p.max = int(n)
			}
		default:
			if !ignored(key) {
				return prop{}, false
			}
		}
	}
	if (p.min > 0 || p.max >= 0) && p.kind != kindString {
		return prop{}, false // a length bound applies to strings only: leave it to the full validator
	}
	return p, true
}

func (s *Schema) index(name []byte) int {
	for i := range s.props {
		if bytes.Equal(s.props[i].name, name) {
			return i
		}
	}
	return -1
}

// Valid reports whether args surely match the schema. False says only that
// the fast path cannot tell: ask the full validator.
func (s *Schema) Valid(args []byte) bool {
	if s == nil || !validJSON(args) {
		return false
	}
	i := skipSpace(args, 0)
	if i >= len(args) || args[i] != '{' {
		return false
	}
	var seen uint64
	i = skipSpace(args, i+1)
	if args[i] == '}' {
		return s.required == 0
	}
	for {
		// A key: a string, compared as it is written (an escape in it: ask).
		end := skipString(args, i)
		key := args[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			return false
		}
		i = skipSpace(args, end)
		i = skipSpace(args, i+1) // the colon
		vend := skipValue(args, i)
		value := args[i:vend]
		if p := s.index(key); p >= 0 {
			if seen&(1<<p) != 0 || !s.props[p].accepts(value) {
				return false // a key twice (the decoder keeps the last), or a mismatch
			}
			seen |= 1 << p
		} else if !s.additional {
			return false
		}
		i = skipSpace(args, vend)
		if args[i] == '}' {
			break
		}
		i = skipSpace(args, i+1) // the comma
	}
	return seen&s.required == s.required
}

// accepts reports whether value (valid JSON) surely matches the property.
func (p *prop) accepts(value []byte) bool {
	switch p.kind {
	case kindAny:
		return true
	case kindBoolean:
		return value[0] == 't' || value[0] == 'f'
	case kindNumber:
		return value[0] == '-' || value[0] >= '0' && value[0] <= '9'
	case kindInteger:
		// Digits only: 1.0 and 1e0 are integers too, which the full
		// validator says.
		for j, c := range value {
			if !(c >= '0' && c <= '9' || c == '-' && j == 0) {
				return false
			}
		}
		return true
	case kindString:
		if value[0] != '"' {
			return false
		}
		if p.min == 0 && p.max < 0 {
			return true
		}
		text := value[1 : len(value)-1]
		if bytes.IndexByte(text, '\\') >= 0 {
			return false // escapes: the length is the decoded text's
		}
		n := utf8.RuneCount(text)
		return n >= p.min && (p.max < 0 || n <= p.max)
	}
	return false
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i] (b
// is valid JSON).
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return len(b)
}

// skipValue returns the index just past the value starting at b[i] (b is
// valid JSON).
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for ; i < len(b); i++ {
			switch b[i] {
			case '"':
				i = skipString(b, i) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
		}
		return len(b)
	}
	for ; i < len(b); i++ { // a number or a literal
		switch b[i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return i
		}
	}
	return i
}

// validJSON reports whether b is one JSON value (RFC 8259), white space
// around it allowed: json.Valid's grammar, checked without json.Valid's
// pooled scanner, so that no path allocates (a pool may drop its items).
// Strings are not checked for valid UTF-8, as json.Valid does not.
func validJSON(b []byte) bool {
	i, ok := scanValue(b, skipSpace(b, 0), 0)
	return ok && skipSpace(b, i) == len(b)
}

// maxDepth bounds the nesting validJSON follows, as encoding/json does.
const maxDepth = 10000

// scanValue returns the index just past the value at b[i] and whether it
// is one.
func scanValue(b []byte, i, depth int) (int, bool) {
	if i >= len(b) || depth > maxDepth {
		return i, false
	}
	switch c := b[i]; {
	case c == '{':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == '}' {
			return i + 1, true
		}
		for {
			if i >= len(b) || b[i] != '"' {
				return i, false
			}
			var ok bool
			if i, ok = scanString(b, i); !ok {
				return i, false
			}
			i = skipSpace(b, i)
			if i >= len(b) || b[i] != ':' {
				return i, false
			}
			if i, ok = scanValue(b, skipSpace(b, i+1), depth+1); !ok {
				return i, false
			}
			var done bool
			if i, done, ok = afterElement(b, i, '}'); done || !ok {
				return i, ok
			}
		}
	case c == '[':
		i = skipSpace(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1, true
		}
		for {
			var ok bool
			if i, ok = scanValue(b, i, depth+1); !ok {
				return i, false
			}
			var done bool
			if i, done, ok = afterElement(b, i, ']'); done || !ok {
				return i, ok
			}
		}
	case c == '"':
		return scanString(b, i)
	case c == '-' || c >= '0' && c <= '9':
		return scanNumber(b, i)
	case c == 't':
		return literal(b, i, "true")
	case c == 'f':
		return literal(b, i, "false")
	case c == 'n':
		return literal(b, i, "null")
	}
	return i, false
}

func literal(b []byte, i int, word string) (int, bool) {
	if len(b)-i >= len(word) && string(b[i:i+len(word)]) == word {
		return i + len(word), true
	}
	return i, false
}

// scanString checks the string at b[i]: no control character, only the
// escapes JSON has.
func scanString(b []byte, i int) (int, bool) {
	for i++; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1, true
		case c < 0x20:
			return i, false
		case c == '\\':
			i++
			if i >= len(b) {
				return i, false
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(b)-i < 5 {
					return i, false
				}
				for _, h := range b[i+1 : i+5] {
					if !(h >= '0' && h <= '9' || h >= 'a' && h <= 'f' || h >= 'A' && h <= 'F') {
						return i, false
					}
				}
				i += 4
			default:
				return i, false
			}
		}
	}
	return i, false
}

// scanNumber checks the number at b[i]: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func scanNumber(b []byte, i int) (int, bool) {
	digits := func(i int) (int, bool) {
		start := i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i, i > start
	}
	if b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i, _ = digits(i)
	default:
		return i, false
	}
	var ok bool
	if i < len(b) && b[i] == '.' {
		if i, ok = digits(i + 1); !ok {
			return i, false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i, ok = digits(i); !ok {
			return i, false
		}
	}
	return i, true
}

// afterElement reads what follows an element of an object or an array at
// b[i:]: a comma (the next element's start, not done), or the closing
// byte (done, just past it); anything else is not JSON.
func afterElement(b []byte, i int, closing byte) (next int, done, ok bool) {
	i = skipSpace(b, i)
	switch {
	case i < len(b) && b[i] == ',':
		return skipSpace(b, i+1), false, true
	case i < len(b) && b[i] == closing:
		return i + 1, true, true
	}
	return i, false, false
}

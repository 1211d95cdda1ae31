package transport

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"strconv"
	"unicode/utf8"
)

// JSON-RPC 2.0 error codes the endpoint answers.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
	// CodeRefused: a request refused before dispatch — 403, 401, the 404
	// of an unknown session.
	CodeRefused = -32001
	// CodeSessionRequired: a request other than initialize arrived without
	// a session. Clients that probe with a newer method fall back to
	// initialize on it.
	CodeSessionRequired = -32000
	// CodeUnsupportedProtocolVersion: the request asked for a protocol
	// version the endpoint does not serve (MCP 2026-07-28's
	// UnsupportedProtocolVersionError).
	CodeUnsupportedProtocolVersion = -32022
	// CodeHeaderMismatch: a 2026-07-28 request's headers disagree with its
	// body (HeaderMismatchError).
	CodeHeaderMismatch = -32020
	// CodeMissingRequiredClientCapability: a 2026-07-28 request needs a
	// client capability it did not declare.
	CodeMissingRequiredClientCapability = -32021
	// CodeResourceNotFound: resources/subscribe of a URI the caller may not
	// read, or nothing is at: resources/read's answer for either in a 2025
	// session.
	CodeResourceNotFound = -32002
	// CodeRequestCancelled is the Response of a request whose context ended
	// (Dispatch): never sent, the endpoint answers nothing for it.
	CodeRequestCancelled = -32800
)

// message is one decoded JSON-RPC message: a request (ID and Method), a
// notification (Method only) or a response (ID with Result or Error).
type message struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

func (m *message) isRequest() bool      { return m.Method != "" && len(m.ID) > 0 }
func (m *message) isNotification() bool { return m.Method != "" && len(m.ID) == 0 }
func (m *message) isResponse() bool     { return m.Method == "" && len(m.ID) > 0 }

var (
	errParse    = errors.New("parse error")
	errEncoding = errors.New("not UTF-8 JSON text: invalid UTF-8, or an escaped lone surrogate")
	errBatch    = errors.New("batch")
	errInvalid  = errors.New("invalid request")
)

// decodeMessage parses one JSON-RPC message. A JSON array is errBatch:
// batches were removed from MCP in 2025-06-18 and are not accepted.
//
// It is on every request's path, so it does not build a map or decode
// twice: the body is validated once (json.Valid, no allocation), then the
// top-level members are walked in place. Member names are matched exactly:
// JSON-RPC names are case-sensitive (encoding/json's struct decoding would
// take "Method" for "method").
func decodeMessage(body []byte) (*message, error) {
	if !json.Valid(body) {
		return nil, errParse // also: trailing data, a stray closing bracket
	}
	if !losslessUnicode(body) {
		return nil, errEncoding
	}
	switch body[skipSpace(body, 0)] {
	case '[':
		return nil, errBatch
	case '{':
	default:
		return nil, errInvalid // valid JSON, but not an object
	}
	var m message
	err := eachMember(body, func(name, value []byte) error {
		switch string(name) {
		case "jsonrpc":
			return stringValue(value, &m.JSONRPC)
		case "method":
			return stringValue(value, &m.Method)
		case "id":
			m.ID = value
		case "params":
			m.Params = value
		case "result":
			m.Result = value
		case "error":
			m.Error = value
		}
		return nil
	})
	if err != nil {
		return nil, errInvalid
	}
	if m.JSONRPC != "2.0" {
		return nil, errInvalid
	}
	if len(m.ID) > 0 && !validID(m.ID) {
		return nil, errInvalid
	}
	if m.Method == "" && len(m.ID) == 0 {
		return nil, errInvalid
	}
	if m.Method != "" && (len(m.Result) > 0 || len(m.Error) > 0) {
		return nil, errInvalid
	}
	if m.Method == "" && len(m.Result) == 0 && len(m.Error) == 0 {
		return nil, errInvalid // a response carries a result or an error
	}
	return &m, nil
}

// losslessUnicode reports whether body, valid JSON, decodes without loss:
// it is valid UTF-8 (RFC 8259 §8.1: JSON text is UTF-8), and every \u
// escape names a Unicode scalar value, a surrogate only as half of a pair.
// encoding/json turns both kinds of fault into U+FFFD, which would change
// a text and let an invalid id be echoed raw; the whole message is refused
// instead. It allocates nothing.
func losslessUnicode(body []byte) bool {
	if !utf8.Valid(body) {
		return false
	}
	for i := 0; ; {
		j := bytes.IndexByte(body[i:], '\\')
		if j < 0 {
			return true
		}
		i += j + 1 // the escaped character; valid JSON has one
		if body[i] != 'u' {
			i++ // \\ among them: the next backslash starts a new escape
			continue
		}
		r := hex4(body[i+1 : i+5])
		i += 5
		switch {
		case r >= 0xdc00 && r <= 0xdfff:
			return false // a low surrogate alone
		case r >= 0xd800 && r <= 0xdbff:
			if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
				return false
			}
			if lo := hex4(body[i+2 : i+6]); lo < 0xdc00 || lo > 0xdfff {
				return false
			}
			i += 6
		}
	}
}

// hex4 decodes the four hex digits of a \u escape; b comes from valid JSON.
func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default:
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// eachMember calls fn with the name (unescaped) and the raw value of each
// member of the JSON object obj, in order; a repeated name is seen again,
// so the last one wins. obj must be valid JSON (json.Valid): the walk
// relies on it. An obj that is not an object is an error.
func eachMember(obj []byte, fn func(name, value []byte) error) error {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return errInvalid
	}
	i = skipSpace(obj, i+1)
	if obj[i] == '}' {
		return nil
	}
	for {
		end := skipString(obj, i)
		name := obj[i+1 : end-1]
		if bytes.IndexByte(name, '\\') >= 0 {
			var unescaped string
			if err := json.Unmarshal(obj[i:end], &unescaped); err != nil {
				return err
			}
			name = []byte(unescaped)
		}
		i = skipSpace(obj, end)
		i = skipSpace(obj, i+1) // past ':'
		vend := skipValue(obj, i)
		if err := fn(name, obj[i:vend]); err != nil {
			return err
		}
		i = skipSpace(obj, vend)
		if obj[i] == '}' {
			return nil
		}
		i = skipSpace(obj, i+1) // past ','
	}
}

// interned is the strings every request repeats (the JSON-RPC version,
// the methods, the protocol versions): stringValue returns these rather
// than a copy of the bytes.
var interned = func() map[string]string {
	m := map[string]string{"2.0": "2.0"}
	for _, s := range []string{
		"initialize", "notifications/initialized", "ping", "tools/list", "tools/call",
		"resources/list", "resources/templates/list", "resources/read", "resources/subscribe",
		"resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
		"logging/setLevel", "notifications/cancelled", "notifications/progress",
		"notifications/roots/list_changed", "server/discover", "subscriptions/listen",
	} {
		m[s] = s
	}
	for _, v := range allVersions {
		m[v] = v
	}
	return m
}()

// stringValue decodes a JSON string (or null, as "") into dst; any other
// value is an error.
func stringValue(value []byte, dst *string) error {
	v, err := stringOf(value)
	if err == nil {
		*dst = v
	}
	return err
}

// stringOf is stringValue's text. Its result does not make the caller's
// variable escape: only a string with escapes is decoded, by unquote.
func stringOf(value []byte) (string, error) {
	switch {
	case string(value) == "null":
		return "", nil
	case value[0] != '"':
		return "", errInvalid
	case bytes.IndexByte(value, '\\') < 0 && utf8.Valid(value):
		if k, ok := interned[string(value[1:len(value)-1])]; ok {
			return k, nil
		}
		return string(value[1 : len(value)-1]), nil
	}
	return unquote(value)
}

// unquote decodes a JSON string with escapes. It is not inlined, so that
// its variable, which escapes, is allocated only when a string has escapes.
//
//go:noinline
func unquote(value []byte) (string, error) {
	var s string
	err := json.Unmarshal(value, &s)
	return s, err
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index just past the value that starts at b[i].
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
		return i
	default: // number, true, false, null
		for ; i < len(b); i++ {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return i
			}
		}
		return i
	}
}

// validID accepts the ids MCP allows: a string or an integer-valued number.
func validID(id json.RawMessage) bool {
	switch id[0] {
	case '"':
		// The message is valid JSON (decodeMessage checked it), so a value
		// that starts with a quote is one string.
		return true
	case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		// An integer within int64: digits only (1.0 and 1e0 are not ids
		// here), at most 18 of them surely fit, more are parsed.
		digits := id
		if digits[0] == '-' {
			digits = digits[1:]
		}
		if len(digits) == 0 {
			return false
		}
		for _, c := range digits {
			if c < '0' || c > '9' {
				return false
			}
		}
		if len(digits) <= 18 {
			return true
		}
		_, err := strconv.ParseInt(string(id), 10, 64)
		return err == nil
	}
	return false
}

// idKey returns the key of a JSON-RPC id, equal for ids of equal decoded
// value: a string's is its decoded text in quotes ("\u0031" and "1" are
// one id), an integer's its decimal digits (1, 1.0 and 1e0 are one, -0 is
// 0); the number 1 and the string "1" differ. ok is false for anything
// else (a fraction, an integer beyond int64, not a string or a number).
// The common spellings, a string without escapes and a plain integer, cost
// the one allocation of the key.
func idKey(raw []byte) (key string, ok bool) {
	switch {
	case len(raw) == 0:
		return "", false
	case raw[0] == '"':
		if bytes.IndexByte(raw, '\\') < 0 {
			return string(raw), true
		}
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return "", false
		}
		return `"` + s + `"`, true
	case raw[0] != '-' && (raw[0] < '0' || raw[0] > '9'):
		return "", false
	case bytes.IndexAny(raw, ".eE") < 0 && string(raw) != "-0":
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return "", false
		}
		return string(raw), true // JSON has no leading zeros: already canonical
	}
	r, ok := new(big.Rat).SetString(string(raw))
	if !ok || !r.IsInt() || !r.Num().IsInt64() {
		return "", false
	}
	return strconv.FormatInt(r.Num().Int64(), 10), true
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
	Data    any    `json:"data,omitempty"`
}

// response is a JSON-RPC response. ID is empty when the request's id is
// not known (it could not be read, or was not valid): the id member is then
// left out, never null, as MCP's schema has it.
type response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Result  any             `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

func resultResponse(id json.RawMessage, result any) *response {
	return &response{JSONRPC: "2.0", ID: id, Result: result}
}

func errorResponse(id json.RawMessage, code int, msg string) *response {
	return &response{JSONRPC: "2.0", ID: id, Error: &rpcError{Code: code, Message: msg}}
}

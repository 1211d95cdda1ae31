package transport

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sync"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/jsonenc"
)

// The hot path's encoding. A tools/call result is an *mcp.CallToolResult,
// whose MarshalJSON marshals a wrapper struct, each content block's
// MarshalJSON another, and encoding/json then re-scans what each returned:
// 21 allocations for a one-block result with a small structured result,
// measured with BenchmarkHTTPToolCall. The common shape — no _meta, text
// blocks without _meta or annotations, no input requests — is written here
// by hand into a pooled buffer instead, with the bytes encoding/json would
// write (FuzzToolResultEncoding holds them equal); any other shape, and
// every other result, is marshalled as it is.

// bufPool holds the buffers answers are built in; a buffer goes back once
// its bytes were written to the connection (which copies them).
var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// maxPooledBuf: larger buffers are left to the collector rather than kept.
const maxPooledBuf = 64 << 10

// writeResultResponse answers the request id with result: 200 JSON, like
// writeResponse(w, resultResponse(id, result)), without the reflection of
// encoding/json for a tools/call result of the common shape.
func writeResultResponse(w http.ResponseWriter, id json.RawMessage, result any) {
	bp := bufPool.Get().(*[]byte)
	b, ok := appendResultResponse((*bp)[:0], id, result)
	if !ok {
		bufPool.Put(bp)
		writeResponse(w, resultResponse(id, result))
		return
	}
	writeJSONBytes(w, b)
	if cap(b) <= maxPooledBuf {
		*bp = b
		bufPool.Put(bp)
	}
}

// writeRawResult answers the request id with result, already encoded:
// 200 JSON, the bytes writeResult would write. An id that encoding/json
// would escape (<, >, &, U+2028, U+2029: an 0xE2 byte) is left to it.
func writeRawResult(w http.ResponseWriter, id json.RawMessage, result []byte) {
	if bytes.ContainsAny(id, "<>&") || bytes.IndexByte(id, 0xE2) >= 0 {
		writeResponse(w, resultResponse(id, json.RawMessage(result)))
		return
	}
	bp := bufPool.Get().(*[]byte)
	b := append((*bp)[:0], `{"jsonrpc":"2.0"`...)
	if len(id) > 0 {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, "}\n"...)
	writeJSONBytes(w, b)
	if cap(b) <= maxPooledBuf {
		*bp = b
		bufPool.Put(bp)
	}
}

// The header values of every 200 JSON answer, shared rather than built
// per answer (net/http only reads them; Header.Set and Add replace or
// grow a slice of capacity one, never write into it).
var (
	headerJSON    = []string{"application/json"}
	headerNoStore = []string{"no-store"}
)

// writeJSONBytes answers 200 with the JSON b.
func writeJSONBytes(w http.ResponseWriter, b []byte) {
	h := w.Header()
	h["Content-Type"] = headerJSON
	h["Cache-Control"] = headerNoStore
	w.WriteHeader(http.StatusOK)
	w.Write(b)
}

// appendResultResponse appends the JSON-RPC response {"jsonrpc","id",
// "result"} and a newline, if result is a tools/call result of the common
// shape; ok false otherwise (b is then garbage).
func appendResultResponse(b []byte, id json.RawMessage, result any) ([]byte, bool) {
	r, ok := result.(*mcp.CallToolResult)
	if !ok || r == nil {
		return b, false
	}
	b = append(b, `{"jsonrpc":"2.0"`...)
	if len(id) > 0 {
		b = append(b, `,"id":`...)
		b = append(b, id...)
	}
	b = append(b, `,"result":`...)
	if b, ok = appendToolResult(b, r); !ok {
		return b, false
	}
	return append(b, "}\n"...), true
}

// appendModernCallResponse appends the 2026-07-28 response to a tools/call
// whose result r has the common shape, with the bytes
// modernResult(r, "complete", cache{}) and appendRawResponse would write
// (FuzzModernToolResultEncoding holds them equal): the result's members,
// then resultType and _meta.serverInfo, info. A nil Content is left to
// modernResult, which omits it. ok false: not this shape.
func appendModernCallResponse(b []byte, id json.RawMessage, r *mcp.CallToolResult, info []byte) ([]byte, bool) {
	if r == nil || r.Content == nil {
		return b, false
	}
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b, ok := appendToolResult(b, r)
	if !ok {
		return b, false
	}
	b = append(b[:len(b)-1], `,"resultType":"complete","_meta":{"`+metaServerInfo+`":`...)
	b = append(b, info...)
	return append(b, "}}}\n"...), true
}

// appendToolResult appends r as (*mcp.CallToolResult).MarshalJSON would,
// if r has the common shape; ok false otherwise. Nil Content is written as
// [] (MCP requires the array; the SDK would write null).
func appendToolResult(b []byte, r *mcp.CallToolResult) ([]byte, bool) {
	if r.Meta != nil || r.InputRequests != nil || r.RequestState != "" {
		return b, false
	}
	b = append(b, `{"content":[`...)
	for i, c := range r.Content {
		t, ok := c.(*mcp.TextContent)
		if !ok || t == nil || t.Meta != nil || t.Annotations != nil {
			return b, false
		}
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"type":"text","text":`...)
		b = appendJSONString(b, t.Text)
		b = append(b, '}')
	}
	b = append(b, ']')
	if r.StructuredContent != nil {
		sc, err := jsonenc.JSON(r.StructuredContent) // a built-in's bytes as they are, no second scan
		if err != nil {
			return b, false // let encoding/json report it the usual way
		}
		b = append(b, `,"structuredContent":`...)
		b = append(b, sc...)
	}
	if r.IsError {
		b = append(b, `,"isError":true`...)
	}
	return append(b, '}'), true
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string exactly as encoding/json
// writes it (HTML-safe: <, > and & escaped; U+2028 and U+2029 escaped;
// invalid UTF-8 as U+FFFD).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

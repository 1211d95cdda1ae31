package transport

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// FuzzModernRequest: the 2026-07-28 ladder's decoding of a body and its
// headers (SPEC §5a.2) never panics, and what it passes is what it claims:
// a _meta with a protocolVersion string and capabilities, equal to the
// header; Mcp-Method equal to the method; Mcp-Name, decoded, equal to the
// named member. A base64-wrapped value always decodes to what was wrapped.
func FuzzModernRequest(f *testing.F) {
	f.Add([]byte(`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}`), "2026-07-28", "tools/call", "t")
	f.Add([]byte(`{"jsonrpc":"2.0","id":"x","method":"resources/read","params":{"uri":"a\u00e9","_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"roots":{}},"io.modelcontextprotocol/logLevel":"info"}}}`), "2026-07-28", "resources/read", "=?base64?YcOp?=")
	f.Add([]byte(`{"jsonrpc":"2.0","id":2,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"v9","io.modelcontextprotocol/clientCapabilities":[]}}}`), "v9", "server/discover", "")
	f.Add([]byte(`{"jsonrpc":"2.0","id":3,"method":"prompts/get","params":null}`), "", " prompts/get ", "=?base64?")
	f.Fuzz(func(t *testing.T, body []byte, version, method, name string) {
		msg, err := decodeMessage(body)
		if err != nil || !msg.isRequest() {
			return
		}
		r, _ := http.NewRequest(http.MethodPost, "/mcp", nil)
		r.Header.Set(headerProtocol, version)
		r.Header.Set(headerMethod, method)
		if name != "" {
			r.Header.Set(headerName, name)
		}
		m, rej := readMeta(msg.Params)
		if rej != nil {
			if rej.f != failModernMeta {
				t.Fatalf("readMeta refused with %v", rej.f)
			}
			return
		}
		if m.caps == nil {
			t.Fatal("readMeta passed without capabilities")
		}
		if rej = checkHeaders(r, msg, &m); rej != nil {
			return
		}
		if r.Header.Get(headerProtocol) != m.version || m.version != modernVersion {
			t.Fatalf("passed version header %q, _meta %q", r.Header.Get(headerProtocol), m.version)
		}
		if strings.TrimSpace(r.Header.Get(headerMethod)) != msg.Method {
			t.Fatalf("passed Mcp-Method %q for %q", method, msg.Method)
		}
		if msg.Method == "tools/call" || msg.Method == "prompts/get" || msg.Method == "resources/read" {
			if _, ok := headerValue(r.Header.Values(headerName)); !ok {
				t.Fatalf("passed an undecodable Mcp-Name %q", name)
			}
		}
	})
}

// FuzzHeaderValue: a value wrapped in =?base64?…?= decodes to itself; a
// value that decodes was either wrapped or is taken literally.
func FuzzHeaderValue(f *testing.F) {
	for _, s := range []string{"", "Hello", "=?base64?", "?=", " x ", "=?base64?SGVsbG8?="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := headerValue([]string{"=?base64?" + base64.StdEncoding.EncodeToString([]byte(s)) + "?="})
		if !ok || got != s {
			t.Fatalf("wrapped %q decoded to %q, %v", s, got, ok)
		}
		if v, ok := headerValue([]string{s}); ok && !strings.HasPrefix(strings.TrimSpace(s), "=?base64?") && v != strings.TrimSpace(s) {
			t.Fatalf("literal %q read as %q", s, v)
		}
	})
}

// FuzzRequestState: nothing but a state the sealer sealed opens (SPEC
// §5a.6); one with any byte changed does not.
func FuzzRequestState(f *testing.F) {
	s := newSealer(time.Minute)
	good, err := s.seal(&sealedState{Namespace: "cred:a", Method: "tools/call", Name: "t", Nonce: bytes.Repeat([]byte{1}, 16), State: "x"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good, 0, byte(1))
	f.Add("", 3, byte(0))
	f.Add(good+"-TAMPERED", 0, byte(0))
	f.Fuzz(func(t *testing.T, v string, at int, flip byte) {
		if v == good {
			if _, ok := s.open(v); !ok {
				t.Fatal("the sealed state does not open")
			}
			if flip == 0 || len(v) == 0 {
				return
			}
			b := []byte(v)
			i := (at%len(b) + len(b)) % len(b)
			b[i] ^= flip
			v = string(b)
		}
		st, ok := s.open(v)
		if ok {
			j, _ := json.Marshal(st)
			t.Fatalf("%q opened: %s", v, j)
		}
	})
}

package mcpclient

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// fakeServer is a tiny MCP endpoint: it answers tools/call echo as SSE
// when sse is set, else as JSON, and checks the session headers.
func fakeServer(t *testing.T, sse bool) *httptest.Server {
	t.Helper()
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.Method == http.MethodDelete {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Arguments struct {
					Text string `json:"text"`
				} `json:"arguments"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var result string
		switch msg.Method {
		case "initialize":
			w.Header().Set("Mcp-Session-Id", "s1")
			result = `{"protocolVersion":"2025-06-18"}`
		case "notifications/initialized":
			w.WriteHeader(http.StatusAccepted)
			return
		case "tools/call":
			if r.Header.Get("Mcp-Session-Id") != "s1" || r.Header.Get("MCP-Protocol-Version") != "2025-06-18" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			text, _ := json.Marshal(msg.Params.Arguments.Text)
			result = fmt.Sprintf(`{"content":[{"type":"text","text":%s}],"isError":false}`, text)
		}
		resp := fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, result)
		if sse {
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, ": ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n")
			fmt.Fprintf(w, "event: message\ndata: %s\n\n", resp)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, resp)
	}))
}

func TestSessionRoundTrip(t *testing.T) {
	for _, sse := range []bool{false, true} {
		t.Run(fmt.Sprintf("sse=%v", sse), func(t *testing.T) {
			srv := fakeServer(t, sse)
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c := &Client{HTTP: NewHTTPClient(4), URL: srv.URL + "/mcp"}
			s, err := c.Initialize(ctx, "tok")
			if err != nil {
				t.Fatalf("Initialize: %v", err)
			}
			if s.ID != "s1" || s.Version != "2025-06-18" {
				t.Fatalf("session %q version %q, want s1 2025-06-18", s.ID, s.Version)
			}
			if err := s.Echo(ctx, `say "hi" \ é`); err != nil {
				t.Fatalf("Echo: %v", err)
			}
			if err := s.CallTool(ctx, "other"); err != nil {
				t.Fatalf("CallTool: %v", err)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("Delete: %v", err)
			}
		})
	}
}

func TestInitializeUnauthorized(t *testing.T) {
	srv := fakeServer(t, false)
	defer srv.Close()
	c := &Client{HTTP: NewHTTPClient(1), URL: srv.URL + "/mcp"}
	_, err := c.Initialize(context.Background(), "wrong")
	if !IsStatus(err, http.StatusUnauthorized) {
		t.Fatalf("err = %v, want a 401 StatusError", err)
	}
}

func TestEchoRequestIsValidJSON(t *testing.T) {
	b := EchoRequest(nil, 42, "a\"b\n\x01")
	var v struct {
		ID     int64 `json:"id"`
		Params struct {
			Name      string `json:"name"`
			Arguments struct {
				Text string `json:"text"`
			} `json:"arguments"`
		} `json:"params"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if v.ID != 42 || v.Params.Name != "echo" || v.Params.Arguments.Text != "a\"b\n\x01" {
		t.Fatalf("decoded %+v", v)
	}
}

// TestToolRequest checks the request of a tool called without arguments,
// in both eras: the tool's name, empty arguments, and _meta only when
// modern.
func TestToolRequest(t *testing.T) {
	for _, modern := range []bool{false, true} {
		b := ToolRequest(nil, 7, `odd"name`, modern)
		var v struct {
			ID     int64  `json:"id"`
			Method string `json:"method"`
			Params struct {
				Name      string         `json:"name"`
				Arguments map[string]any `json:"arguments"`
				Meta      map[string]any `json:"_meta"`
			} `json:"params"`
		}
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatalf("modern %v: %s: %v", modern, b, err)
		}
		if v.ID != 7 || v.Method != "tools/call" || v.Params.Name != `odd"name` || v.Params.Arguments == nil || len(v.Params.Arguments) != 0 {
			t.Errorf("modern %v: decoded %+v from %s", modern, v, b)
		}
		if got := v.Params.Meta["io.modelcontextprotocol/protocolVersion"]; (got == ModernVersion) != modern || (v.Params.Meta == nil) == modern {
			t.Errorf("modern %v: _meta %v", modern, v.Params.Meta)
		}
	}
}

// TestCheckComplete pins what CallTool accepts: a complete result with
// content, whatever the content says; never an error result, an empty
// one, or another resultType.
func TestCheckComplete(t *testing.T) {
	for _, tc := range []struct {
		name, result string
		ok           bool
	}{
		{"text and structured", `{"content":[{"type":"text","text":"{}"}],"structuredContent":{"tools":[]}}`, true},
		{"complete", `{"content":[{"type":"text","text":"x"}],"isError":false,"resultType":"complete"}`, true},
		{"isError", `{"content":[{"type":"text","text":"no such tool"}],"isError":true}`, false},
		{"no content", `{"structuredContent":{}}`, false},
		{"empty content", `{"content":[]}`, false},
		{"untyped block", `{"content":[{"text":"x"}]}`, false},
		{"input required", `{"content":[{"type":"text","text":"x"}],"resultType":"input_required"}`, false},
		{"not JSON", `[`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkComplete(json.RawMessage(tc.result)); (err == nil) != tc.ok {
				t.Errorf("checkComplete(%s) = %v, want ok %v", tc.result, err, tc.ok)
			}
		})
	}
}

func TestStreamClosedAt(t *testing.T) {
	end := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		if r.URL.Query().Get("end") != "" {
			return // the server ends the stream
		}
		select {
		case <-r.Context().Done():
		case <-end:
		}
	}))
	defer srv.Close()
	defer close(end)
	ctx := context.Background()
	open := func(query string) *Stream {
		s := &Session{client: &Client{HTTP: NewHTTPClient(2), URL: srv.URL + "/mcp" + query}, auth: "Bearer tok"}
		st, err := s.OpenStream(ctx)
		if err != nil {
			t.Fatalf("OpenStream: %v", err)
		}
		return st
	}

	ended := open("?end=1")
	<-ended.Done()
	if ended.ClosedAt().IsZero() {
		t.Error("a stream the server ended has no ClosedAt")
	}

	held := open("")
	if !held.ClosedAt().IsZero() {
		t.Error("an open stream has a ClosedAt")
	}
	held.Close()
	<-held.Done()
	if !held.ClosedAt().IsZero() {
		t.Error("a stream the client closed has a ClosedAt")
	}
}

// TestStatelessHeaders checks what a 2026-07-28 client sends: the version
// in the header and in _meta, Mcp-Method mirroring the method, Mcp-Name
// only for tools/call, and never a session id.
func TestStatelessHeaders(t *testing.T) {
	type seen struct{ method, header, name, session, version, meta string }
	got := make(chan seen, 3)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ID     json.RawMessage `json:"id"`
			Method string          `json:"method"`
			Params struct {
				Meta map[string]any `json:"_meta"`
			} `json:"params"`
		}
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		version, _ := msg.Params.Meta["io.modelcontextprotocol/protocolVersion"].(string)
		got <- seen{msg.Method, r.Header.Get("Mcp-Method"), r.Header.Get("Mcp-Name"), r.Header.Get("Mcp-Session-Id"), r.Header.Get("MCP-Protocol-Version"), version}
		result := `{"supportedVersions":["2026-07-28"]}`
		if msg.Method == "tools/call" {
			result = `{"content":[{"type":"text","text":"hi"}]}`
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`, msg.ID, result)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s := (&Client{HTTP: NewHTTPClient(1), URL: srv.URL + "/mcp"}).Stateless("tok")
	if err := s.Discover(ctx); err != nil {
		t.Fatalf("Discover: %v", err)
	}
	if err := s.Echo(ctx, "hi"); err != nil {
		t.Fatalf("Echo: %v", err)
	}
	if err := s.CallTool(ctx, "runtime_capabilities"); err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	for _, want := range []seen{
		{method: "server/discover", header: "server/discover", version: ModernVersion, meta: ModernVersion},
		{method: "tools/call", header: "tools/call", name: "echo", version: ModernVersion, meta: ModernVersion},
		{method: "tools/call", header: "tools/call", name: "runtime_capabilities", version: ModernVersion, meta: ModernVersion},
	} {
		if g := <-got; g != want {
			t.Errorf("request %+v, want %+v", g, want)
		}
	}
}

func TestCheckDiscover(t *testing.T) {
	for _, tc := range []struct {
		name, result string
		ok           bool
	}{
		{"offers it", `{"supportedVersions":["2026-07-28","2025-11-25"]}`, true},
		{"legacy only", `{"supportedVersions":["2025-11-25"]}`, false},
		{"no list", `{}`, false},
		{"not JSON", `[`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := checkDiscover(json.RawMessage(tc.result)); (err == nil) != tc.ok {
				t.Errorf("checkDiscover(%s) = %v, want ok %v", tc.result, err, tc.ok)
			}
		})
	}
}

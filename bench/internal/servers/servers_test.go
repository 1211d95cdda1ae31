package servers

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// TestEveryServerEchoesAndRevokes drives each implementation through the
// load generator's client: initialize, echo, DELETE; then a revoked token
// is refused.
func TestEveryServerEchoesAndRevokes(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv, err := New(name, Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			toks, err := srv.IssueTokens(ctx, 2)
			if err != nil || len(toks) != 2 || toks[0] == toks[1] {
				t.Fatalf("IssueTokens = %v, %v", toks, err)
			}
			c := &mcpclient.Client{HTTP: mcpclient.NewHTTPClient(4), URL: hs.URL + Path}

			s, err := c.Initialize(ctx, toks[0])
			if err != nil {
				t.Fatalf("Initialize: %v", err)
			}
			if (s.ID == "") != (name == Floor) {
				t.Errorf("session id %q: only the floor has none", s.ID)
			}
			if err := s.Echo(ctx, "hello"); err != nil {
				t.Fatalf("Echo: %v", err)
			}
			if err := s.Delete(ctx); err != nil {
				t.Fatalf("Delete: %v", err)
			}

			if err := srv.Revoke(ctx, toks[1]); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if _, err := c.Initialize(ctx, toks[1]); !mcpclient.IsStatus(err, http.StatusUnauthorized) {
				t.Fatalf("Initialize with a revoked token: %v, want 401", err)
			}
			if err := srv.Revoke(ctx, toks[1]); err != ErrUnknownToken {
				t.Fatalf("second Revoke: %v, want ErrUnknownToken", err)
			}
		})
	}
}

// TestEveryServerServesModern drives each implementation through the load
// generator's 2026-07-28 client, on the same server as a 2025 session:
// server/discover offers 2026-07-28, echo returns the exact text, the
// session era still works beside it, and a revoked token is refused.
func TestEveryServerServesModern(t *testing.T) {
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv, err := New(name, Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			toks, err := srv.IssueTokens(ctx, 2)
			if err != nil || len(toks) != 2 {
				t.Fatalf("IssueTokens = %v, %v", toks, err)
			}
			c := &mcpclient.Client{HTTP: mcpclient.NewHTTPClient(4), URL: hs.URL + Path}

			m := c.Stateless(toks[0])
			if err := m.Discover(ctx); err != nil {
				t.Fatalf("Discover: %v", err)
			}
			legacy, err := c.Initialize(ctx, toks[0])
			if err != nil {
				t.Fatalf("Initialize beside the modern client: %v", err)
			}
			for _, text := range []string{"hello", `say "hi" \ é`} {
				if err := m.Echo(ctx, text); err != nil {
					t.Fatalf("modern Echo(%q): %v", text, err)
				}
				if err := legacy.Echo(ctx, text); err != nil {
					t.Fatalf("2025 Echo(%q) beside the modern client: %v", text, err)
				}
			}
			if err := legacy.Delete(ctx); err != nil {
				t.Fatalf("Delete: %v", err)
			}

			if err := srv.Revoke(ctx, toks[1]); err != nil {
				t.Fatalf("Revoke: %v", err)
			}
			if err := c.Stateless(toks[1]).Echo(ctx, "hello"); !mcpclient.IsStatus(err, http.StatusUnauthorized) {
				t.Fatalf("modern Echo with a revoked token: %v, want 401", err)
			}
		})
	}
}

// TestEveryServerServesCapabilities: with Options.Tool CapabilitiesTool,
// every implementation serves runtime_capabilities in both eras, a
// complete result whose structuredContent has the keys and values of the
// runtime's (the peers' is a stand-in; only the client id differs), with
// its JSON as the text block; and echo is not served.
func TestEveryServerServesCapabilities(t *testing.T) {
	var want map[string]any // the runtime's, first in Names
	for _, name := range Names {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			srv, err := New(name, Options{Tool: CapabilitiesTool, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer srv.Close()
			hs := httptest.NewServer(srv.Handler())
			defer hs.Close()
			toks, err := srv.IssueTokens(ctx, 1)
			if err != nil {
				t.Fatalf("IssueTokens: %v", err)
			}
			c := &mcpclient.Client{HTTP: mcpclient.NewHTTPClient(4), URL: hs.URL + Path}
			legacy, err := c.Initialize(ctx, toks[0])
			if err != nil {
				t.Fatalf("Initialize: %v", err)
			}
			for era, s := range map[string]*mcpclient.Session{"2025": legacy, "2026-07-28": c.Stateless(toks[0])} {
				if err := s.CallTool(ctx, CapabilitiesTool); err != nil {
					t.Errorf("%s CallTool(%s): %v", era, CapabilitiesTool, err)
				}
				if err := s.Echo(ctx, "hello"); err == nil {
					t.Errorf("%s Echo on a server of %s: no error", era, CapabilitiesTool)
				}
			}

			res := callRaw(ctx, t, hs.URL+Path, toks[0])
			var text map[string]any
			if len(res.Content) != 1 || json.Unmarshal([]byte(res.Content[0].Text), &text) != nil {
				t.Fatalf("content %+v: want one text block of JSON", res.Content)
			}
			if diff := cmp.Diff(res.StructuredContent, text); diff != "" {
				t.Errorf("text block and structuredContent differ (-structured +text):\n%s", diff)
			}
			got := res.StructuredContent
			if got["clientId"] == nil {
				t.Fatalf("structuredContent %v has no clientId", got)
			}
			delete(got, "clientId")
			if name == Runtime {
				want = got
				return
			}
			if want == nil {
				t.Fatal("the runtime's result was not read first")
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("stand-in result differs from the runtime's (-runtime +%s):\n%s", name, diff)
			}
		})
	}
}

// toolResult is the part of a tools/call result callRaw decodes.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	StructuredContent map[string]any `json:"structuredContent"`
}

// callRaw calls runtime_capabilities as a 2026-07-28 request and decodes
// its result, from a JSON or an event-stream reply.
func callRaw(ctx context.Context, t *testing.T, url, token string) toolResult {
	t.Helper()
	body := mcpclient.ToolRequest(nil, 1, CapabilitiesTool, true)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"Authorization": "Bearer " + token, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
		"MCP-Protocol-Version": mcpclient.ModernVersion, "Mcp-Method": "tools/call", "Mcp-Name": CapabilitiesTool,
	} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		if raw, err = mcpclient.ReadSSEReply(resp.Body, 1); err != nil {
			t.Fatalf("SSE reply: %v", err)
		}
	} else {
		var msg struct{ Result json.RawMessage }
		if err := json.NewDecoder(resp.Body).Decode(&msg); err != nil {
			t.Fatalf("JSON reply: %v", err)
		}
		raw = msg.Result
	}
	var res toolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s: %v", raw, err)
	}
	return res
}

// TestModernHeader pins which requests go-sdk's stateless handler gets.
func TestModernHeader(t *testing.T) {
	for _, tc := range []struct {
		version string
		want    bool
	}{
		{"", false},
		{"2025-11-25", false},
		{"2025-06-18", false},
		{"2026-07-28", true},
		{"2027-01-01", true},
	} {
		h := http.Header{}
		if tc.version != "" {
			h.Set("Mcp-Protocol-Version", tc.version)
		}
		if got := modernHeader(h); got != tc.want {
			t.Errorf("modernHeader(%q) = %v, want %v", tc.version, got, tc.want)
		}
	}
}

func TestControl(t *testing.T) {
	srv := newFloor(EchoTool)
	hs := httptest.NewServer(Control(srv))
	defer hs.Close()

	resp, err := http.Post(hs.URL+"/bench/tokens?n=3", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var got struct{ Tokens []string }
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil || len(got.Tokens) != 3 {
		t.Fatalf("tokens: %+v, %v", got, err)
	}
	for _, tc := range []struct {
		token string
		want  int
	}{{got.Tokens[0], http.StatusNoContent}, {got.Tokens[0], http.StatusNotFound}} {
		resp, err := http.Post(hs.URL+"/bench/revoke?token="+url.QueryEscape(tc.token), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("revoke: %s, want %d", resp.Status, tc.want)
		}
	}
	resp, err = http.Post(hs.URL+"/bench/tokens?n=0", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("tokens?n=0: %s, want 400", resp.Status)
	}

	resp, err = http.Get(hs.URL + "/bench/stats")
	if err != nil {
		t.Fatal(err)
	}
	var st result.ServerStats
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || st.HeapAlloc == 0 || st.NumGoroutine == 0 {
		t.Fatalf("stats: %+v, %v", st, err)
	}
}

func TestReadAllocsGrows(t *testing.T) {
	// Large objects (over 32 KiB) are counted as they are allocated; small
	// ones when their span is refilled.
	const n, size = 10, 64 << 10
	before := ReadAllocs()
	sink := make([][]byte, 0, n)
	for range n {
		sink = append(sink, make([]byte, size))
	}
	after := ReadAllocs()
	if len(sink) != n || after.Objects < before.Objects+n || after.Bytes < before.Bytes+n*size {
		t.Fatalf("allocs %+v → %+v after %d objects of %d bytes", before, after, n, size)
	}
}

func TestParseProcStatCPU(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       uint64
		ok         bool
	}{
		{"plain", "15878 (cat) R 15876 15876 21134 0 -1 4194304 100 0 0 0 7 3 0 0 20 0 1 0 574955", 10, true},
		{"a name with spaces and parentheses", "42 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 9 0 1", 300, true},
		{"truncated", "42 (x) S 1 1 1 0 -1 0 0 0 0 0 250", 0, false},
		{"no name", "42 x S 1 1 1 0 -1 0 0 0 0 0 250 50", 0, false},
		{"not a number", "42 (x) S 1 1 1 0 -1 0 0 0 0 0 a 50 0", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseProcStatCPU([]byte(tc.stat))
			if (err == nil) != tc.ok || got != tc.want {
				t.Errorf("parseProcStatCPU(%q) = %d, %v; want %d, ok %v", tc.stat, got, err, tc.want, tc.ok)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	status := []byte("Name:\tbench\nVmPeak:\t  9000 kB\nVmRSS:\t    1234 kB\nThreads:\t3\n")
	if got := parseVmRSS(status); got != 1234<<10 {
		t.Errorf("parseVmRSS = %d, want %d", got, 1234<<10)
	}
	for _, bad := range []string{"", "VmRSS: x kB\n", "VmRSS: 12 MB\n"} {
		if got := parseVmRSS([]byte(bad)); got != 0 {
			t.Errorf("parseVmRSS(%q) = %d, want 0", bad, got)
		}
	}
}

func TestRequireBearer(t *testing.T) {
	var ts TokenSet
	tok := ts.Issue(1)[0]
	h := RequireBearer(&ts, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "ok")
	}))
	for _, tc := range []struct {
		header string
		want   int
	}{
		{"Bearer " + tok, http.StatusOK},
		{"bearer " + tok, http.StatusOK},
		{"Bearer nope", http.StatusUnauthorized},
		{"Basic " + tok, http.StatusUnauthorized},
		{"Bearer", http.StatusUnauthorized},
		{"", http.StatusUnauthorized},
	} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, Path, nil)
		if tc.header != "" {
			req.Header.Set("Authorization", tc.header)
		}
		h.ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("Authorization %q: %d, want %d", tc.header, rec.Code, tc.want)
		}
		if rec.Code == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
			t.Errorf("Authorization %q: 401 without WWW-Authenticate", tc.header)
		}
	}
}

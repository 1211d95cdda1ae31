package servers

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

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
	srv := newFloor()
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

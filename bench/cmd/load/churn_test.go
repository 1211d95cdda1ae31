package main

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/servers"
)

// TestModernChurnOneConnectionPerClient runs short-lived 2026-07-28
// clients against each server and counts the connections the server
// accepted: exactly one per client.
func TestModernChurnOneConnectionPerClient(t *testing.T) {
	const cycles = 5
	for _, name := range servers.Names {
		t.Run(name, func(t *testing.T) {
			srv, err := servers.New(name, servers.Options{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer srv.Close()
			var accepted atomic.Int64
			hs := httptest.NewUnstartedServer(srv.Handler())
			hs.Config.ConnState = func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					accepted.Add(1)
				}
			}
			hs.Start()
			defer hs.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			toks, err := srv.IssueTokens(ctx, 1)
			if err != nil {
				t.Fatalf("IssueTokens: %v", err)
			}
			cfg := config{addr: hs.Listener.Addr().String(), timeout: 5 * time.Second}
			c := newClient(cfg, 1)
			for i := range cycles {
				if err := modernChurnOnce(ctx, cfg, c, toks[0], "hello"); err != nil {
					t.Fatalf("cycle %d: %v", i, err)
				}
				c.HTTP.CloseIdleConnections()
			}
			if got := accepted.Load(); got != cycles {
				t.Errorf("the server accepted %d connections for %d short-lived clients, want %d", got, cycles, cycles)
			}
		})
	}
}

// TestModernChurnRefusesASecondConnection: a server that closes the
// connection after server/discover makes the client dial again, and the
// cycle counts as an error, not as a faster one.
func TestModernChurnRefusesASecondConnection(t *testing.T) {
	srv, err := servers.New(servers.Floor, servers.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := srv.Handler()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Mcp-Method") == "server/discover" {
			w.Header().Set("Connection", "close")
		}
		h.ServeHTTP(w, r)
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	toks, _ := srv.IssueTokens(ctx, 1)
	cfg := config{addr: hs.Listener.Addr().String(), timeout: 5 * time.Second}
	err = modernChurnOnce(ctx, cfg, newClient(cfg, 1), toks[0], "hello")
	if err == nil || !strings.Contains(err.Error(), "2 new and 0 reused connections") {
		t.Fatalf("a client that needed two connections: %v, want the connection count error", err)
	}
}

func TestParseFlagsTokens(t *testing.T) {
	base := []string{"-addr", "127.0.0.1:1", "-control", "127.0.0.1:2"}
	for _, tc := range []struct {
		name string
		args []string
		want int
	}{
		{"calls: one per session", []string{"-mode", "calls", "-sessions", "16"}, 16},
		{"modern: one per session", []string{"-mode", "modern", "-sessions", "8"}, 8},
		{"idle: 100", []string{"-mode", "idle", "-sessions", "1000"}, 100},
		{"idle: never more than sessions", []string{"-mode", "idle", "-sessions", "10"}, 10},
		{"one namespace", []string{"-mode", "calls", "-sessions", "64", "-tokens", "1"}, 1},
		{"clipped to sessions", []string{"-mode", "calls", "-sessions", "4", "-tokens", "9"}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(append(append([]string{}, base...), tc.args...))
			if err != nil {
				t.Fatalf("parseFlags: %v", err)
			}
			if cfg.tokens != tc.want {
				t.Errorf("tokens = %d, want %d", cfg.tokens, tc.want)
			}
		})
	}
	if _, err := parseFlags(append(base, "-tokens", "-1")); err == nil {
		t.Error("-tokens -1 accepted")
	}
}

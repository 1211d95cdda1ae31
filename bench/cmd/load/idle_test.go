package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/servers"
)

// TestIdleBaselineIsWarm: idle reads the server's baseline only after its
// warm-up — one session per connection opened and deleted — so what does
// not grow with the sessions held (the connections, the server's first-use
// state) is not counted as their cost, and the sessions held
// are all counted, none of the warm-up's.
func TestIdleBaselineIsWarm(t *testing.T) {
	srv, err := servers.New(servers.Runtime, servers.Options{
		MaxSessions: 100, MaxSessionsPerNamespace: 100, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var deletes atomic.Int64
	mcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodDelete {
			deletes.Add(1)
		}
		srv.Handler().ServeHTTP(w, r)
	}))
	defer mcp.Close()
	var deletesAtBaseline atomic.Int64
	deletesAtBaseline.Store(-1)
	control := servers.Control(srv)
	ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/bench/stats" {
			deletesAtBaseline.CompareAndSwap(-1, deletes.Load()) // the first read: the baseline
		}
		control.ServeHTTP(w, r)
	}))
	defer ctl.Close()

	const conns, sessions = 4, 10
	cfg := config{
		impl: servers.Runtime, mode: "idle",
		addr:     strings.TrimPrefix(mcp.URL, "http://"),
		control:  strings.TrimPrefix(ctl.URL, "http://"),
		sessions: sessions, tokens: 2, conns: conns, timeout: 30 * time.Second,
	}
	res, err := runIdle(context.Background(), cfg)
	if err != nil {
		t.Fatalf("runIdle: %v", err)
	}
	if res.Errors != 0 || res.Ops != sessions {
		t.Errorf("runIdle: %d errors (first: %s), %d sessions held; want 0 errors, %d held", res.Errors, res.FirstErr, res.Ops, sessions)
	}
	if got := deletesAtBaseline.Load(); got != conns {
		t.Errorf("sessions deleted before the baseline was read = %d, want %d (one per connection)", got, conns)
	}
}

// TestIdleHeapUnmeasured: where the server's stats were read without
// collecting garbage (the shipped binary), idle gives no live heap per
// session, only the rest; where they were collected, it does.
func TestIdleHeapUnmeasured(t *testing.T) {
	for _, collected := range []bool{true, false} {
		srv, err := servers.New(servers.Runtime, servers.Options{
			MaxSessions: 100, MaxSessionsPerNamespace: 100, Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		mcp := httptest.NewServer(srv.Handler())
		control := servers.Control(srv)
		ctl := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/bench/stats" {
				control.ServeHTTP(w, r)
				return
			}
			st := servers.ReadStats()
			st.Collected = collected
			st.HeapAlloc += 1 << 30 // the garbage of a heap nobody collected
			_ = json.NewEncoder(w).Encode(st)
		}))
		cfg := config{
			impl: servers.Runtime, mode: "idle",
			addr:     strings.TrimPrefix(mcp.URL, "http://"),
			control:  strings.TrimPrefix(ctl.URL, "http://"),
			sessions: 10, tokens: 2, conns: 2, timeout: 30 * time.Second,
		}
		res, err := runIdle(context.Background(), cfg)
		ctl.Close()
		mcp.Close()
		srv.Close()
		if err != nil {
			t.Fatalf("collected %v: runIdle: %v", collected, err)
		}
		if res.HeapUnmeasured == collected || (res.HeapPerSession != 0) == !collected {
			t.Errorf("collected %v: heap unmeasured %v, heap per session %v", collected, res.HeapUnmeasured, res.HeapPerSession)
		}
	}
}

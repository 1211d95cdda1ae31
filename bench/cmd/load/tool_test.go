package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/result"
	"github.com/agenthost/mcpruntime/bench/internal/servers"
)

func TestParseFlagsTool(t *testing.T) {
	base := []string{"-addr", "127.0.0.1:1", "-control", "127.0.0.1:2"}
	for _, tc := range []struct {
		name string
		args []string
		want string
		ok   bool
	}{
		{"echo by default", nil, "echo", true},
		{"another tool", []string{"-tool", "runtime_capabilities"}, "runtime_capabilities", true},
		{"no name", []string{"-tool", ""}, "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := parseFlags(append(append([]string{}, base...), tc.args...))
			if (err == nil) != tc.ok || (tc.ok && cfg.tool != tc.want) {
				t.Errorf("parseFlags(%q) = tool %q, %v; want %q, ok %v", tc.args, cfg.tool, err, tc.want, tc.ok)
			}
		})
	}
}

// TestCallsOnTool runs the calls and modern modes with -tool
// runtime_capabilities: every tools/call the server gets names that tool,
// with {} as arguments, and the runs have no errors; a tool the server
// lacks makes errors.
func TestCallsOnTool(t *testing.T) {
	for _, tc := range []struct {
		name       string
		tool       string
		wantErrors bool
	}{
		{"served", servers.CapabilitiesTool, false},
		{"not served", "no_such_tool", true},
	} {
		for _, mode := range []string{result.ModeCalls, result.ModeModern} {
			t.Run(tc.name+"/"+mode, func(t *testing.T) {
				srv, err := servers.New(servers.Runtime, servers.Options{Tool: servers.CapabilitiesTool, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					t.Fatal(err)
				}
				defer srv.Close()
				var mu sync.Mutex
				called := map[string]int{} // "name arguments" → calls
				mcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					body, _ := io.ReadAll(r.Body)
					var msg struct {
						Method string
						Params struct {
							Name      string
							Arguments json.RawMessage
						}
					}
					if json.Unmarshal(body, &msg) == nil && msg.Method == "tools/call" {
						mu.Lock()
						called[msg.Params.Name+" "+string(msg.Params.Arguments)]++
						mu.Unlock()
					}
					r.Body = io.NopCloser(bytes.NewReader(body))
					srv.Handler().ServeHTTP(w, r)
				}))
				defer mcp.Close()
				ctl := httptest.NewServer(servers.Control(srv))
				defer ctl.Close()
				cfg := config{
					impl: servers.Runtime, mode: mode, tool: tc.tool,
					addr: strings.TrimPrefix(mcp.URL, "http://"), control: strings.TrimPrefix(ctl.URL, "http://"),
					sessions: 2, tokens: 2, duration: 200 * time.Millisecond, timeout: 5 * time.Second,
				}
				res, err := runCalls(context.Background(), cfg)
				if err != nil {
					t.Fatalf("runCalls: %v", err)
				}
				mu.Lock()
				defer mu.Unlock()
				if len(called) != 1 || called[tc.tool+" {}"] == 0 {
					t.Errorf("tools/call requests %v, want %s with {} only", called, tc.tool)
				}
				if (res.Errors > 0) != tc.wantErrors {
					t.Errorf("errors %d (first: %s), want errors %v", res.Errors, res.FirstErr, tc.wantErrors)
				}
			})
		}
	}
}

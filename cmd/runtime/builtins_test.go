package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeOmitBuiltins: --omit-builtins leaves the named built-ins out
// of what the server lists; an unknown name is a usage error.
func TestServeOmitBuiltins(t *testing.T) {
	ctx := context.Background()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	mcpAddr, adminAddr, _, _ := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo", "--memory",
		"--omit-builtins", "thread_post,runtime_capabilities")
	code, stdout, stderr := runCLI(ctx, map[string]string{}, "admin", "--admin-url", "http://"+adminAddr, "--admin-token-file", tokenFile,
		"client", "create", "--access", "read-write", "-f", "token")
	if code != 0 {
		t.Fatalf("client create: exit %d %s", code, stderr)
	}
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", "Bearer "+strings.TrimSpace(stdout))
	c.initialize()
	status, body := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`)
	if status != 200 || !strings.Contains(body, `"thread_read"`) || !strings.Contains(body, `"thread_list"`) ||
		strings.Contains(body, `"thread_post"`) || strings.Contains(body, `"runtime_capabilities"`) {
		t.Errorf("tools/list with thread_post and runtime_capabilities left out: %d %s", status, body)
	}
	code, _, stderr = runCLI(ctx, map[string]string{}, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-token-file", filepath.Join(t.TempDir(), "t"), "--memory", "--omit-builtins", "thread_delete")
	if code != 2 || !strings.Contains(stderr, `"thread_delete" is not a built-in`) {
		t.Errorf("--omit-builtins thread_delete: exit %d, stderr %s", code, stderr)
	}
}

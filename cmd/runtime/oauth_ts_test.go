package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tsClientDir is the npm project of the TypeScript SDK client, installed
// from its lockfile by scripts/test-deps.sh (make test runs it).
const tsClientDir = "../../e2e/oauth-client"

// SPEC §5c, end to end with the official TypeScript SDK client
// (@modelcontextprotocol/sdk, pinned in e2e/oauth-client/package-lock.json)
// against `runtime serve` as `make run` starts it: from nothing but the
// URL, 401 → metadata → registration → consent with a pairing code from
// the admin API → token → tools/list and a read tool → refresh → the same
// MCP session → admin revoke → 401. The client prints the requests it
// made and their statuses (no secrets); they are checked here and logged.
func TestTypeScriptSDKOAuth(t *testing.T) {
	node, err := filepath.Abs(filepath.Join(tsClientDir, "node_modules", ".bin", "node"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(tsClientDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the TypeScript SDK is not installed (%v): run scripts/test-deps.sh, as make test does", err)
	}
	const adminToken = "admin-token-for-the-ts-test-0123456789"
	mcpAddr, adminAddr, logs, _ := startServe(t, map[string]string{"RUNTIME_ADMIN_TOKEN": adminToken}, "--no-demo")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // detects a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "client.mjs")
	cmd.Dir = tsClientDir
	cmd.Env = []string{"MCP_URL=http://" + mcpAddr + "/mcp", "ADMIN_URL=http://" + adminAddr, "ADMIN_TOKEN=" + adminToken, "PATH=" + os.Getenv("PATH")}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var transcript []string
	var last map[string]any
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		transcript = append(transcript, line)
		last = nil
		json.Unmarshal([]byte(line), &last)
	}
	t.Logf("transcript of the TypeScript SDK client:\n%s", strings.Join(transcript, "\n"))
	if err != nil || last["result"] != "ok" {
		t.Fatalf("client.mjs: %v, last line %v\nstderr:\n%s\nserver log:\n%s", err, last, stderr.String(), logs)
	}
	for _, want := range []string{
		`"step":"connect","method":"POST","path":"/mcp","rpc":"initialize","status":401`,
		`"path":"/.well-known/oauth-protected-resource/mcp","status":200`,
		`"path":"/.well-known/oauth-authorization-server","status":200`,
		`"method":"POST","path":"/oauth/register","status":201`,
		`"method":"GET","path":"/oauth/authorize","status":200`,
		`"method":"POST","path":"/oauth/authorize","status":303`,
		`"step":"token","method":"POST","path":"/oauth/token","status":200`,
		`"step":"tools","method":"POST","path":"/mcp","rpc":"tools/call","status":200`,
		`"step":"refresh","method":"POST","path":"/oauth/token","status":200`,
		`"step":"same-session","method":"POST","path":"/mcp","rpc":"tools/call","status":200`,
		`"step":"after-revoke","method":"POST","path":"/mcp","rpc":"tools/call","status":401`,
		`"step":"after-revoke","method":"POST","path":"/oauth/token","status":400`,
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the transcript lacks %s", want)
		}
	}
	for _, secret := range []string{adminToken, "mcprc_", "mcprr_", "code="} {
		if strings.Contains(string(out), secret) || strings.Contains(logs.String(), secret) {
			t.Errorf("%q appears in the transcript or the server's log", secret)
		}
	}
}

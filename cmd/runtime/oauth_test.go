package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// SPEC §5c, §7: `runtime serve` signs MCP clients in by default: the
// metadata is on the MCP listener, derived from the listener's URL; a 401
// names it; `runtime admin oauth pair` mints a pairing code.
func TestServeOAuth(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	mcpAddr, adminAddr, logs, _ := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo")
	origin := "http://" + mcpAddr
	code, body := httpGet(t, origin+"/.well-known/oauth-protected-resource/mcp")
	var prm map[string]any
	if code != http.StatusOK || json.Unmarshal([]byte(body), &prm) != nil || prm["resource"] != origin+"/mcp" {
		t.Fatalf("protected-resource metadata = %d %s, want resource %s/mcp", code, body, origin)
	}
	code, body = httpGet(t, origin+"/.well-known/oauth-authorization-server")
	if code != http.StatusOK || !strings.Contains(body, `"issuer":"`+origin+`"`) {
		t.Errorf("authorization-server metadata = %d %s", code, body)
	}
	resp, err := http.Post(origin+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	want := `Bearer resource_metadata="` + origin + `/.well-known/oauth-protected-resource/mcp", scope="mcp"`
	if got := resp.Header.Get("WWW-Authenticate"); resp.StatusCode != 401 || got != want {
		t.Errorf("401 without a token: %d %q, want %q", resp.StatusCode, got, want)
	}
	exit, stdout, stderr := runCLI(context.Background(), map[string]string{},
		"admin", "--admin-url", "http://"+adminAddr, "--admin-token-file", tokenFile, "oauth", "pair", "--access", "read-write", "-f", "code")
	pc := strings.TrimSpace(stdout)
	if exit != 0 || !regexp.MustCompile(`^[0-9A-Z]{5}-[0-9A-Z]{5}$`).MatchString(pc) {
		t.Fatalf("admin oauth pair: exit %d, stdout %q, stderr %s", exit, stdout, stderr)
	}
	if strings.Contains(logs.String(), pc) {
		t.Errorf("the pairing code is in the log")
	}
	if !strings.Contains(logs.String(), "oauth_issuer="+origin) {
		t.Errorf("the ready line does not name the issuer:\n%s", logs)
	}
}

func TestServeNoOAuth(t *testing.T) {
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	mcpAddr, adminAddr, _, _ := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo", "--no-oauth")
	if code, _ := httpGet(t, "http://"+mcpAddr+"/.well-known/oauth-protected-resource/mcp"); code != http.StatusNotFound {
		t.Errorf("metadata with --no-oauth = %d, want 404", code)
	}
	resp, err := http.Post("http://"+mcpAddr+"/mcp", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if got := resp.Header.Get("WWW-Authenticate"); got != "Bearer" {
		t.Errorf("401 with --no-oauth: WWW-Authenticate %q, want Bearer", got)
	}
	exit, _, stderr := runCLI(context.Background(), map[string]string{},
		"admin", "--admin-url", "http://"+adminAddr, "--admin-token-file", tokenFile, "oauth", "pair")
	if exit != 1 || !strings.Contains(stderr, "oauth_disabled") {
		t.Errorf("admin oauth pair with --no-oauth: exit %d, stderr %s", exit, stderr)
	}
}

func TestServeOAuthSettings(t *testing.T) {
	short := writeFile(t, "too short")
	for _, args := range [][]string{
		{"--public-origin", "ftp://x"},
		{"--public-origin", "https://rt.example/mcp"},
		{"--pairing-code-ttl", "never"},
		{"--oauth-secret-file", short},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		exit, _, stderr := runCLI(ctx, map[string]string{"RUNTIME_ADMIN_TOKEN": "x"}, append([]string{"serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0", "--no-demo"}, args...)...)
		cancel()
		if exit != 2 {
			t.Errorf("serve %v: exit %d, want 2; stderr %s", args, exit, stderr)
		}
	}
}

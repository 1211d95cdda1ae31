package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// rawGet sends one request to addr with the path exactly as given (no
// cleaning by the client, no redirect followed) and returns the answer.
func rawGet(t *testing.T, addr, method, path string, header map[string]string) (status int, h http.Header, body string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	host := addr
	if v, ok := header["Host"]; ok {
		host = v
	}
	req := method + " " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	for k, v := range header {
		if k != "Host" {
			req += k + ": " + v + "\r\n"
		}
	}
	if _, err := io.WriteString(conn, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// TestAdminListener: the admin listener answers every path as sent — no
// cleaning, no redirect, 404 JSON without a token for what names no route —
// and the Host/Origin guard covers /healthz, /readyz, /metrics and
// /admin/….
func TestAdminListener(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "admin-token")
	_, adminAddr, _, stop := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo")
	tok, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	bearer := "Bearer " + strings.TrimSpace(string(tok))
	evil := map[string]string{"Host": "evil.example:7332"}
	tests := []struct {
		name   string
		method string
		path   string
		header map[string]string
		want   int
		code   string // the error code of a JSON error answer
	}{
		{name: "healthz", method: "GET", path: "/healthz", want: 200},
		{name: "healthz HEAD", method: "HEAD", path: "/healthz", want: 200},
		{name: "readyz", method: "GET", path: "/readyz", want: 200},
		{name: "metrics", method: "GET", path: "/metrics", want: 200},
		{name: "metrics via localhost", method: "GET", path: "/metrics", header: map[string]string{"Host": "localhost"}, want: 200},
		{name: "admin with token", method: "GET", path: "/admin/v1/threads", header: map[string]string{"Authorization": bearer}, want: 200},
		{name: "unknown path", method: "GET", path: "/nope", want: 404, code: "not_found"},
		{name: "OAuth discovery probe", method: "GET", path: "/.well-known/oauth-authorization-server", want: 404, code: "not_found"},
		{name: "root", method: "GET", path: "/", want: 404, code: "not_found"},
		{name: "double slash", method: "GET", path: "//healthz", want: 404, code: "not_found"},
		{name: "dot segment", method: "GET", path: "/./metrics", want: 404, code: "not_found"},
		{name: "trailing slash", method: "GET", path: "/healthz/", want: 404, code: "not_found"},
		{name: "dot-dot out of admin", method: "GET", path: "/admin/../metrics", want: 404, code: "not_found"},
		{name: "dot-dot thread id", method: "GET", path: "/admin/v1/threads/..", want: 404, code: "not_found"},
		{name: "dot thread id", method: "DELETE", path: "/admin/v1/threads/.", want: 404, code: "not_found"},
		{name: "escaped dot-dot", method: "GET", path: "/admin/v1/threads/%2e%2e", want: 404, code: "not_found"},
		{name: "double slash in admin", method: "GET", path: "/admin//v1/threads", want: 404, code: "not_found"},
		{name: "unknown admin route without token", method: "GET", path: "/admin/v1/nope", want: 404, code: "not_found"},
		{name: "admin without token", method: "GET", path: "/admin/v1/threads", want: 401, code: "unauthorized"},
		{name: "POST healthz", method: "POST", path: "/healthz", want: 405, code: "method_not_allowed"},
		{name: "DELETE metrics", method: "DELETE", path: "/metrics", want: 405, code: "method_not_allowed"},
		{name: "rebound Host, metrics", method: "GET", path: "/metrics", header: evil, want: 403, code: "forbidden"},
		{name: "rebound Host, healthz", method: "GET", path: "/healthz", header: evil, want: 403, code: "forbidden"},
		{name: "rebound Host, readyz", method: "GET", path: "/readyz", header: evil, want: 403, code: "forbidden"},
		{name: "rebound Host, admin with token", method: "GET", path: "/admin/v1/threads",
			header: map[string]string{"Host": "evil.example", "Authorization": bearer}, want: 403, code: "forbidden"},
		{name: "rebound Host, unknown path", method: "GET", path: "/nope", header: evil, want: 403, code: "forbidden"},
		{name: "foreign Origin, metrics", method: "GET", path: "/metrics", header: map[string]string{"Origin": "http://evil.example"}, want: 403, code: "forbidden"},
		{name: "loopback Origin, healthz", method: "GET", path: "/healthz", header: map[string]string{"Origin": "http://localhost:3000"}, want: 200},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			status, h, body := rawGet(t, adminAddr, test.method, test.path, test.header)
			if status != test.want {
				t.Fatalf("%s %s = %d (Location %q) %s, want %d", test.method, test.path, status, h.Get("Location"), body, test.want)
			}
			if loc := h.Get("Location"); loc != "" {
				t.Errorf("Location %q: the listener redirected", loc)
			}
			ct := h.Get("Content-Type")
			if test.path == "/metrics" && status == 200 {
				if !strings.HasPrefix(ct, "text/plain") {
					t.Errorf("metrics Content-Type %q", ct)
				}
				return
			}
			if ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			if test.method == "HEAD" {
				return
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatalf("body %q is not a JSON object: %v", body, err)
			}
			if test.code != "" && m["error"] != test.code {
				t.Errorf("error %v, want %q (body %s)", m["error"], test.code, body)
			}
		})
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
}

// TestAdminAllowedHosts: --admin-allowed-hosts lets a named Host through
// to the admin listener; the MCP listener's --allowed-hosts does not.
func TestAdminAllowedHosts(t *testing.T) {
	dir := t.TempDir()
	_, adminAddr, _, stop := startServe(t, map[string]string{}, "--admin-token-file", filepath.Join(dir, "admin-token"),
		"--no-demo", "--admin-allowed-hosts", "runtime.internal", "--allowed-hosts", "mcp.internal")
	for host, want := range map[string]int{"runtime.internal:7332": 200, "runtime.internal": 200, "mcp.internal": 403, "other.internal": 403} {
		if status, _, body := rawGet(t, adminAddr, "GET", "/healthz", map[string]string{"Host": host}); status != want {
			t.Errorf("Host %s: %d %s, want %d", host, status, body, want)
		}
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
}

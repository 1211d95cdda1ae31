package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// auditLines reads the audit file's records (none: the file is missing).
func auditLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("audit file line %q: %v", line, err)
		}
		out = append(out, rec)
	}
	return out
}

// waitFor polls cond; the bound only detects a hang.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestServeAuditFile (SPEC §3.7): `runtime serve --audit-file` appends one
// JSON line per tools/call, created 0600, with the principal and the
// outcome and neither the token nor an argument; SIGHUP reopens the path,
// so after a rotation the next records go to a new file; at shutdown the
// file has every record.
func TestServeAuditFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "audit.log")
	env := map[string]string{"RUNTIME_ADMIN_TOKEN": "env-admin-token-0123456789abcdef0123456789", "RUNTIME_ADMIN_TOKEN_FILE": filepath.Join(dir, "admin-token")}
	mcpAddr, adminAddr, logs, stop := startServe(t, env, "--memory", "--demo", "--audit-file", path)
	auth, err := os.ReadFile(filepath.Join(dir, "demo-authorization"))
	if err != nil {
		t.Fatalf("demo credential: %v; logs:\n%s", err, logs)
	}
	token := strings.TrimPrefix(strings.TrimSpace(string(auth)), "Bearer ")
	const secret = "s3cr3t-argument"
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", strings.TrimSpace(string(auth)))
	c.initialize()
	call := func(id int, name, args string) {
		t.Helper()
		body := `{"jsonrpc":"2.0","id":` + strconv.Itoa(id) + `,"method":"tools/call","params":{"name":"` + name + `","arguments":` + args + `}}`
		if status, res := c.post(body); status != 200 {
			t.Fatalf("%s: %d %s", name, status, res)
		}
	}
	call(2, "thread_post", `{"text":"`+secret+`"}`)
	call(3, "no_such_tool", `{"x":"`+secret+`"}`)
	waitFor(t, "two audit records", func() bool { return len(auditLines(t, path)) == 2 })
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("audit file: %v (mode %v), want 0600", err, fi)
	}
	rotated := path + ".1"
	if err := os.Rename(path, rotated); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reopen", func() bool { return strings.Contains(logs.String(), "audit file reopened") })
	call(4, "runtime_capabilities", `{}`)
	waitFor(t, "the record in the new file", func() bool { return len(auditLines(t, path)) == 1 })
	if status, body := httpGet(t, "http://"+adminAddr+"/metrics"); status != 200 || !strings.Contains(body, "runtime_audit_records_written_total 3") {
		t.Errorf("/metrics: %d, want runtime_audit_records_written_total 3 in it", status)
	}
	if code := stop(); code != 0 {
		t.Fatalf("serve exited %d; logs:\n%s", code, logs)
	}
	type want struct{ tool, outcome, code string }
	for _, f := range []struct {
		path  string
		wants []want
	}{
		{rotated, []want{{"thread_post", "ok", ""}, {"no_such_tool", "error", "unknown_tool"}}},
		{path, []want{{"runtime_capabilities", "ok", ""}}},
	} {
		raw, _ := os.ReadFile(f.path)
		if strings.Contains(string(raw), token) || strings.Contains(string(raw), secret) {
			t.Errorf("%s carries the token or an argument:\n%s", f.path, raw)
		}
		recs := auditLines(t, f.path)
		if len(recs) != len(f.wants) {
			t.Fatalf("%s: %d records, want %d:\n%s", f.path, len(recs), len(f.wants), raw)
		}
		for i, w := range f.wants {
			r := recs[i]
			code, _ := r["code"].(string)
			if r["kind"] != "audit.tool" || r["tool"] != w.tool || r["outcome"] != w.outcome || code != w.code ||
				r["principalKind"] != "provider" || r["thread"] != "demo" || r["instance"] != "demo" {
				t.Errorf("%s record %d = %v, want %v by the demo provider", f.path, i, r, w)
			}
		}
	}
}

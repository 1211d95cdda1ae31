package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDefaultStateDir(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"XDG_STATE_HOME": "/x/state", "HOME": "/home/u"}, "/x/state/mcpruntime"},
		{map[string]string{"HOME": "/home/u"}, "/home/u/.local/state/mcpruntime"},
		{map[string]string{}, ""},
	} {
		if got := defaultStateDir(tc.env); got != tc.want {
			t.Errorf("defaultStateDir(%v) = %q, want %q", tc.env, got, tc.want)
		}
	}
}

// The state directory runtime serve resolves: durable by default, in
// memory when told (or with nowhere to put it), and a usage error when
// told both ways.
func TestStateDirChoice(t *testing.T) {
	home := t.TempDir()
	def := filepath.Join(home, ".local", "state", "mcpruntime")
	other := filepath.Join(t.TempDir(), "elsewhere")
	for _, tc := range []struct {
		name  string
		args  []string
		env   map[string]string
		want  string
		usage string // a usage error containing this
	}{
		{"default", nil, map[string]string{"HOME": home}, def, ""},
		{"named", []string{"--state-dir", other}, map[string]string{"HOME": home}, other, ""},
		{"env", nil, map[string]string{"HOME": home, "RUNTIME_STATE_DIR": other}, other, ""},
		{"empty", []string{"--state-dir="}, map[string]string{"HOME": home}, "", ""},
		{"nowhere", nil, map[string]string{}, "", ""},
		{"memory", []string{"--memory"}, map[string]string{"HOME": home}, "", ""},
		{"memory and dir", []string{"--memory", "--state-dir", other}, map[string]string{"HOME": home}, "", "--memory and --state-dir"},
		{"memory and env dir", []string{"--memory"}, map[string]string{"HOME": home, "RUNTIME_STATE_DIR": other}, "", "--memory and --state-dir"},
		{"etcd", []string{"--etcd", "127.0.0.1:2379"}, map[string]string{"HOME": home}, "", ""},
		{"etcd and dir", []string{"--etcd", "127.0.0.1:2379", "--state-dir", other}, map[string]string{"HOME": home}, "", "with --etcd"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c cli
			kctx, code, err := parse(&c, append([]string{"serve"}, tc.args...), tc.env, io.Discard, io.Discard)
			if err != nil || code >= 0 {
				t.Fatalf("parse: code %d, err %v", code, err)
			}
			got, err := c.Serve.stateDir(tc.env, givenSettings(kctx), slog.New(slog.DiscardHandler))
			if tc.usage != "" {
				if !errors.As(err, new(usageError)) || !strings.Contains(err.Error(), tc.usage) {
					t.Fatalf("err %v, want a usage error saying %q", err, tc.usage)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("stateDir = %q, %v; want %q", got, err, tc.want)
			}
			if got == "" {
				return
			}
			fi, err := os.Stat(got)
			if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
				t.Fatalf("state directory %s: %v, %v", got, fi.Mode(), err)
			}
		})
	}
}

// The OAuth secret of a state directory is made once, 0600, and read
// back the same at the next start; a short one is refused, naming it.
func TestStateSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), oauthSecretName)
	first, err := stateSecret(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) < 32 {
		t.Fatalf("secret of %d bytes", len(first))
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("secret file: %v %v", fi.Mode(), err)
	}
	again, err := stateSecret(path)
	if err != nil || string(again) != string(first) {
		t.Fatalf("second read %q, %v; want the first %q", again, err, first)
	}
	short := filepath.Join(t.TempDir(), oauthSecretName)
	if err := os.WriteFile(short, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := stateSecret(short); err == nil || !strings.Contains(err.Error(), short) {
		t.Fatalf("short secret: %v", err)
	}
}

// runtime serve on a state directory, restarted: the thread and its
// message, the client grant and its token, the instance and the OAuth
// secret are there again; the provider credential of before is refused;
// a second server on the directory is refused while the first runs; a
// backup taken while it serves reads back and starts a server with the
// same state; and a server in memory has no backup to give.
func TestServeStateAcrossRestart(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "state")
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	start := func(stateDir string) (mcpAddr, adminAddr string, logs *syncBuffer, stop func() int) {
		return startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo", "--state-dir", stateDir)
	}
	admin := func(adminAddr string, args ...string) (int, string, string) {
		t.Helper()
		return runCLI(ctx, map[string]string{}, append([]string{"admin", "--admin-url", "http://" + adminAddr, "--admin-token-file", tokenFile}, args...)...)
	}
	must := func(adminAddr string, args ...string) string {
		t.Helper()
		code, stdout, stderr := admin(adminAddr, args...)
		if code != 0 {
			t.Fatalf("admin %q: exit %d, stderr %s", args, code, stderr)
		}
		return strings.TrimSpace(stdout)
	}

	mcpAddr, adminAddr, _, stop := start(dir)
	must(adminAddr, "instance", "create", "A", "--driver", "inproc")
	must(adminAddr, "thread", "create", "t1", "--instance", "A")
	auth := must(adminAddr, "provider-session", "open", "t1", "A", "-f", "authorization")
	must(adminAddr, "run", "start", "t1", "A")
	c := newMCPClient(t, "http://"+mcpAddr+"/mcp", auth)
	c.initialize()
	if status, body := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"before the restart"}}}`); status != 200 || strings.Contains(body, `"isError":true`) {
		t.Fatalf("thread_post: %d %s", status, body)
	}
	clientToken := must(adminAddr, "client", "create", "--access", "read-only", "-f", "token")
	secret, err := os.ReadFile(filepath.Join(dir, oauthSecretName))
	if err != nil {
		t.Fatalf("OAuth secret in the state directory: %v", err)
	}
	for _, name := range []string{stateFileName, oauthSecretName} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: %v, %v", name, fi.Mode(), err)
		}
	}

	// A second server on the same directory is refused, saying why.
	code, _, stderr := runCLI(ctx, map[string]string{}, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--admin-token-file", filepath.Join(t.TempDir(), "token"), "--no-demo", "--state-dir", dir)
	if code != 1 || !strings.Contains(stderr, "another runtime serves this state directory") || !strings.Contains(stderr, filepath.Join(dir, stateFileName)) {
		t.Errorf("second server on %s: exit %d, stderr %s", dir, code, stderr)
	}

	// A backup while it serves.
	backup := filepath.Join(t.TempDir(), "backup.db")
	var got struct {
		File    string `json:"file"`
		Bytes   int64  `json:"bytes"`
		Threads int    `json:"threads"`
	}
	if err := json.Unmarshal([]byte(must(adminAddr, "backup", backup)), &got); err != nil || got.Threads != 1 || got.Bytes == 0 || got.File != backup {
		t.Errorf("backup answered %+v, %v", got, err)
	}
	if fi, err := os.Stat(backup); err != nil || fi.Size() != got.Bytes || fi.Mode().Perm() != 0o600 {
		t.Errorf("backup file: %v %v", fi, err)
	}
	if code := stop(); code != 0 {
		t.Fatalf("first server exited %d", code)
	}

	mcpAddr, adminAddr, _, stop = start(dir)
	var thread struct {
		Status   string `json:"status"`
		Instance string `json:"instance"`
		Run      *struct{ ID string }
		Messages []struct{ Text string }
	}
	if err := json.Unmarshal([]byte(must(adminAddr, "thread", "get", "t1")), &thread); err != nil {
		t.Fatal(err)
	}
	if thread.Status != "active" || thread.Instance != "A" || thread.Run != nil || len(thread.Messages) != 1 || thread.Messages[0].Text != "before the restart" {
		t.Errorf("thread after the restart: %+v", thread)
	}
	if again, err := os.ReadFile(filepath.Join(dir, oauthSecretName)); err != nil || string(again) != string(secret) {
		t.Errorf("OAuth secret changed across the restart: %v", err)
	}
	old := newMCPClient(t, "http://"+mcpAddr+"/mcp", auth)
	if status, _ := old.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"e2e","version":"1"}}}`); status != http.StatusUnauthorized {
		t.Errorf("the provider credential of before the restart: %d, want 401", status)
	}
	cl := newMCPClient(t, "http://"+mcpAddr+"/mcp", "Bearer "+clientToken)
	cl.initialize()
	// The instance is registered again: a new session on it works.
	must(adminAddr, "provider-session", "open", "t1", "A")
	if code := stop(); code != 0 {
		t.Fatalf("restarted server exited %d", code)
	}

	// The backup is a state directory's file of its own.
	restored := t.TempDir()
	if err := os.Rename(backup, filepath.Join(restored, stateFileName)); err != nil {
		t.Fatal(err)
	}
	_, adminAddr, _, _ = start(restored)
	if err := json.Unmarshal([]byte(must(adminAddr, "thread", "get", "t1")), &thread); err != nil || len(thread.Messages) != 1 {
		t.Errorf("thread on the backup: %+v %v", thread, err)
	}

	_, memAdmin, _, _ := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--no-demo", "--memory")
	if code, _, stderr := admin(memAdmin, "backup", filepath.Join(t.TempDir(), "none.db")); code != 1 || !strings.Contains(stderr, "not_durable") {
		t.Errorf("backup of a server in memory: exit %d, stderr %s", code, stderr)
	}
}

// make run twice on one state directory: the demo thread is reused, its
// run started again, and a new demo credential written.
func TestServeDemoRestarts(t *testing.T) {
	dir := t.TempDir()
	tokenFile := filepath.Join(t.TempDir(), "admin-token")
	var auths []string
	for range 2 {
		mcpAddr, _, _, stop := startServe(t, map[string]string{}, "--admin-token-file", tokenFile, "--demo", "--state-dir", dir)
		auth, err := os.ReadFile(filepath.Join(filepath.Dir(tokenFile), demoCredentialName))
		if err != nil {
			t.Fatal(err)
		}
		auths = append(auths, strings.TrimSpace(string(auth)))
		c := newMCPClient(t, "http://"+mcpAddr+"/mcp", auths[len(auths)-1])
		c.initialize()
		if status, body := c.post(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"thread_post","arguments":{"text":"hi"}}}`); status != 200 || strings.Contains(body, `"isError":true`) {
			t.Fatalf("thread_post with the demo credential: %d %s", status, body)
		}
		if code := stop(); code != 0 {
			t.Fatalf("demo server exited %d", code)
		}
	}
	if auths[0] == auths[1] {
		t.Error("the second start handed out the first one's credential")
	}
}

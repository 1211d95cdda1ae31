package main

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
)

// writeFile writes a config file in a test directory and returns its path.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "runtime.toml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parsed parses args and env (and the config file they name) without
// running anything.
func parsed(t *testing.T, args []string, env map[string]string) *cli {
	t.Helper()
	var c cli
	var stderr strings.Builder
	_, code, err := parse(&c, args, env, io.Discard, &stderr)
	if err != nil || code >= 0 {
		t.Fatalf("parse %q with env %v: code %d, err %v, stderr %s", args, env, code, err, stderr.String())
	}
	return &c
}

func TestPrecedence(t *testing.T) {
	file := writeFile(t, `
listen = "127.0.0.3:1003"
credential-window = "3h"
demo = true
log-format = "json"
allowed-hosts = ["file.example"]
max-sessions = 3
body-limit = "3KiB"
body-timeout = "3s"
requests-per-namespace = 3
body-bytes-in-flight = "3MiB"
admin-url = "http://127.0.0.3:3"
`)
	const (
		viaFlag = iota
		viaEnv
		viaFile
		viaDefault
	)
	settings := []struct {
		name   string
		flag   []string // the setting given as a flag (value 1)
		env    [2]string
		get    func(*cli) any
		values [4]any // as flag, env, file, default
	}{
		{"listen", []string{"--listen", "127.0.0.1:1001"}, [2]string{"RUNTIME_LISTEN", "127.0.0.2:1002"},
			func(c *cli) any { return c.Serve.Listen }, [4]any{"127.0.0.1:1001", "127.0.0.2:1002", "127.0.0.3:1003", "127.0.0.1:7331"}},
		{"credential-window", []string{"--credential-window", "1h"}, [2]string{"RUNTIME_CREDENTIAL_WINDOW", "2h"},
			func(c *cli) any { return time.Duration(c.Serve.CredentialWindow) }, [4]any{time.Hour, 2 * time.Hour, 3 * time.Hour, 24 * time.Hour}},
		{"demo", []string{"--demo"}, [2]string{"RUNTIME_DEMO", "false"},
			func(c *cli) any { return c.Serve.Demo }, [4]any{true, false, true, false}},
		{"log-format", []string{"--log-format", "text"}, [2]string{"RUNTIME_LOG_FORMAT", "text"},
			func(c *cli) any { return c.LogFormat }, [4]any{"text", "text", "json", "text"}},
		{"allowed-hosts", []string{"--allowed-hosts", "flag.example,flag2.example"}, [2]string{"RUNTIME_ALLOWED_HOSTS", "env.example"},
			func(c *cli) any { return c.Serve.AllowedHosts }, [4]any{[]string{"flag.example", "flag2.example"}, []string{"env.example"}, []string{"file.example"}, []string(nil)}},
		{"max-sessions", []string{"--max-sessions", "1"}, [2]string{"RUNTIME_MAX_SESSIONS", "2"},
			func(c *cli) any { return c.Serve.MaxSessions }, [4]any{1, 2, 3, 100000}},
		{"body-limit", []string{"--body-limit", "1"}, [2]string{"RUNTIME_BODY_LIMIT", "2MiB"},
			func(c *cli) any { return int64(c.Serve.BodyLimit) }, [4]any{int64(1), int64(2 << 20), int64(3 << 10), int64(4 << 20)}},
		{"body-timeout", []string{"--body-timeout", "1s"}, [2]string{"RUNTIME_BODY_TIMEOUT", "2s"},
			func(c *cli) any { return time.Duration(c.Serve.BodyTimeout) }, [4]any{time.Second, 2 * time.Second, 3 * time.Second, 30 * time.Second}},
		{"requests-per-namespace", []string{"--requests-per-namespace", "1"}, [2]string{"RUNTIME_REQUESTS_PER_NAMESPACE", "2"},
			func(c *cli) any { return c.Serve.RequestsPerNamespace }, [4]any{1, 2, 3, 256}},
		{"body-bytes-in-flight", []string{"--body-bytes-in-flight", "1MiB"}, [2]string{"RUNTIME_BODY_BYTES_IN_FLIGHT", "2MiB"},
			func(c *cli) any { return int64(c.Serve.BodyBytesInFlight) }, [4]any{int64(1 << 20), int64(2 << 20), int64(3 << 20), int64(64 << 20)}},
	}
	for _, s := range settings {
		for _, tc := range []struct {
			name                string
			flag, env, file     bool
			want                int
			command             []string
			configInEnvNotFlags bool
		}{
			{name: "flag beats env and file", flag: true, env: true, file: true, want: viaFlag},
			{name: "flag beats default", flag: true, want: viaFlag},
			{name: "env beats file", env: true, file: true, want: viaEnv},
			{name: "env beats default", env: true, want: viaEnv},
			{name: "file beats default", file: true, want: viaFile},
			{name: "file named by RUNTIME_CONFIG", file: true, configInEnvNotFlags: true, want: viaFile},
			{name: "default", want: viaDefault},
			{name: "explicit serve command", flag: true, env: true, file: true, want: viaFlag, command: []string{"serve"}},
		} {
			t.Run(s.name+"/"+tc.name, func(t *testing.T) {
				args := slices.Clone(tc.command)
				env := map[string]string{}
				if tc.flag {
					args = append(args, s.flag...)
				}
				if tc.env {
					env[s.env[0]] = s.env[1]
				}
				if tc.file {
					if tc.configInEnvNotFlags {
						env["RUNTIME_CONFIG"] = file
					} else {
						args = append(args, "--config", file)
					}
				}
				got := s.get(parsed(t, args, env))
				if !reflect.DeepEqual(got, s.values[tc.want]) {
					t.Errorf("args %q env %v: got %#v, want %#v", args, env, got, s.values[tc.want])
				}
			})
		}
	}

	// The admin CLI's settings follow the same rule.
	c := parsed(t, []string{"admin", "--config", file, "mcp-sessions"}, nil)
	if c.Admin.AdminURL != "http://127.0.0.3:3" {
		t.Errorf("admin-url from the file: %q", c.Admin.AdminURL)
	}
	c = parsed(t, []string{"admin", "--config", file, "mcp-sessions"}, map[string]string{"RUNTIME_ADMIN_URL": "http://127.0.0.2:2"})
	if c.Admin.AdminURL != "http://127.0.0.2:2" {
		t.Errorf("admin-url from the env: %q", c.Admin.AdminURL)
	}
	c = parsed(t, []string{"admin", "--config", file, "--admin-url", "http://127.0.0.1:1", "mcp-sessions"}, map[string]string{"RUNTIME_ADMIN_URL": "http://127.0.0.2:2"})
	if c.Admin.AdminURL != "http://127.0.0.1:1" {
		t.Errorf("admin-url from the flag: %q", c.Admin.AdminURL)
	}
}

func TestDefaults(t *testing.T) {
	c := parsed(t, nil, map[string]string{"HOME": "/home/u"})
	s := c.Serve
	want := serveCmd{
		Listen: "127.0.0.1:7331", MCPPath: "/mcp", AdminListen: "127.0.0.1:7332",
		AdminTokenFile:   "/home/u/.cache/mcpruntime/admin-token",
		StateDir:         "/home/u/.local/state/mcpruntime",
		CredentialWindow: duration(24 * time.Hour), ClientTokenTTL: duration(24 * time.Hour),
		BodyLimit: 4 << 20, IdleTimeout: duration(30 * time.Minute), ProviderIdle: duration(30 * time.Minute), ProviderOpenTimeout: duration(90 * time.Second), SessionsPerNamespace: 64,
		MaxSessions: 100000, KeepAlive: duration(25 * time.Second), AskTimeout: duration(time.Minute), ShutdownGrace: duration(10 * time.Second), Demo: false,
		HeaderTimeout: duration(10 * time.Second), BodyTimeout: duration(30 * time.Second), RequestsPerNamespace: 256,
		MaxRequests: 4096, BodyBytesInFlight: 64 << 20,
		MaxThreads: 10000, ListPageSize: 100,
		MaxConnections: 16384, MaxConnectionsPerSource: 1024, AdminMaxConnections: 64, AdminMaxConnectionsPerSource: 16,
		ReplayEvents: 256, ReplayBytes: 1 << 20, MaxSubscriptions: 256,
		oauthFlags:                 oauthFlags{OAuth: true, PairingCodeTTL: duration(5 * time.Minute), RefreshTokenTTL: duration(720 * time.Hour)},
		ModernRequestsPerNamespace: 64, ListenPerNamespace: 8, MaxListen: 10000, RequestStateTTL: duration(5 * time.Minute),
		clusterFlags: clusterFlags{InternalListen: "127.0.0.1:7441", Fence: duration(500 * time.Millisecond)},
	}
	if !reflect.DeepEqual(s, want) {
		t.Errorf("defaults:\n got %+v\nwant %+v", s, want)
	}
	if c.LogFormat != "text" || c.LogLevel != "info" {
		t.Errorf("log defaults: %q %q", c.LogFormat, c.LogLevel)
	}
	if err := s.validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	if c.Admin.AdminURL != "http://127.0.0.1:7332" || c.Admin.AdminTokenFile != s.AdminTokenFile {
		t.Errorf("admin defaults: %q %q", c.Admin.AdminURL, c.Admin.AdminTokenFile)
	}
	c = parsed(t, []string{"--credential-window", "never", "--idle-timeout", "never"}, map[string]string{"XDG_RUNTIME_DIR": "/run/user/1"})
	if c.Serve.CredentialWindow != never || runtimeDuration(c.Serve.IdleTimeout) >= 0 {
		t.Errorf("never: %v %v", c.Serve.CredentialWindow, c.Serve.IdleTimeout)
	}
	if c.Serve.AdminTokenFile != "/run/user/1/mcpruntime/admin-token" {
		t.Errorf("token file under XDG_RUNTIME_DIR: %q", c.Serve.AdminTokenFile)
	}
}

func TestInvalidConfigExits2(t *testing.T) {
	unknownKey := writeFile(t, "listen = \"127.0.0.1:0\"\nlisten-adress = \"x\"\n")
	table := writeFile(t, "[server]\nlisten = \"127.0.0.1:0\"\n")
	badToml := writeFile(t, "listen = \n")
	badFileDuration := writeFile(t, "idle-timeout = \"soon\"\n")
	badFileFormat := writeFile(t, "log-format = \"xml\"\n")
	badFileType := writeFile(t, "demo = \"yes\"\n")
	badFileInt := writeFile(t, "max-sessions = \"10\"\n")
	configKey := writeFile(t, "config = \"other.toml\"\n")
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want string // in stderr
	}{
		{"bad duration flag", []string{"--credential-window", "forever"}, nil, `invalid duration "forever"`},
		{"bad duration env", nil, map[string]string{"RUNTIME_KEEP_ALIVE": "5 parsecs"}, `RUNTIME_KEEP_ALIVE="5 parsecs"`},
		{"bad duration file", []string{"--config", badFileDuration}, nil, `key "idle-timeout" = "soon"`},
		{"negative duration", []string{"--shutdown-grace=-1s"}, nil, "--shutdown-grace -1s: want a positive duration"},
		{"never where not allowed", []string{"--keep-alive", "never"}, nil, "--keep-alive: never is not allowed"},
		{"empty list page", nil, map[string]string{"RUNTIME_LIST_PAGE_SIZE": "0"}, "--list-page-size 0: want at least 1"},
		{"unknown key in file", []string{"--config", unknownKey}, nil, `unknown key "listen-adress"`},
		{"table in file", []string{"--config", table}, nil, `unknown key "server"`},
		{"config key in file", []string{"--config", configKey}, nil, `unknown key "config"`},
		{"malformed file", []string{"--config", badToml}, nil, "runtime.toml"},
		{"missing file", []string{"--config", "/nonexistent/runtime.toml"}, nil, "/nonexistent/runtime.toml"},
		{"missing file from env", nil, map[string]string{"RUNTIME_CONFIG": "/nonexistent/env.toml"}, "/nonexistent/env.toml"},
		{"bad log format flag", []string{"--log-format", "xml"}, nil, "--log-format"},
		{"bad log format env", nil, map[string]string{"RUNTIME_LOG_FORMAT": "xml"}, "--log-format"},
		{"bad log format file", []string{"--config", badFileFormat}, nil, "--log-format"},
		{"bad log level", []string{"--log-level", "loud"}, nil, "--log-level"},
		{"string for a bool in file", []string{"--config", badFileType}, nil, `key "demo": want a boolean, got string "yes"`},
		{"string for an int in file", []string{"--config", badFileInt}, nil, `key "max-sessions": want an integer`},
		{"bad bool env", nil, map[string]string{"RUNTIME_DEMO": "sometimes"}, `RUNTIME_DEMO="sometimes"`},
		{"address without port", []string{"--listen", "localhost"}, nil, `--listen "localhost"`},
		{"port out of range", []string{"--admin-listen", "127.0.0.1:99999"}, nil, `--admin-listen "127.0.0.1:99999"`},
		{"port not a number", nil, map[string]string{"RUNTIME_LISTEN": "127.0.0.1:http"}, `--listen "127.0.0.1:http"`},
		{"same addresses", []string{"--listen", "127.0.0.1:7000", "--admin-listen", "127.0.0.1:7000"}, nil, "must differ"},
		{"bad mcp path", []string{"--mcp-path", "mcp"}, nil, "--mcp-path"},
		{"bad endpoint", []string{"--endpoint", "ftp://x"}, nil, "--endpoint"},
		{"bad int", []string{"--max-sessions", "lots"}, nil, "--max-sessions"},
		{"zero sessions", nil, map[string]string{"RUNTIME_SESSIONS_PER_NAMESPACE": "0"}, "--sessions-per-namespace 0"},
		{"bad size", []string{"--body-limit", "4 megs"}, nil, "--body-limit"},
		{"body budget under the body limit", []string{"--body-limit", "2MiB", "--body-bytes-in-flight", "1MiB"}, nil, "--body-bytes-in-flight 1048576: want at least --body-limit"},
		{"zero requests", []string{"--max-requests", "0"}, nil, "--max-requests 0"},
		{"zero connections", []string{"--max-connections", "0"}, nil, "--max-connections 0: want at least 1"},
		{"zero connections per source", nil, map[string]string{"RUNTIME_MAX_CONNECTIONS_PER_SOURCE": "0"}, "--max-connections-per-source 0: want at least 1"},
		{"zero admin connections", []string{"--admin-max-connections", "0"}, nil, "--admin-max-connections 0: want at least 1"},
		{"negative admin connections per source", []string{"--admin-max-connections-per-source=-1"}, nil, "--admin-max-connections-per-source -1: want at least 1"},
		{"negative header timeout", []string{"--header-timeout=-1s"}, nil, "--header-timeout -1s: want a positive duration"},
		{"unknown flag", []string{"--lisen", "127.0.0.1:0"}, nil, "unknown flag --lisen"},
		{"unknown command", []string{"admin", "thread", "frobnicate"}, nil, "unexpected argument frobnicate"},
		{"missing argument", []string{"admin", "provider-session", "open", "t1"}, nil, "<instance>"},
		{"bad admin url", []string{"admin", "--admin-url", "127.0.0.1:7332", "mcp-sessions"}, map[string]string{"RUNTIME_ADMIN_TOKEN": "x"}, "--admin-url"},
		{"bad access", []string{"admin", "client", "create", "--access", "root"}, nil, "--access"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a run that gets past validation must not serve
			code, stdout, stderr := runCLI(ctx, tc.env, tc.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stdout %q stderr %q", code, stdout, stderr)
			}
			if !strings.Contains(stderr, tc.want) {
				t.Errorf("stderr %q does not contain %q", stderr, tc.want)
			}
			if !strings.HasPrefix(stderr, "runtime: ") {
				t.Errorf("stderr %q: want one clear line starting runtime: ", stderr)
			}
		})
	}
}

func TestHelpEverywhere(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"-h"}, {"serve", "--help"}, {"admin", "--help"}, {"admin", "thread", "--help"},
		{"admin", "thread", "create", "--help"}, {"admin", "provider-session", "open", "--help"}, {"admin", "client", "create", "--help"},
		{"admin", "session", "open", "--help"}, // the old name still answers

	} {
		code, stdout, stderr := runCLI(context.Background(), nil, args...)
		if code != 0 || !strings.Contains(stdout, "Usage: runtime") || stderr != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
		}
	}
	_, stdout, _ := runCLI(context.Background(), nil, "serve", "--help")
	for _, want := range []string{"--listen=HOST:PORT", "$RUNTIME_LISTEN", "file key listen", "default 127.0.0.1:7331", "--[no-]demo"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("serve --help lacks %q", want)
		}
	}
}

// TestAdminHelpNamesTheSessions: the admin commands say which session they
// mean — "mcp-sessions", "provider-session" — and the hidden aliases of
// the old names ("sessions", "session") are not offered.
func TestAdminHelpNamesTheSessions(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"admin", "--help"}} {
		_, stdout, _ := runCLI(context.Background(), nil, args...)
		for _, want := range []string{"admin provider-session open", "admin provider-session release", "admin mcp-sessions"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("%q lacks %q", args, want)
			}
		}
		for _, old := range []string{"admin session open", "admin session release", "admin sessions "} {
			if strings.Contains(stdout, old) {
				t.Errorf("%q offers the old name %q", args, old)
			}
		}
	}
}

// TestTopLevelHelpListsEverySetting: `runtime --help` lists every setting
// with its environment variable, as the README says, not only `serve
// --help`.
func TestTopLevelHelpListsEverySetting(t *testing.T) {
	code, stdout, _ := runCLI(context.Background(), nil, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	var c cli
	parser, err := kong.New(&c, kong.Vars{"default_token_file": "x", "default_state_dir": "y"})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = kong.Visit(parser.Model.Node, func(node kong.Visitable, next kong.Next) error {
		if f, ok := node.(*kong.Flag); ok && isSetting(f) {
			n++
			flag := "--" + f.Name
			if f.Tag.Negatable != "" {
				flag = "--[no-]" + f.Name
			}
			if !strings.Contains(stdout, flag) || !strings.Contains(stdout, "$"+envName(f.Name)) {
				t.Errorf("runtime --help does not list --%s with $%s", f.Name, envName(f.Name))
			}
		}
		return next(nil)
	})
	if err != nil || n < 20 {
		t.Fatalf("visited %d settings (%v)", n, err)
	}
}

// TestREADMEListsEveryMakeTarget keeps the README's Development table in
// step with the Makefile's documented targets.
func TestREADMEListsEveryMakeTarget(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	targets := regexp.MustCompile(`(?m)^([a-z-]+):.*## `).FindAllStringSubmatch(string(mk), -1)
	if len(targets) < 10 {
		t.Fatalf("found %d targets in the Makefile", len(targets))
	}
	for _, m := range targets {
		row := "| `make " + m[1] + "` |"
		if m[1] == "help" {
			row = "| `make` |"
		}
		if !strings.Contains(string(readme), row) {
			t.Errorf("README's make table has no row %s", row)
		}
	}
}

// TestREADMECreatesEachInstanceOnce: the command blocks of the README,
// docs/server.md and docs/providers.md, run in order against one server,
// never create an instance id twice: a section that re-created an earlier
// one's instance would get 409 and go on with the wrong one.
func TestREADMECreatesEachInstanceOnce(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, page := range []string{"../../docs/server.md", "../../docs/providers.md"} {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		readme = append(readme, text...)
	}
	created := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^bin/runtime admin instance create ([A-Za-z0-9._:@-]+)`).FindAllStringSubmatch(string(readme), -1) {
		created[m[1]]++
	}
	if len(created) < 2 {
		t.Fatalf("found instance creations %v, want the quick start's and the exec section's", created)
	}
	for id, n := range created {
		if n > 1 {
			t.Errorf("the README creates instance %s %d times", id, n)
		}
	}
}

// TestREADMEDocumentsEverySetting keeps docs/configuration.md's tables
// in step with the flags: every setting appears with its flag, env and key.
func TestREADMEDocumentsEverySetting(t *testing.T) {
	doc, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(doc)
	var c cli
	parser, err := kong.New(&c, kong.Vars{"default_token_file": "x", "default_state_dir": "y"})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	err = kong.Visit(parser.Model.Node, func(node kong.Visitable, next kong.Next) error {
		f, ok := node.(*kong.Flag)
		if !ok || !isSetting(f) || seen[f.Name] {
			return next(nil)
		}
		seen[f.Name] = true
		row := regexp.MustCompile("(?m)^\\|[^\n]*`--" + regexp.QuoteMeta(f.Name) + "`[^\n]*$").FindString(section)
		if row == "" {
			t.Errorf("README Configuration table has no row for --%s", f.Name)
			return next(nil)
		}
		if !strings.Contains(row, "`"+envName(f.Name)+"`") {
			t.Errorf("README row of --%s lacks `%s`", f.Name, envName(f.Name))
		}
		if fileKey(f) && !strings.Contains(row, "`"+f.Name+"`") {
			t.Errorf("README row of --%s lacks file key `%s`", f.Name, f.Name)
		}
		return next(nil)
	})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(section, "`RUNTIME_ADMIN_TOKEN`") {
		t.Error("README Configuration lacks RUNTIME_ADMIN_TOKEN")
	}
}

func TestHealth(t *testing.T) {
	var h health
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.healthz)
	mux.HandleFunc("GET /readyz", h.readyz)
	get := func(path string) (int, string) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code, strings.TrimSpace(rec.Body.String())
	}
	for _, step := range []struct {
		state  int32
		status int
		body   string
	}{
		{stateStarting, 503, `{"status":"starting"}`},
		{stateReady, 200, `{"status":"ready"}`},
		{stateShuttingDown, 503, `{"status":"shutting down"}`},
	} {
		h.state.Store(step.state)
		if code, body := get("/readyz"); code != step.status || body != step.body {
			t.Errorf("state %d: readyz %d %s, want %d %s", step.state, code, body, step.status, step.body)
		}
		if code, body := get("/healthz"); code != 200 || body != `{"status":"ok"}` {
			t.Errorf("state %d: healthz %d %s", step.state, code, body)
		}
	}
	// A node of several is ready only while it serves (Runtime.Node).
	serving := false
	h.serving = func() bool { return serving }
	for _, step := range []struct {
		state   int32
		serving bool
		status  int
		body    string
	}{
		{stateReady, false, 503, `{"status":"not serving"}`},
		{stateReady, true, 200, `{"status":"ready"}`},
		{stateStarting, true, 503, `{"status":"starting"}`},
		{stateShuttingDown, true, 503, `{"status":"shutting down"}`},
	} {
		h.state.Store(step.state)
		serving = step.serving
		if code, body := get("/readyz"); code != step.status || body != step.body {
			t.Errorf("state %d, serving %v: readyz %d %s, want %d %s", step.state, step.serving, code, body, step.status, step.body)
		}
	}
}

func TestSecretFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "admin-token")
	if err := writeSecretFile(path, "one"); err != nil {
		t.Fatal(err)
	}
	if err := writeSecretFile(path, "two"); err != nil { // replaces
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if di, _ := os.Stat(filepath.Dir(path)); di.Mode().Perm() != 0o700 {
		t.Errorf("dir mode %v, want 0700", di.Mode().Perm())
	}
	removeSecretFile(path, "one") // not ours any more: kept
	if _, err := os.Stat(path); err != nil {
		t.Errorf("removed a file holding another token: %v", err)
	}
	removeSecretFile(path, "two")
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("file left behind: %v", err)
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 0 {
		t.Errorf("temporary files left: %v", entries)
	}
}

func TestAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:1": true, "localhost:1": true, "[::1]:1": true, "127.9.9.9:1": true,
		"0.0.0.0:1": false, ":1": false, "192.0.2.1:1": false, "example.com:1": false,
	} {
		if got := loopback(addr); got != want {
			t.Errorf("loopback(%q) = %v", addr, got)
		}
	}
	if got := ownHosts("192.0.2.1:7331"); !reflect.DeepEqual(got, []string{"192.0.2.1"}) {
		t.Errorf("ownHosts of an IP: %v", got)
	}
	if got := ownHosts("[2001:db8::1]:7331"); !reflect.DeepEqual(got, []string{"2001:db8::1"}) {
		t.Errorf("ownHosts of an IPv6: %v", got)
	}
	if got := ownHosts("rt.example:7331"); !reflect.DeepEqual(got, []string{"rt.example"}) {
		t.Errorf("ownHosts of a name: %v", got)
	}
	for _, tc := range []struct{ configured, bound, want string }{
		{"0.0.0.0:0", "[::]:41000", "127.0.0.1:41000"},
		{":7331", "[::]:7331", "127.0.0.1:7331"},
		{"[::]:7331", "[::]:7331", "[::1]:7331"},
		{"192.0.2.1:1", "192.0.2.1:1", "192.0.2.1:1"},
		{"localhost:0", "127.0.0.1:42000", "localhost:42000"},
	} {
		if got := urlHost(tc.configured, tc.bound); got != tc.want {
			t.Errorf("urlHost(%q, %q) = %q, want %q", tc.configured, tc.bound, got, tc.want)
		}
	}
}

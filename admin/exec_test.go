package admin_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// execConfig returns an exec instance config running script with /bin/sh.
func execConfig(t *testing.T, dir, script string) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{
		"command": "/bin/sh", "args": []string{"-c", script},
		"configDir": dir, "grace": "1s", "startupWait": "100ms",
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestExecDriver registers exec instances through the admin API: a bad
// config is 400 invalid_driver_config and registers nothing; a command that
// exits at once is 502 provider_open_failed on open and leaves no
// credential; a working one opens, and its release stops the process and
// removes its MCP config file.
func TestExecDriver(t *testing.T) {
	e := newEnv(t, envOptions{})
	dir := t.TempDir()
	instance := func(id, config string) request {
		return post("/admin/v1/instances", `{"id":"`+id+`","driver":"exec","config":`+config+`}`)
	}
	e.walk([]step{
		{name: "no command", request: instance("x", `{}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_driver_config"},
		{name: "command not found", request: instance("x", `{"command":"/nonexistent/agent"}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_driver_config"},
		{name: "unknown field", request: instance("x", `{"command":"/bin/sh","argz":[]}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_driver_config"},
		{name: "reserved env", request: instance("x", `{"command":"/bin/sh","env":{"MCPRUNTIME_AUTHORIZATION":"x"}}`),
			wantStatus: http.StatusBadRequest, wantCode: "invalid_driver_config"},
		{name: "nothing was registered", request: post("/admin/v1/threads", `{"id":"t0","instance":"x"}`),
			wantStatus: http.StatusNotFound, wantCode: "unknown_instance"},
		{name: "register quitter", request: instance("quitter", execConfig(t, dir, "echo no-mcp-for-me >&2; exit 3")),
			wantStatus: http.StatusCreated},
		{name: "register sleeper", request: instance("sleeper", execConfig(t, dir, `test -r "$MCPRUNTIME_MCP_CONFIG" && exec sleep 60`)),
			wantStatus: http.StatusCreated},
		{name: "create t1", request: post("/admin/v1/threads", `{"id":"t1"}`), wantStatus: http.StatusCreated},
		{name: "open quitter", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"quitter"}`),
			wantStatus: http.StatusBadGateway, wantCode: "provider_open_failed"},
		{name: "thread keeps no instance", request: get("/admin/v1/threads/t1"), wantStatus: http.StatusOK,
			check: func(t *testing.T, _ *env, r *response) { wantEqual(t, "instance", field(t, r, "instance"), "") }},
		{name: "open sleeper", request: post("/admin/v1/threads/t1/provider-sessions", `{"instance":"sleeper"}`),
			wantStatus: http.StatusCreated, check: func(t *testing.T, e *env, r *response) {
				e.vars["ps"] = field(t, r, "providerSessionId")
				e.mint("sleeper", strings.TrimPrefix(field(t, r, "authorization"), "Bearer "))
				if files, _ := filepath.Glob(filepath.Join(dir, "mcp-*.json")); len(files) != 1 {
					t.Errorf("MCP config files %v, want one", files)
				}
			}},
		{name: "release sleeper", request: del("/admin/v1/provider-sessions/{ps}"), wantStatus: http.StatusOK,
			check: checks(wantGone("providerSessionId", "ps", "released"), authenticates(nil, []string{"sleeper"}))},
	})
	// Release answers once the process is gone; the file goes with it.
	if files, _ := filepath.Glob(filepath.Join(dir, "mcp-*.json")); len(files) != 0 {
		t.Errorf("after release, MCP config files %v, want none", files)
	}
	deadline := time.Now().Add(time.Minute) // detects a hang only
	for !strings.Contains(e.logs.String(), "no-mcp-for-me") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(e.logs.String(), "no-mcp-for-me") {
		t.Errorf("the quitter's stderr was not logged")
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("config dir holds %v (%v), want nothing", entries, err)
	}
	e.checkNoLeaks()
}

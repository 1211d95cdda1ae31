package execdriver_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/execdriver"
)

// TestParseConfigRefuses: every malformed or unsafe configuration is
// refused with an error that names what is wrong.
func TestParseConfigRefuses(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "plain")
	if err := os.WriteFile(file, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	for _, tc := range []struct {
		name, raw, want string
	}{
		{"empty", ``, `"command" is required`},
		{"blank", " \n\t ", `"command" is required`},
		{"null", `null`, `"command" is required`},
		{"no command", `{}`, `"command" is required`},
		{"empty command", `{"command":""}`, `"command" is required`},
		{"blank command", `{"command":"  \t"}`, `"command" is required`},
		{"not an object", `["sh"]`, `exec config`},
		{"wrong type", `{"command":"sh","args":"-c"}`, `exec config`},
		{"unknown field", `{"command":"sh","comand":"sh"}`, `unknown field "comand"`},
		{"unknown field env typo", `{"command":"sh","environment":{}}`, `unknown field "environment"`},
		{"trailing object", `{"command":"sh"} {}`, `trailing data`},
		{"trailing garbage", `{"command":"sh"} x`, `exec config`},
		{"trailing brace", `{"command":"sh"}}`, `trailing data`},
		{"trailing bracket", `{"command":"sh"}]`, `trailing data`},
		{"command not found", `{"command":"no-such-command-execdriver-test"}`, `no-such-command-execdriver-test`},
		{"command missing path", `{"command":"` + missing + `"}`, missing},
		{"command is a directory", `{"command":"` + dir + `"}`, dir},
		{"command not executable", `{"command":"` + file + `"}`, file},
		{"env MCPRUNTIME_", `{"command":"sh","env":{"MCPRUNTIME_AUTHORIZATION":"Bearer x"}}`, `reserved`},
		{"env MCPRUNTIME_ other", `{"command":"sh","env":{"MCPRUNTIME_EXTRA":"1"}}`, `MCPRUNTIME_EXTRA`},
		{"env RUNTIME_", `{"command":"sh","env":{"RUNTIME_ADMIN_TOKEN":"x"}}`, `reserved`},
		{"env empty name", `{"command":"sh","env":{"":"x"}}`, `invalid variable name`},
		{"env name with =", `{"command":"sh","env":{"A=B":"x"}}`, `invalid variable name`},
		{"env name with NUL", `{"command":"sh","env":{"A\u0000B":"x"}}`, `invalid variable name`},
		{"env NUL in value", `{"command":"sh","env":{"A":"x\u0000y"}}`, `NUL`},
		{"inheritEnv MCPRUNTIME_", `{"command":"sh","inheritEnv":["PATH","MCPRUNTIME_AUTHORIZATION"]}`, `reserved`},
		{"inheritEnv RUNTIME_", `{"command":"sh","inheritEnv":["RUNTIME_ADMIN_TOKEN"]}`, `reserved`},
		{"inheritEnv empty name", `{"command":"sh","inheritEnv":[""]}`, `invalid variable name`},
		{"negative grace", `{"command":"sh","grace":"-1s"}`, `grace must not be negative`},
		{"negative startupWait", `{"command":"sh","startupWait":"-5ms"}`, `startupWait must not be negative`},
		{"grace not a string", `{"command":"sh","grace":5}`, `duration must be a string`},
		{"grace not a duration", `{"command":"sh","grace":"5 seconds"}`, `exec config`},
		{"startupWait not a duration", `{"command":"sh","startupWait":"soon"}`, `exec config`},
		{"dir missing", `{"command":"sh","dir":"` + missing + `"}`, `dir`},
		{"dir is a file", `{"command":"sh","dir":"` + file + `"}`, `not a directory`},
		{"configDir missing", `{"command":"sh","configDir":"` + missing + `"}`, `configDir`},
		{"configDir is a file", `{"command":"sh","configDir":"` + file + `"}`, `not a directory`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, path, err := execdriver.ParseConfig(json.RawMessage(tc.raw))
			if err == nil {
				t.Fatalf("ParseConfig(%s) = %q, nil; want an error mentioning %q", tc.raw, path, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("ParseConfig(%s) = %v; want it to mention %q", tc.raw, err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "exec config") {
				t.Errorf("ParseConfig(%s) = %v; want it to start with \"exec config\"", tc.raw, err)
			}
			// The Factory refuses the same configuration.
			if d, ferr := execdriver.Factory(nil)("i", json.RawMessage(tc.raw)); ferr == nil {
				t.Errorf("Factory(%s) = %v, nil; want an error", tc.raw, d)
			}
		})
	}
}

// TestParseConfigDefaults: fields left out get their documented defaults
// and the command is resolved through PATH.
func TestParseConfigDefaults(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	cfg, path, err := execdriver.ParseConfig(json.RawMessage(`{"command":"sh"}`))
	if err != nil {
		t.Fatal(err)
	}
	if path != sh {
		t.Errorf("resolved command = %q, want %q", path, sh)
	}
	want := execdriver.Config{
		Command:     "sh",
		InheritEnv:  []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM"},
		ServerName:  "mcpruntime",
		ConfigDir:   os.TempDir(),
		Grace:       execdriver.Duration(5 * time.Second),
		StartupWait: execdriver.Duration(300 * time.Millisecond),
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
	if execdriver.DefaultGrace != 5*time.Second || execdriver.DefaultStartupWait != 300*time.Millisecond || execdriver.DefaultServerName != "mcpruntime" {
		t.Errorf("documented defaults changed: %v %v %q", execdriver.DefaultGrace, execdriver.DefaultStartupWait, execdriver.DefaultServerName)
	}
}

// TestParseConfigKeeps: every field given is kept as given; an empty
// inheritEnv means "inherit nothing", not the default list.
func TestParseConfigKeeps(t *testing.T) {
	dir, configDir := t.TempDir(), t.TempDir()
	agent := script(t, "exit 0")
	raw, err := json.Marshal(map[string]any{
		"command":     agent,
		"args":        []string{"mcp", "--config", "{mcpConfig}"},
		"dir":         dir,
		"env":         map[string]string{"OPENAI_API_KEY": "k", "EMPTY": ""},
		"inheritEnv":  []string{"PATH"},
		"serverName":  "host",
		"configDir":   configDir,
		"grace":       "250ms",
		"startupWait": "1.5s",
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg, path, err := execdriver.ParseConfig(raw)
	if err != nil {
		t.Fatal(err)
	}
	if path != agent {
		t.Errorf("resolved command = %q, want %q", path, agent)
	}
	want := execdriver.Config{
		Command:     agent,
		Args:        []string{"mcp", "--config", "{mcpConfig}"},
		Dir:         dir,
		Env:         map[string]string{"OPENAI_API_KEY": "k", "EMPTY": ""},
		InheritEnv:  []string{"PATH"},
		ServerName:  "host",
		ConfigDir:   configDir,
		Grace:       execdriver.Duration(250 * time.Millisecond),
		StartupWait: execdriver.Duration(1500 * time.Millisecond),
	}
	if diff := cmp.Diff(want, cfg); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}

	cfg, _, err = execdriver.ParseConfig(json.RawMessage(`{"command":"sh","inheritEnv":[]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.InheritEnv == nil || len(cfg.InheritEnv) != 0 {
		t.Errorf("inheritEnv [] parsed as %#v, want an empty, non-nil list", cfg.InheritEnv)
	}
}

// TestDurationJSON: durations round-trip as Go duration strings.
func TestDurationJSON(t *testing.T) {
	d := execdriver.Duration(1500 * time.Millisecond)
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `"1.5s"` {
		t.Errorf("Marshal = %s, want \"1.5s\"", b)
	}
	var back execdriver.Duration
	if err := json.Unmarshal(b, &back); err != nil || back != d {
		t.Errorf("Unmarshal(%s) = %v, %v; want %v", b, back, err, d)
	}
}

// TestCloseBudget: the driver's close budget covers the whole grace, so a
// grace longer than the runtime's bound on driver calls (OpenTimeout,
// 30 s by default) is honoured rather than cut short.
func TestCloseBudget(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, grace := range []string{"", "50s", "2h"} {
		cfg := map[string]any{"command": sh}
		want := execdriver.DefaultGrace
		if grace != "" {
			cfg["grace"] = grace
			want, _ = time.ParseDuration(grace)
		}
		raw, _ := json.Marshal(cfg)
		d, err := execdriver.Factory(nil)("i", raw)
		if err != nil {
			t.Fatal(err)
		}
		got := driver.CloseTimeout(d, 30*time.Second)
		if got <= want || got > want+30*time.Second {
			t.Errorf("grace %q: close timeout %v, want a little more than %v", grace, got, want)
		}
	}
}

package agentproc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Defaults for the fields of [Config] left zero.
const (
	DefaultServerName   = "mcpruntime"
	DefaultGrace        = 5 * time.Second
	DefaultStartTimeout = 60 * time.Second
)

// DefaultInheritEnv names the variables an agent inherits from the
// runtime's environment when Config.InheritEnv is nil. Everything else of
// the runtime's environment is withheld.
var DefaultInheritEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM"}

// reservedEnvPrefixes may not be set through Config.Env or inherited: the
// first is the runtime's description of a session to its agent, the second
// the runtime's own configuration (cmd/runtime reads RUNTIME_*).
var reservedEnvPrefixes = []string{"MCPRUNTIME_", "RUNTIME_"}

// Config is what every agent driver's instance configuration has, as JSON
// fields of the driver's own object (embed it):
//
//	"command":      "codex",            // a path, or a name looked up in PATH; default: the driver's
//	"args":         ["--flag"],         // extra arguments (never a secret: argv is public)
//	"dir":          "/work/repo",       // the agent's working directory; default: the runtime's
//	"env":          {"K": "v"},         // added to the environment
//	"inheritEnv":   ["PATH", "HOME"],   // passed through from the runtime; default DefaultInheritEnv
//	"configDir":    "/run/agents",      // where a session's private directory goes; default os.TempDir()
//	"serverName":   "mcpruntime",       // the runtime's name in the agent's MCP configuration
//	"grace":        "5s",               // SIGTERM → SIGKILL
//	"startTimeout": "60s"               // how long an agent may take to come up (bounded by the open's context too)
type Config struct {
	Command      string            `json:"command,omitempty"`
	Args         []string          `json:"args,omitempty"`
	Dir          string            `json:"dir,omitempty"`
	Env          map[string]string `json:"env,omitempty"`
	InheritEnv   []string          `json:"inheritEnv,omitempty"`
	ConfigDir    string            `json:"configDir,omitempty"`
	ServerName   string            `json:"serverName,omitempty"`
	Grace        Duration          `json:"grace,omitempty"`
	StartTimeout Duration          `json:"startTimeout,omitempty"`
}

// Duration is a time.Duration written in JSON as a Go duration string
// ("5s", "250ms").
type Duration time.Duration

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"5s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// Decode decodes a driver's JSON configuration into v, refusing unknown
// fields and trailing data, so that a typo is an error rather than a
// silent default. what names the driver in errors. An empty raw leaves v
// as it is.
func Decode(what string, raw json.RawMessage, v any) error {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s config: %w", what, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%s config: trailing data after the JSON object", what)
	}
	return nil
}

// Resolve validates c and applies the defaults; defaultCommand is used
// when Command is empty. It returns the command's absolute path, looked
// up now so that a missing agent is refused when its instance is
// registered rather than at its first open.
func (c *Config) Resolve(defaultCommand string) (string, error) {
	if strings.TrimSpace(c.Command) == "" {
		if defaultCommand == "" {
			return "", errors.New(`"command" is required`)
		}
		c.Command = defaultCommand
	}
	path, err := exec.LookPath(c.Command)
	if err != nil {
		return "", fmt.Errorf("command %q: %w", c.Command, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return "", fmt.Errorf("command %q: %w", c.Command, err)
	}
	for name, v := range c.Env {
		if err := CheckEnvName(name); err != nil {
			return "", fmt.Errorf("env: %w", err)
		}
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("env %s: value contains a NUL byte", name)
		}
	}
	for _, name := range c.InheritEnv {
		if err := CheckEnvName(name); err != nil {
			return "", fmt.Errorf("inheritEnv: %w", err)
		}
	}
	if c.InheritEnv == nil {
		c.InheritEnv = DefaultInheritEnv
	}
	if c.Dir != "" {
		if err := checkDir(c.Dir); err != nil {
			return "", fmt.Errorf("dir: %w", err)
		}
	}
	if c.ConfigDir == "" {
		c.ConfigDir = os.TempDir()
	} else if err := checkDir(c.ConfigDir); err != nil {
		return "", fmt.Errorf("configDir: %w", err)
	} else if c.ConfigDir, err = filepath.Abs(c.ConfigDir); err != nil {
		return "", fmt.Errorf("configDir: %w", err)
	}
	if c.ServerName == "" {
		c.ServerName = DefaultServerName
	} else if err := checkServerName(c.ServerName); err != nil {
		return "", err
	}
	switch {
	case c.Grace < 0:
		return "", errors.New("grace must not be negative")
	case c.Grace == 0:
		c.Grace = Duration(DefaultGrace)
	}
	switch {
	case c.StartTimeout < 0:
		return "", errors.New("startTimeout must not be negative")
	case c.StartTimeout == 0:
		c.StartTimeout = Duration(DefaultStartTimeout)
	}
	return path, nil
}

// checkServerName admits the names every agent takes as an MCP server
// key (and inside its tool names): letters, digits, '-' and '_'.
func checkServerName(name string) error {
	if len(name) > 64 {
		return fmt.Errorf("serverName %q: longer than 64 characters", name)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("serverName %q: only letters, digits, '-' and '_'", name)
		}
	}
	return nil
}

// CheckEnvName refuses a variable name that is empty, malformed, or
// reserved (MCPRUNTIME_*, RUNTIME_*).
func CheckEnvName(name string) error {
	if name == "" || strings.ContainsAny(name, "=\x00") {
		return fmt.Errorf("invalid variable name %q", name)
	}
	for _, p := range reservedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("variable %s: names starting with %s are reserved", name, p)
		}
	}
	return nil
}

func checkDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// Env builds an environment from scratch: the variables named in inherit,
// from the runtime's environment, then extra, then own (the driver's own
// "NAME=value" entries, which win).
func (c *Config) Environ(own ...string) []string {
	var env []string
	for _, name := range c.InheritEnv {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	for name, v := range c.Env {
		env = append(env, name+"="+v)
	}
	return append(env, own...)
}

// CheckNames applies check to every variable c sets (Env) or passes
// through (InheritEnv): how a driver refuses the names it sets itself.
func (c *Config) CheckNames(check func(name string) error) error {
	for name := range c.Env {
		if err := check(name); err != nil {
			return fmt.Errorf("env: %w", err)
		}
	}
	for _, name := range c.InheritEnv {
		if err := check(name); err != nil {
			return fmt.Errorf("inheritEnv: %w", err)
		}
	}
	return nil
}

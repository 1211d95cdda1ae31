package execdriver

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
	DefaultServerName  = "mcpruntime"
	DefaultGrace       = 5 * time.Second
	DefaultStartupWait = 300 * time.Millisecond
)

// ConfigPlaceholder, inside an argument, is replaced by the path of the
// session's MCP config file.
const ConfigPlaceholder = "{mcpConfig}"

// DefaultInheritEnv names the variables a process inherits from the
// runtime's environment when Config.InheritEnv is nil. Everything else of
// the runtime's environment is withheld.
var DefaultInheritEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LC_ALL", "TZ", "TMPDIR", "TERM"}

// Environment variables every process gets, describing its own session.
const (
	EnvURL           = "MCPRUNTIME_URL"           // the MCP endpoint
	EnvAuthorization = "MCPRUNTIME_AUTHORIZATION" // "Bearer <token>" for that endpoint
	EnvMCPConfig     = "MCPRUNTIME_MCP_CONFIG"    // path of the JSON MCP config file
	EnvServerName    = "MCPRUNTIME_SERVER_NAME"   // the server's key in that file
	EnvThread        = "MCPRUNTIME_THREAD"        // the thread the session serves
	EnvInstance      = "MCPRUNTIME_INSTANCE"      // the provider instance
	EnvSession       = "MCPRUNTIME_SESSION"       // the provider session id
)

// reservedEnvPrefixes may not be set through Config.Env or inherited: the
// first is the session's own description above, the second the runtime's
// own configuration (cmd/runtime reads RUNTIME_*).
var reservedEnvPrefixes = []string{"MCPRUNTIME_", "RUNTIME_"}

// Config is the instance configuration of the exec driver, as JSON:
//
//	{
//	  "command": "codex",                     // required: a path, or a name looked up in PATH
//	  "args": ["mcp", "--config", "{mcpConfig}"],
//	  "dir": "/work/repo",                    // working directory; default: the runtime's
//	  "env": {"OPENAI_API_KEY": "…"},         // added to the environment
//	  "inheritEnv": ["PATH", "HOME"],         // passed through from the runtime; default DefaultInheritEnv
//	  "serverName": "host",                   // key under "mcpServers"; default "mcpruntime"
//	  "configDir": "/run/agent",              // where MCP config files go; default os.TempDir()
//	  "grace": "5s",                          // SIGTERM → SIGKILL; default 5s
//	  "startupWait": "300ms"                  // an exit this soon fails the open; default 300ms
//	}
//
// Unknown fields are refused, so a typo is an error rather than a silent
// default.
type Config struct {
	Command     string            `json:"command"`
	Args        []string          `json:"args,omitempty"`
	Dir         string            `json:"dir,omitempty"`
	Env         map[string]string `json:"env,omitempty"`
	InheritEnv  []string          `json:"inheritEnv,omitempty"`
	ServerName  string            `json:"serverName,omitempty"`
	ConfigDir   string            `json:"configDir,omitempty"`
	Grace       Duration          `json:"grace,omitempty"`
	StartupWait Duration          `json:"startupWait,omitempty"`
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

// ParseConfig decodes and validates an instance configuration, applying
// defaults. The command is resolved now, so a missing one is refused when
// the instance is registered rather than at its first open.
func ParseConfig(raw json.RawMessage) (Config, string, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return c, "", errors.New(`exec config: "command" is required`)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, "", fmt.Errorf("exec config: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return c, "", errors.New("exec config: trailing data after the JSON object")
	}
	if strings.TrimSpace(c.Command) == "" {
		return c, "", errors.New(`exec config: "command" is required`)
	}
	path, err := exec.LookPath(c.Command)
	if err != nil {
		return c, "", fmt.Errorf("exec config: command %q: %w", c.Command, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return c, "", fmt.Errorf("exec config: command %q: %w", c.Command, err)
	}
	for name, v := range c.Env {
		if err := checkEnvName(name); err != nil {
			return c, "", fmt.Errorf("exec config: env: %w", err)
		}
		if strings.ContainsRune(v, 0) {
			return c, "", fmt.Errorf("exec config: env %s: value contains a NUL byte", name)
		}
	}
	for _, name := range c.InheritEnv {
		if err := checkEnvName(name); err != nil {
			return c, "", fmt.Errorf("exec config: inheritEnv: %w", err)
		}
	}
	if c.InheritEnv == nil {
		c.InheritEnv = DefaultInheritEnv
	}
	if c.Dir != "" {
		if err := checkDir(c.Dir); err != nil {
			return c, "", fmt.Errorf("exec config: dir: %w", err)
		}
	}
	if c.ConfigDir == "" {
		c.ConfigDir = os.TempDir()
	} else if err := checkDir(c.ConfigDir); err != nil {
		return c, "", fmt.Errorf("exec config: configDir: %w", err)
	} else if c.ConfigDir, err = filepath.Abs(c.ConfigDir); err != nil {
		return c, "", fmt.Errorf("exec config: configDir: %w", err)
	}
	if c.ServerName == "" {
		c.ServerName = DefaultServerName
	}
	switch {
	case c.Grace < 0:
		return c, "", errors.New("exec config: grace must not be negative")
	case c.Grace == 0:
		c.Grace = Duration(DefaultGrace)
	}
	switch {
	case c.StartupWait < 0:
		return c, "", errors.New("exec config: startupWait must not be negative")
	case c.StartupWait == 0:
		c.StartupWait = Duration(DefaultStartupWait)
	}
	return c, path, nil
}

func checkEnvName(name string) error {
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

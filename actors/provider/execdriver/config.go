package execdriver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

// Defaults for the fields of [Config] left zero.
const (
	DefaultServerName  = agentproc.DefaultServerName
	DefaultGrace       = agentproc.DefaultGrace
	DefaultStartupWait = 300 * time.Millisecond
)

// ConfigPlaceholder, inside an argument, is replaced by the path of the
// session's MCP config file.
const ConfigPlaceholder = "{mcpConfig}"

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

// Config is the instance configuration of the exec driver, as JSON:
//
//	{
//	  "command": "codex",                     // required: a path, or a name looked up in PATH
//	  "args": ["mcp", "--config", "{mcpConfig}"],
//	  "dir": "/work/repo",                    // working directory; default: the runtime's
//	  "env": {"OPENAI_API_KEY": "…"},         // added to the environment
//	  "inheritEnv": ["PATH", "HOME"],         // passed through from the runtime; default agentproc.DefaultInheritEnv
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
type Duration = agentproc.Duration

// ParseConfig decodes and validates an instance configuration, applying
// defaults (the checks every agent driver shares: agentproc.Config). The
// command is resolved now, so a missing one is refused when the instance
// is registered rather than at its first open.
func ParseConfig(raw json.RawMessage) (Config, string, error) {
	var c Config
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		return c, "", errors.New(`exec config: "command" is required`)
	}
	if err := agentproc.Decode("exec", raw, &c); err != nil {
		return c, "", err
	}
	common := agentproc.Config{
		Command: c.Command, Args: c.Args, Dir: c.Dir, Env: c.Env, InheritEnv: c.InheritEnv,
		ConfigDir: c.ConfigDir, ServerName: c.ServerName, Grace: c.Grace,
	}
	path, err := common.Resolve("")
	if err != nil {
		return c, "", fmt.Errorf("exec config: %w", err)
	}
	c.InheritEnv, c.ConfigDir, c.ServerName, c.Grace = common.InheritEnv, common.ConfigDir, common.ServerName, common.Grace
	switch {
	case c.StartupWait < 0:
		return c, "", errors.New("exec config: startupWait must not be negative")
	case c.StartupWait == 0:
		c.StartupWait = Duration(DefaultStartupWait)
	}
	return c, path, nil
}

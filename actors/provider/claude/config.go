package claude

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

// DefaultCommand is the command run when Config.Command is empty.
const DefaultCommand = "claude"

// Environment variables the driver sets for Claude Code. A host may
// neither set nor inherit the first two; the directories (HOME, XDG_*,
// CLAUDE_CONFIG_DIR) and the switches the driver sets win over a host's.
const (
	// EnvAPIKey is the variable the model API key is handed over in, from
	// the runtime's variable named by Config.APIKeyEnv.
	EnvAPIKey = "ANTHROPIC_API_KEY"
	// EnvBaseURL is Config.BaseURL.
	EnvBaseURL = "ANTHROPIC_BASE_URL"
	// EnvConfigDir is the session's own Claude Code configuration
	// directory, under its private directory.
	EnvConfigDir = "CLAUDE_CONFIG_DIR"
)

// ownedFlags are the arguments the driver sets itself; Config.Args may not
// hold them (nor their --flag=value forms): each decides where the token
// goes, how the driver talks to Claude Code, or who approves tool calls.
var ownedFlags = []string{
	"-p", "--print", "--input-format", "--output-format", "--verbose",
	"--mcp-config", "--strict-mcp-config", "--permission-prompt-tool",
	"--resume", "-r", "--continue", "-c", "--session-id", "--fork-session",
	"--dangerously-skip-permissions", "--allow-dangerously-skip-permissions",
	"--model", "--settings", "--debug", "-d", "--debug-file",
}

// Config is the instance configuration of the claude driver, as JSON: the
// fields of [agentproc.Config], inline, and the model settings.
//
//	{
//	  "command":    "/opt/claude/bin/claude",   // default "claude", looked up in PATH
//	  "args":       ["--effort", "low"],        // before the driver's own arguments
//	  "dir":        "/work/repo",               // the agent's working directory
//	  "env":        {"BASH_DEFAULT_TIMEOUT_MS": "60000"},
//	  "inheritEnv": ["PATH"],                   // default agentproc.DefaultInheritEnv
//	  "configDir":  "/run/mcpruntime",          // where each session's private directory goes
//	  "serverName": "mcpruntime",               // the key under mcpServers; tools are mcp__<serverName>__<tool>
//	  "grace":      "5s",
//	  "startTimeout": "60s",
//	  "baseURL":    "http://127.0.0.1:8080",    // ANTHROPIC_BASE_URL (Claude Code posts to <baseURL>/v1/messages)
//	  "model":      "claude-sonnet-4-5",        // --model; default Claude Code's own
//	  "apiKeyEnv":  "MY_ANTHROPIC_KEY",         // the runtime's variable holding the model API key
//	  "scrubSubprocessEnv": true               // CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1 (needs bubblewrap)
//	}
//
// Unknown fields are refused.
type Config struct {
	agentproc.Config
	// BaseURL is the Anthropic Messages API's base URL, handed over as
	// ANTHROPIC_BASE_URL. Empty: Claude Code's default (Anthropic's API).
	BaseURL string `json:"baseURL,omitempty"`
	// Model is the model Claude Code asks for (--model). Empty: its
	// default.
	Model string `json:"model,omitempty"`
	// APIKeyEnv names a variable of the runtime's environment holding the
	// model API key. Its value reaches Claude Code as [EnvAPIKey] (and
	// nothing else of the runtime's environment does); an open fails when
	// it is unset. Empty: no key is handed over.
	APIKeyEnv string `json:"apiKeyEnv,omitempty"`
	// ScrubSubprocessEnv sets CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1: the
	// commands the model runs (Bash, hooks) get an environment without
	// Claude Code's credentials (the model key), in a bubblewrap sandbox.
	// Claude Code 2.1.328 refuses to start without bubblewrap installed
	// then ("bubblewrap is required for subprocess env scrubbing"). False:
	// not set; the model's commands inherit the environment, the model key
	// included (the MCP token is in no environment).
	ScrubSubprocessEnv bool `json:"scrubSubprocessEnv,omitempty"`
}

// ParseConfig decodes and validates an instance configuration, applying
// defaults. It returns the command's absolute path.
func ParseConfig(raw json.RawMessage) (Config, string, error) {
	var c Config
	if err := agentproc.Decode(Kind, raw, &c); err != nil {
		return c, "", err
	}
	path, err := c.Config.Resolve(DefaultCommand)
	if err != nil {
		return c, "", fmt.Errorf("claude config: %w", err)
	}
	if err := c.CheckNames(checkOwnName); err != nil {
		return c, "", fmt.Errorf("claude config: %w", err)
	}
	for _, a := range c.Args {
		flag, _, _ := strings.Cut(a, "=")
		for _, own := range ownedFlags {
			if flag == own {
				return c, "", fmt.Errorf("claude config: args: %s is set by the driver", own)
			}
		}
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, "", fmt.Errorf("claude config: baseURL %q: want an http or https URL", c.BaseURL)
		}
		if u.User != nil {
			return c, "", errors.New("claude config: baseURL: no credentials in the URL; use apiKeyEnv")
		}
	}
	for _, r := range c.Model {
		if !unicode.IsPrint(r) || r == ' ' {
			return c, "", fmt.Errorf("claude config: model %q: only printable characters, no spaces", c.Model)
		}
	}
	if strings.HasPrefix(c.Model, "-") {
		return c, "", fmt.Errorf("claude config: model %q: not a flag", c.Model)
	}
	if c.APIKeyEnv != "" && strings.ContainsAny(c.APIKeyEnv, "=\x00") {
		return c, "", fmt.Errorf("claude config: apiKeyEnv %q: not a variable name", c.APIKeyEnv)
	}
	return c, path, nil
}

// checkOwnName refuses the variables only the driver may set: the model
// key and where Claude Code keeps its state (CLAUDE_CONFIG_DIR), and the
// other ways of handing it a credential.
func checkOwnName(name string) error {
	switch name {
	case EnvAPIKey, EnvConfigDir, "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN":
		return fmt.Errorf("variable %s is set by the driver", name)
	}
	return nil
}

// claudeArgs are Claude Code's arguments: the host's own first, then the
// driver's (ParseConfig refused a host argument that is one of the
// driver's), so that a host's variadic flag (--allowedTools a b) ends
// where the driver's begin.
func claudeArgs(c Config, mcpConfig string) []string {
	args := append([]string{}, c.Args...)
	args = append(args,
		"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--mcp-config", mcpConfig, "--strict-mcp-config",
		"--allowedTools", "mcp__"+c.ServerName+"__*")
	if c.Model != "" {
		args = append(args, "--model", c.Model)
	}
	return args
}

// mcpConfigJSON is the --mcp-config file: the runtime's server alone,
// over Streamable HTTP, with the session's credential.
func mcpConfigJSON(serverName, endpoint, authorization string) ([]byte, error) {
	return json.Marshal(map[string]any{"mcpServers": map[string]any{serverName: serverConfig(endpoint, authorization)}})
}

// serverConfig is the runtime's entry in the MCP configuration (the file
// and mcp_set_servers).
func serverConfig(endpoint, authorization string) mcpServerConfig {
	return mcpServerConfig{Type: "http", URL: endpoint, Headers: map[string]string{"Authorization": authorization}}
}

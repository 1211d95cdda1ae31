package codex

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
const DefaultCommand = "codex"

// Environment variables the driver sets for the app-server. A host may
// neither set nor inherit them.
const (
	// EnvToken holds the session's bare MCP token; Codex reads it through
	// mcp_servers.<serverName>.bearer_token_env_var and sends it as
	// "Authorization: Bearer <token>".
	EnvToken = "MCPRUNTIME_TOKEN"
	// EnvCodexHome is the session's own CODEX_HOME.
	EnvCodexHome = "CODEX_HOME"
	// EnvAPIKey is the variable the model API key is handed over in (the
	// name Codex's OpenAI provider reads), from the runtime's variable
	// named by Config.APIKeyEnv.
	EnvAPIKey = "OPENAI_API_KEY"
)

// ModelProvider is the id of the model provider the driver defines, in
// Codex's model_providers table, when Config.BaseURL is set.
const ModelProvider = "mcpruntime"

// Config is the instance configuration of the codex driver, as JSON: the
// fields of [agentproc.Config], inline, and the model settings.
//
//	{
//	  "command":    "/opt/codex/bin/codex",    // default "codex", looked up in PATH
//	  "args":       ["-c", "model_reasoning_effort=\"low\""], // after "app-server"
//	  "dir":        "/work/repo",              // the agent's working directory (Codex's cwd)
//	  "env":        {"RUST_LOG": "warn"},
//	  "inheritEnv": ["PATH", "HOME"],          // default agentproc.DefaultInheritEnv
//	  "configDir":  "/run/mcpruntime",         // where each session's private directory goes
//	  "serverName": "mcpruntime",              // the key under mcp_servers
//	  "grace":      "5s",
//	  "startTimeout": "60s",
//	  "baseURL":    "http://127.0.0.1:8080/v1", // model API (OpenAI Responses); default Codex's own
//	  "model":      "gpt-5.5",                 // default Codex's own
//	  "apiKeyEnv":  "MY_OPENAI_KEY",           // the runtime's variable holding the model API key
//	  "rotateWait": "10s"                      // how long a rotation waits for a running turn
//	}
//
// Unknown fields are refused.
type Config struct {
	agentproc.Config
	// BaseURL is the model API's base URL, to which Codex appends
	// "/responses" (the OpenAI Responses wire API). Set, the driver defines
	// the model provider [ModelProvider] with it and selects it. Empty:
	// Codex's built-in provider (OpenAI).
	BaseURL string `json:"baseURL,omitempty"`
	// Model is the model name Codex asks for. Empty: Codex's default.
	Model string `json:"model,omitempty"`
	// APIKeyEnv names a variable of the runtime's environment holding the
	// model API key. Its value reaches the app-server as [EnvAPIKey] (and
	// nothing else of the runtime's environment does); an open fails when
	// it is unset. Empty: no key is handed over.
	APIKeyEnv string `json:"apiKeyEnv,omitempty"`
	// RotateWait bounds how long a rotation waits for a turn in progress
	// to end before it interrupts it (the wait also ends in time for the
	// restart to fit in the rotation's context). Zero: DefaultRotateWait.
	RotateWait agentproc.Duration `json:"rotateWait,omitempty"`
}

// DefaultRotateWait is Config.RotateWait's default.
const DefaultRotateWait = agentproc.Duration(10e9) // 10s

// ParseConfig decodes and validates an instance configuration, applying
// defaults. It returns the command's absolute path.
func ParseConfig(raw json.RawMessage) (Config, string, error) {
	var c Config
	if err := agentproc.Decode(Kind, raw, &c); err != nil {
		return c, "", err
	}
	path, err := c.Config.Resolve(DefaultCommand)
	if err != nil {
		return c, "", fmt.Errorf("codex config: %w", err)
	}
	if err := c.CheckNames(checkOwnName); err != nil {
		return c, "", fmt.Errorf("codex config: %w", err)
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, "", fmt.Errorf("codex config: baseURL %q: want an http or https URL", c.BaseURL)
		}
		if u.User != nil {
			return c, "", errors.New("codex config: baseURL: no credentials in the URL (argv is public); use apiKeyEnv")
		}
	}
	if err := checkPrintable("model", c.Model); err != nil {
		return c, "", err
	}
	if c.APIKeyEnv != "" {
		if c.APIKeyEnv == EnvToken || strings.ContainsAny(c.APIKeyEnv, "=\x00") {
			return c, "", fmt.Errorf("codex config: apiKeyEnv %q: not a variable the runtime may hand over", c.APIKeyEnv)
		}
	}
	switch {
	case c.RotateWait < 0:
		return c, "", errors.New("codex config: rotateWait must not be negative")
	case c.RotateWait == 0:
		c.RotateWait = DefaultRotateWait
	}
	return c, path, nil
}

// checkOwnName refuses the variables the driver sets itself.
func checkOwnName(name string) error {
	switch name {
	case EnvCodexHome, EnvAPIKey:
		return fmt.Errorf("variable %s is set by the driver", name)
	}
	return nil
}

func checkPrintable(field, s string) error {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("codex config: %s %q: only printable characters", field, s)
		}
	}
	return nil
}

// tomlString quotes s as a TOML basic string, the form Codex parses a -c
// value in.
func tomlString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// codexArgs are the app-server's arguments: the driver's defaults, the
// host's own, then the driver's settings, so that a host argument cannot
// undo what keeps the token private (Codex takes the last -c of a key).
func codexArgs(c Config, endpoint string) []string {
	server := "mcp_servers." + c.ServerName
	args := []string{"app-server"}
	set := func(key, value string) { args = append(args, "-c", key+"="+value) }
	set("approval_policy", tomlString("never")) // nobody is there to approve; a host may say otherwise
	args = append(args, c.Args...)
	set(server+".url", tomlString(endpoint))
	set(server+".bearer_token_env_var", tomlString(EnvToken))
	// Codex refuses an MCP tool call that needs approval when no one can
	// give it; the runtime's own tools are the point of the session.
	set(server+".default_tools_approval_mode", tomlString("approve"))
	// The commands the model runs never see the token nor the model key.
	set("shell_environment_policy.exclude", "["+tomlString("MCPRUNTIME_*")+","+tomlString(EnvAPIKey)+"]")
	if c.BaseURL != "" {
		provider := "{name=" + tomlString(ModelProvider) + ",base_url=" + tomlString(c.BaseURL) +
			",wire_api=" + tomlString("responses")
		if c.APIKeyEnv != "" {
			provider += ",env_key=" + tomlString(EnvAPIKey)
		}
		set("model_providers."+ModelProvider, provider+"}")
		set("model_provider", tomlString(ModelProvider))
	}
	if c.Model != "" {
		set("model", tomlString(c.Model))
	}
	return args
}

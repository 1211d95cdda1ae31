package opencode

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
)

// DefaultCommand is the command run when Config.Command is empty.
const DefaultCommand = "opencode"

// ProviderID is the id of the model provider the driver defines in
// OpenCode's configuration when Config.BaseURL is set (an
// "@ai-sdk/openai-compatible" provider, bundled with OpenCode).
const ProviderID = "mcpruntime"

// EnvAPIKey is the variable the model API key is handed to OpenCode in,
// from the runtime's variable named by Config.APIKeyEnv; the provider's
// configuration reads it as "{env:MCPRUNTIME_MODEL_API_KEY}".
const EnvAPIKey = "MCPRUNTIME_MODEL_API_KEY"

// Username is the user name of the HTTP basic authentication of the
// server (OpenCode's default; the password is random per session).
const Username = "opencode"

// Environment variables the driver sets for the server itself: its
// private directories, its configuration file and its password. A host
// may neither set nor inherit them.
var ownEnv = []string{
	"HOME", "TMPDIR", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME",
	"OPENCODE_CONFIG", "OPENCODE_SERVER_PASSWORD", "OPENCODE_SERVER_USERNAME",
}

// DefaultEnv is what the server's environment holds unless Config.Env
// says otherwise: no self-update, no download of the models.dev catalogue
// or of language servers, no default plugins, no sharing of sessions, and
// no reading of Claude Code's files.
var DefaultEnv = map[string]string{
	"OPENCODE_DISABLE_AUTOUPDATE":      "1",
	"OPENCODE_DISABLE_MODELS_FETCH":    "1",
	"OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
	"OPENCODE_DISABLE_LSP_DOWNLOAD":    "1",
	"OPENCODE_DISABLE_SHARE":           "1",
	"OPENCODE_DISABLE_CLAUDE_CODE":     "1",
}

// refusedArgs are options of "opencode serve" the driver sets itself: the
// server listens on loopback only, on a port of its own choosing.
var refusedArgs = []string{"--hostname", "--port", "--mdns", "--mdns-domain"}

// Config is the instance configuration of the opencode driver, as JSON:
// the fields of [agentproc.Config], inline, and the model settings.
//
//	{
//	  "command":    "/opt/opencode/bin/opencode", // default "opencode", looked up in PATH
//	  "args":       ["--log-level", "WARN"],       // after "serve --hostname 127.0.0.1 --port 0 --print-logs"
//	  "dir":        "/work/repo",                  // the agent's working directory (OpenCode's project)
//	  "env":        {"npm_config_offline": "true"},
//	  "inheritEnv": ["PATH", "LANG"],              // default agentproc.DefaultInheritEnv
//	  "configDir":  "/run/mcpruntime",             // where each session's private directory goes
//	  "serverName": "mcpruntime",                  // prefix of the MCP server's name in OpenCode
//	  "grace":      "5s",
//	  "startTimeout": "60s",
//	  "baseURL":    "http://127.0.0.1:8080/v1",    // an OpenAI-compatible API (Chat Completions)
//	  "model":      "qwen3-coder",                 // the model name that API serves
//	  "apiKeyEnv":  "MY_MODEL_KEY"                 // the runtime's variable holding its API key
//	}
//
// Unknown fields are refused.
type Config struct {
	agentproc.Config
	// BaseURL is the base URL of an OpenAI-compatible model API, to which
	// OpenCode appends "/chat/completions". Set, the driver defines the
	// provider [ProviderID] with it and Model, and every turn uses that
	// model (a repository's opencode.json cannot change it). Empty:
	// OpenCode's own providers and Model as OpenCode names one
	// ("provider/model").
	BaseURL string `json:"baseURL,omitempty"`
	// Model is the model's name: at BaseURL (required with it), or
	// OpenCode's "provider/model" without it (empty: OpenCode's default).
	Model string `json:"model,omitempty"`
	// APIKeyEnv names a variable of the runtime's environment holding the
	// model API key. Its value reaches the server as [EnvAPIKey] (and
	// nothing else of the runtime's environment does); an open fails when
	// it is unset. It needs BaseURL: without it, pass the key of one of
	// OpenCode's own providers through InheritEnv under the name that
	// provider reads. Empty: no key is handed over.
	APIKeyEnv string `json:"apiKeyEnv,omitempty"`
}

// ParseConfig decodes and validates an instance configuration, applying
// defaults. It returns the command's absolute path.
func ParseConfig(raw json.RawMessage) (Config, string, error) {
	var c Config
	if err := agentproc.Decode(Kind, raw, &c); err != nil {
		return c, "", err
	}
	if err := c.CheckNames(func(name string) error {
		if slices.Contains(ownEnv, name) {
			return fmt.Errorf("variable %s is set by the driver", name)
		}
		return nil
	}); err != nil {
		return c, "", fmt.Errorf("opencode config: %w", err)
	}
	path, err := c.Config.Resolve(DefaultCommand)
	if err != nil {
		return c, "", fmt.Errorf("opencode config: %w", err)
	}
	// The default list names HOME and TMPDIR: the driver's own win.
	c.InheritEnv = slices.DeleteFunc(slices.Clone(c.InheritEnv), func(name string) bool { return slices.Contains(ownEnv, name) })
	for _, a := range c.Args {
		for _, r := range refusedArgs {
			if a == r || strings.HasPrefix(a, r+"=") {
				return c, "", fmt.Errorf("opencode config: args: %s is set by the driver", r)
			}
		}
	}
	if err := checkPrintable("model", c.Model); err != nil {
		return c, "", err
	}
	if c.BaseURL != "" {
		u, err := url.Parse(c.BaseURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, "", fmt.Errorf("opencode config: baseURL %q: want an http or https URL", c.BaseURL)
		}
		if u.User != nil {
			return c, "", errors.New("opencode config: baseURL: no credentials in the URL; use apiKeyEnv")
		}
		if c.Model == "" {
			return c, "", errors.New(`opencode config: "model" is required with "baseURL"`)
		}
	} else {
		if c.Model != "" && !strings.Contains(strings.Trim(c.Model, "/"), "/") {
			return c, "", fmt.Errorf(`opencode config: model %q: without "baseURL", name an OpenCode model as "provider/model"`, c.Model)
		}
		if c.APIKeyEnv != "" {
			return c, "", errors.New(`opencode config: "apiKeyEnv" needs "baseURL"; pass the key of an OpenCode provider through "inheritEnv" under the name it reads`)
		}
	}
	if c.APIKeyEnv != "" && (strings.ContainsAny(c.APIKeyEnv, "=\x00") || c.APIKeyEnv == EnvAPIKey) {
		return c, "", fmt.Errorf("opencode config: apiKeyEnv %q: not a variable the runtime may hand over", c.APIKeyEnv)
	}
	return c, path, nil
}

func checkPrintable(field, s string) error {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("opencode config: %s %q: only printable characters", field, s)
		}
	}
	return nil
}

// serveArgs are the server's arguments: loopback, a port the server picks
// (it prints it), its logs on stderr (the runtime's log), then the host's.
func serveArgs(c Config) []string {
	return append([]string{"serve", "--hostname", "127.0.0.1", "--port", "0", "--print-logs"}, c.Args...)
}

// model is the model a prompt names, as OpenCode's {providerID, modelID};
// nil leaves OpenCode's default.
func (c Config) model() *promptModel {
	switch {
	case c.BaseURL != "":
		return &promptModel{ProviderID: ProviderID, ModelID: c.Model}
	case c.Model != "":
		p, m, _ := strings.Cut(strings.Trim(c.Model, "/"), "/")
		return &promptModel{ProviderID: p, ModelID: m}
	}
	return nil
}

// fileConfig is the content of the session's OpenCode configuration file
// (OPENCODE_CONFIG). It holds no secret: the API key is a reference to
// [EnvAPIKey], and the MCP server is registered over the API, not here.
func fileConfig(c Config) ([]byte, error) {
	m := map[string]any{
		"$schema":    "https://opencode.ai/config.json",
		"autoupdate": false,
		"share":      "disabled",
	}
	if c.BaseURL != "" {
		options := map[string]any{"baseURL": c.BaseURL}
		if c.APIKeyEnv != "" {
			options["apiKey"] = "{env:" + EnvAPIKey + "}"
		}
		m["provider"] = map[string]any{ProviderID: map[string]any{
			"npm":     "@ai-sdk/openai-compatible",
			"name":    "mcpruntime",
			"options": options,
			"models":  map[string]any{c.Model: map[string]any{"name": c.Model, "tool_call": true}},
		}}
		m["model"] = ProviderID + "/" + c.Model
		m["small_model"] = ProviderID + "/" + c.Model // titles and summaries: the same model, nothing else
	} else if c.Model != "" {
		m["model"] = c.Model
	}
	return json.MarshalIndent(m, "", "  ")
}

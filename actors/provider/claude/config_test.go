package claude_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider/claude"
)

// TestParseConfig: what a host may write, and what it may not.
func TestParseConfig(t *testing.T) {
	for _, test := range []struct {
		name    string
		raw     string
		wantErr string // "" for success
	}{
		{"empty: the defaults", ``, ""},
		{"model settings", `{"baseURL":"http://127.0.0.1:9","model":"claude-x","apiKeyEnv":"K"}`, ""},
		{"host args", `{"args":["--effort","low","--allowedTools","Read"]}`, ""},
		{"unknown field", `{"modle":"m"}`, "unknown field"},
		{"trailing data", `{} {}`, "trailing data"},
		{"baseURL not http", `{"baseURL":"ftp://x"}`, "http or https"},
		{"baseURL with credentials", `{"baseURL":"https://u:p@x"}`, "no credentials"},
		{"model with a newline", `{"model":"a\nb"}`, "printable"},
		{"model is a flag", `{"model":"--mcp-config"}`, "not a flag"},
		{"args set --mcp-config", `{"args":["--mcp-config","/tmp/x.json"]}`, "set by the driver"},
		{"args set --mcp-config=", `{"args":["--mcp-config={}"]}`, "set by the driver"},
		{"args skip permissions", `{"args":["--dangerously-skip-permissions"]}`, "set by the driver"},
		{"args set the permission prompt tool", `{"args":["--permission-prompt-tool","stdio"]}`, "set by the driver"},
		{"args set --output-format", `{"args":["--output-format","text"]}`, "set by the driver"},
		{"env sets the key variable", `{"env":{"ANTHROPIC_API_KEY":"k"}}`, "set by the driver"},
		{"env sets an auth token", `{"env":{"ANTHROPIC_AUTH_TOKEN":"k"}}`, "set by the driver"},
		{"env sets CLAUDE_CONFIG_DIR", `{"env":{"CLAUDE_CONFIG_DIR":"/x"}}`, "set by the driver"},
		{"env sets a reserved variable", `{"env":{"MCPRUNTIME_TOKEN":"t"}}`, "reserved"},
		{"inherits the key variable", `{"inheritEnv":["PATH","ANTHROPIC_API_KEY"]}`, "set by the driver"},
		{"bad apiKeyEnv", `{"apiKeyEnv":"A=B"}`, "not a variable"},
		{"bad serverName", `{"serverName":"a.b"}`, "serverName"},
		{"missing command", `{"command":"/nonexistent/claude"}`, "command"},
	} {
		t.Run(test.name, func(t *testing.T) {
			raw := test.raw
			if !strings.Contains(raw, `"command"`) {
				// The pinned binary, so that the default lookup in PATH
				// does not decide the case.
				cmd := `"command":"` + claudeBinary(t) + `"`
				if raw == "" || raw == "{}" {
					raw = "{" + cmd + "}"
				} else if strings.HasPrefix(raw, "{}") {
					raw = "{" + cmd + "}" + raw[2:]
				} else {
					raw = "{" + cmd + "," + raw[1:]
				}
			}
			c, path, err := claude.ParseConfig([]byte(raw))
			if test.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseConfig(%s): %v", raw, err)
				}
				if path == "" || c.ServerName != "mcpruntime" || c.StartTimeout == 0 {
					t.Errorf("ParseConfig(%s) = %+v, %q: want the defaults applied", raw, c, path)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), test.wantErr) {
				t.Fatalf("ParseConfig(%s) = %v, want an error with %q", raw, err, test.wantErr)
			}
		})
	}
}

// TestArgs: the host's arguments come first, the driver's after them, so
// that a host's variadic flag ends where the driver's begin and the
// driver's settings are the ones Claude Code reads.
func TestArgs(t *testing.T) {
	c, _, err := claude.ParseConfig([]byte(`{"command":"` + claudeBinary(t) + `","args":["--allowedTools","Read","Grep"],"model":"claude-x"}`))
	if err != nil {
		t.Fatal(err)
	}
	got := claude.ClaudeArgs(c, "/private/mcp.json")
	want := []string{"--allowedTools", "Read", "Grep",
		"-p", "--input-format", "stream-json", "--output-format", "stream-json", "--verbose",
		"--mcp-config", "/private/mcp.json", "--strict-mcp-config",
		"--allowedTools", "mcp__mcpruntime__*", "--model", "claude-x"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ClaudeArgs (-want +got):\n%s", diff)
	}
}

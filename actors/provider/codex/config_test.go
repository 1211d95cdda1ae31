package codex_test

import (
	"strings"
	"testing"

	"github.com/agenthost/mcpruntime/actors/provider/codex"
)

// TestParseConfig: what a host may write, and what it may not.
func TestParseConfig(t *testing.T) {
	for _, test := range []struct {
		name    string
		raw     string
		wantErr string // "" for success
	}{
		{"empty: the defaults", ``, ""},
		{"model settings", `{"baseURL":"http://127.0.0.1:9/v1","model":"m","apiKeyEnv":"K"}`, ""},
		{"unknown field", `{"modle":"m"}`, "unknown field"},
		{"trailing data", `{} {}`, "trailing data"},
		{"baseURL not http", `{"baseURL":"ftp://x/v1"}`, "http or https"},
		{"baseURL with credentials", `{"baseURL":"https://u:p@x/v1"}`, "no credentials"},
		{"model with a newline", `{"model":"a\nb"}`, "printable"},
		{"env sets CODEX_HOME", `{"env":{"CODEX_HOME":"/x"}}`, "set by the driver"},
		{"env sets the key variable", `{"env":{"OPENAI_API_KEY":"k"}}`, "set by the driver"},
		{"env sets the token variable", `{"env":{"MCPRUNTIME_TOKEN":"t"}}`, "reserved"},
		{"inherits CODEX_HOME", `{"inheritEnv":["PATH","CODEX_HOME"]}`, "set by the driver"},
		{"apiKeyEnv names the token", `{"apiKeyEnv":"MCPRUNTIME_TOKEN"}`, "may hand over"},
		{"negative rotateWait", `{"rotateWait":"-1s"}`, "negative"},
		{"bad serverName", `{"serverName":"a.b"}`, "serverName"},
		{"missing command", `{"command":"/nonexistent/codex"}`, "command"},
	} {
		t.Run(test.name, func(t *testing.T) {
			raw := test.raw
			if !strings.Contains(raw, `"command"`) {
				// The pinned binary, so that the default lookup in PATH
				// does not decide the case.
				cmd := `"command":"` + codexBinary(t) + `"`
				if raw == "" || raw == "{}" {
					raw = "{" + cmd + "}"
				} else if strings.HasPrefix(raw, "{}") {
					raw = "{" + cmd + "}" + raw[2:]
				} else {
					raw = "{" + cmd + "," + raw[1:]
				}
			}
			c, path, err := codex.ParseConfig([]byte(raw))
			if test.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseConfig(%s): %v", raw, err)
				}
				if path == "" || c.ServerName != "mcpruntime" || c.RotateWait != codex.DefaultRotateWait {
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

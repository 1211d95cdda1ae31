package opencode_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/opencode"
)

// TestParseConfig: the configuration a host writes is validated when the
// instance is registered; unknown fields, the driver's own variables and
// options, and model settings that cannot work are refused with a reason.
func TestParseConfig(t *testing.T) {
	bin := agenttest.Binary(t, "opencode")
	dir := t.TempDir()
	tests := []struct {
		name    string
		raw     string
		wantErr string // "" for success
	}{
		{name: "minimal", raw: `{"command":"` + bin + `"}`},
		{name: "full", raw: `{"command":"` + bin + `","dir":"` + dir + `","configDir":"` + dir + `","serverName":"rt","grace":"2s","startTimeout":"30s",
			"args":["--log-level","WARN"],"env":{"npm_config_offline":"true"},"inheritEnv":["PATH"],
			"baseURL":"http://127.0.0.1:8080/v1","model":"qwen","apiKeyEnv":"MY_KEY"}`},
		{name: "an OpenCode model", raw: `{"command":"` + bin + `","model":"anthropic/claude-sonnet-4-5"}`},
		{name: "unknown field", raw: `{"command":"` + bin + `","modle":"x"}`, wantErr: `unknown field "modle"`},
		{name: "missing command", raw: `{"command":"/nonexistent/opencode"}`, wantErr: "/nonexistent/opencode"},
		{name: "baseURL without model", raw: `{"command":"` + bin + `","baseURL":"http://127.0.0.1:1/v1"}`, wantErr: `"model" is required`},
		{name: "baseURL not http", raw: `{"command":"` + bin + `","baseURL":"file:///x","model":"m"}`, wantErr: "want an http or https URL"},
		{name: "credentials in baseURL", raw: `{"command":"` + bin + `","baseURL":"http://u:p@127.0.0.1/v1","model":"m"}`, wantErr: "no credentials in the URL"},
		{name: "bare model without baseURL", raw: `{"command":"` + bin + `","model":"qwen"}`, wantErr: `"provider/model"`},
		{name: "apiKeyEnv without baseURL", raw: `{"command":"` + bin + `","apiKeyEnv":"K"}`, wantErr: `"apiKeyEnv" needs "baseURL"`},
		{name: "apiKeyEnv malformed", raw: `{"command":"` + bin + `","baseURL":"http://127.0.0.1/v1","model":"m","apiKeyEnv":"A=B"}`, wantErr: "not a variable"},
		{name: "password in env", raw: `{"command":"` + bin + `","env":{"OPENCODE_SERVER_PASSWORD":"x"}}`, wantErr: "set by the driver"},
		{name: "HOME in env", raw: `{"command":"` + bin + `","env":{"HOME":"/root"}}`, wantErr: "set by the driver"},
		{name: "config inherited", raw: `{"command":"` + bin + `","inheritEnv":["PATH","OPENCODE_CONFIG"]}`, wantErr: "set by the driver"},
		{name: "reserved env", raw: `{"command":"` + bin + `","env":{"MCPRUNTIME_MODEL_API_KEY":"x"}}`, wantErr: "reserved"},
		{name: "hostname arg", raw: `{"command":"` + bin + `","args":["--hostname","0.0.0.0"]}`, wantErr: "--hostname is set by the driver"},
		{name: "port arg", raw: `{"command":"` + bin + `","args":["--port=4096"]}`, wantErr: "--port is set by the driver"},
		{name: "mdns arg", raw: `{"command":"` + bin + `","args":["--mdns"]}`, wantErr: "--mdns is set by the driver"},
		{name: "bad server name", raw: `{"command":"` + bin + `","serverName":"a b"}`, wantErr: "serverName"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			_, _, err := opencode.ParseConfig(json.RawMessage(test.raw))
			switch {
			case test.wantErr == "" && err != nil:
				t.Fatalf("ParseConfig(%s) = %v, want success", test.raw, err)
			case test.wantErr != "" && (err == nil || !strings.Contains(err.Error(), test.wantErr)):
				t.Fatalf("ParseConfig(%s) = %v, want an error containing %q", test.raw, err, test.wantErr)
			}
		})
	}
}

// TestParseConfigDefaults: the defaults of an empty configuration, and
// the driver's own variables dropped from the default inherited list
// (they are the session's).
func TestParseConfigDefaults(t *testing.T) {
	bin := agenttest.Binary(t, "opencode")
	c, path, err := opencode.ParseConfig(json.RawMessage(`{"command":"` + bin + `"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := filepath.Abs(bin); path != want {
		t.Errorf("path %q, want %q", path, want)
	}
	if c.ServerName != agentproc.DefaultServerName || c.Grace != agentproc.Duration(agentproc.DefaultGrace) || c.StartTimeout != agentproc.Duration(agentproc.DefaultStartTimeout) {
		t.Errorf("defaults %+v", c.Config)
	}
	var want []string
	for _, name := range agentproc.DefaultInheritEnv {
		if name != "HOME" && name != "TMPDIR" {
			want = append(want, name)
		}
	}
	if diff := cmp.Diff(want, c.InheritEnv); diff != "" {
		t.Errorf("inheritEnv (-want +got):\n%s", diff)
	}
}

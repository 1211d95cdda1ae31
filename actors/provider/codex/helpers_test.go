package codex_test

import (
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/codex"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
)

// deadline bounds every wait; a correct driver is never near it.
const deadline = 45 * time.Second

// apiKeyVar is the runtime's variable the instances take the model key
// from (Config.APIKeyEnv), and apiKey its value: a secret like the token.
const (
	apiKeyVar = "CODEX_TEST_MODEL_KEY"
	apiKey    = "model-key-3d5e7f"
)

// env is a runtime on loopback with codex instances whose model is the
// scripted one, its log captured.
type env struct {
	*drivertest.Env
	home string // HOME of every agent
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{home: agenttest.Home(t)}
	e.Env = drivertest.New(t, drivertest.Options{
		Kind: codex.Kind, Factory: codex.Factory, Config: e.codexConfig,
		Started: "codex app-server started", Deadline: deadline,
		APIKeyVar: apiKeyVar, APIKey: apiKey,
	})
	return e
}

// codexConfig is a codex instance's configuration against the scripted model,
// its sessions' directories under configDir.
func (e *env) codexConfig(de *drivertest.Env, configDir string) map[string]any {
	return map[string]any{
		"command":    agenttest.Binary(de.T, "codex"),
		"inheritEnv": []string{"PATH"},
		"env":        map[string]string{"HOME": e.home},
		"configDir":  configDir,
		"baseURL":    de.Model.URL + "/v1",
		"model":      "scripted",
		"apiKeyEnv":  apiKeyVar,
		"grace":      "3s",
	}
}

// waitGone waits until no process is left in group pgid.
func waitGone(t *testing.T, what string, pgid int) {
	t.Helper()
	drivertest.WaitGone(t, what, pgid, deadline)
}

// codexBinary is the pinned Codex CLI.
func codexBinary(t *testing.T) string { return agenttest.Binary(t, "codex") }

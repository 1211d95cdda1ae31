//go:build linux

package agenttest_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

// The smoke tests run each pinned CLI once, in its one-shot mode, with no
// MCP server, against the scripted model: the wire formats are right if
// the CLI prints "ok: hello". The commands and environments are the ones
// measured in the design notes (agents.md, "What each CLI sent to a
// scripted model").

// runCLI runs bin with args in dir, with env only (and PATH, for node),
// in its own process group, killed whole when it ends or times out; it
// returns stdout and stderr and fails the test if bin fails.
func runCLI(t *testing.T, dir, bin string, env []string, args ...string) (stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = nil // /dev/null: codex exec reads a prompt from a non-terminal stdin otherwise
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // whatever it left running in its group
	}
	t.Logf("%s ran %v", filepath.Base(bin), time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatalf("%s %q: %v\nstdout:\n%s\nstderr:\n%s", bin, args, err, out.String(), errb.String())
	}
	return out.String(), errb.String()
}

// cli is how a test runs one CLI in one-shot mode against a model: in
// dir, with the environment and the arguments for a prompt.
type cli struct {
	name   string
	format string                                                            // the wire format it speaks
	setup  func(t *testing.T, m *agenttest.Model, dir string) (env []string) // writes its config into dir or HOME
	args   func(prompt string) []string
	// read is the call of one of its built-in tools that reads file.
	read func(file string) string
}

var clis = []cli{
	{
		name: "codex", format: agenttest.FormatResponses,
		setup: func(t *testing.T, m *agenttest.Model, dir string) []string {
			home := agenttest.Home(t)
			codexHome := filepath.Join(home, ".codex")
			if err := os.Mkdir(codexHome, 0o700); err != nil {
				t.Fatal(err)
			}
			return []string{"HOME=" + home, "CODEX_HOME=" + codexHome, "FAKE_MODEL_KEY=dummy-key",
				"MODEL_URL=" + m.URL} // read by args, not by codex
		},
		// danger-full-access: exec_command runs without a sandbox, which
		// needs user namespaces a container may not have.
		args: func(prompt string) []string {
			return []string{"exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "-m", "fake-model",
				"-c", "model_provider=fake",
				"-c", `model_providers.fake={name="fake",base_url="{MODEL_URL}/v1",wire_api="responses",env_key="FAKE_MODEL_KEY"}`,
				prompt}
		},
		read: func(file string) string { return `call exec_command {"cmd":"cat ` + file + `"}` },
	},
	{
		name: "claude", format: agenttest.FormatMessages,
		setup: func(t *testing.T, m *agenttest.Model, dir string) []string {
			return []string{"HOME=" + agenttest.Home(t), "ANTHROPIC_BASE_URL=" + m.URL, "ANTHROPIC_API_KEY=dummy-key",
				"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"}
		},
		args: func(prompt string) []string {
			return []string{"-p", prompt, "--strict-mcp-config", "--allowedTools", "Read"}
		},
		read: func(file string) string { return `call Read {"file_path":"` + file + `"}` },
	},
	{
		name: "opencode", format: agenttest.FormatChat,
		setup: func(t *testing.T, m *agenttest.Model, dir string) []string {
			cfg := `{"$schema": "https://opencode.ai/config.json",
 "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake model",
   "options": {"baseURL": "` + m.URL + `/v1", "apiKey": "dummy-key"},
   "models": {"fake-model": {"name": "Fake model", "tool_call": true}}}},
 "model": "fake/fake-model", "small_model": "fake/fake-model"}`
			if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			home := agenttest.Home(t)
			return []string{"HOME=" + home,
				"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_DATA_HOME=" + filepath.Join(home, ".local/share"),
				"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"), "XDG_STATE_HOME=" + filepath.Join(home, ".local/state"),
				"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
				"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_CLAUDE_CODE=1"}
		},
		args: func(prompt string) []string { return []string{"run", "-m", "fake/fake-model", prompt} },
		read: func(file string) string { return `call read {"filePath":"` + file + `"}` },
	},
}

// TestCLIs runs each pinned CLI in one-shot mode (codex exec, claude -p,
// opencode run) against the model with no MCP server: "hello" comes back
// "ok: hello" (the format's text stream), and the call of a built-in tool
// that reads a file comes back "saw: …" with the file's text, the
// result recorded (the format's tool-call loop). Every request the CLI
// sent is in its format.
func TestCLIs(t *testing.T) {
	for _, c := range clis {
		t.Run(c.name, func(t *testing.T) {
			bin := agenttest.Binary(t, c.name)
			for _, test := range []struct {
				name, want string
				result     bool
			}{
				{"text", "ok: hello", false},
				{"tool", "saw: ", true},
			} {
				t.Run(test.name, func(t *testing.T) {
					m := agenttest.NewModel(t)
					dir := t.TempDir()
					env := c.setup(t, m, dir)
					prompt := "hello"
					if test.result {
						// In the working directory: OpenCode asks before it reads outside.
						note := filepath.Join(dir, "note.txt")
						if err := os.WriteFile(note, []byte("the note says 42\n"), 0o600); err != nil {
							t.Fatal(err)
						}
						prompt = c.read(note)
					}
					args := c.args(prompt)
					for i := range args {
						args[i] = strings.ReplaceAll(args[i], "{MODEL_URL}", m.URL)
					}
					stdout, stderr := runCLI(t, dir, bin, env, args...)
					if !strings.Contains(stdout, test.want) {
						t.Errorf("%s printed\n%s\nstderr:\n%s\nwant %q", c.name, stdout, stderr, test.want)
					}
					results := m.ToolResults()
					if test.result && (len(results) != 1 || !strings.Contains(results[0], "the note says 42")) {
						t.Errorf("ToolResults = %q, want the note's text", results)
					}
					if !test.result && len(results) != 0 {
						t.Errorf("ToolResults = %q, want none", results)
					}
					reqs := m.Requests()
					if len(reqs) == 0 {
						t.Errorf("%s sent no request", c.name)
					}
					for _, r := range reqs {
						if r.Format != c.format {
							t.Errorf("%s sent %s %s, want only %s requests", c.name, r.Format, r.Path, c.format)
						}
					}
				})
			}
		})
	}
}

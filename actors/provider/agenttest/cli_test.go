//go:build linux

package agenttest_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

// The smoke tests run each pinned CLI in its one-shot mode against the
// scripted model, with the commands and environments measured with the
// real CLIs for the design notes: the wire formats are right if the CLI
// prints the model's answer.

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
// dir, with the environment and the arguments for a prompt; mcpURL, if
// set, is the MCP server "rt" it is given.
type cli struct {
	name   string
	format string // the wire format it speaks
	run    func(t *testing.T, m *agenttest.Model, dir, mcpURL, prompt string) (env, args []string)
	// read is the call of one of its built-in tools that reads file.
	read func(file string) string
}

var clis = []cli{
	{
		name: "codex", format: agenttest.FormatResponses,
		run: func(t *testing.T, m *agenttest.Model, dir, mcpURL, prompt string) ([]string, []string) {
			home := agenttest.Home(t)
			codexHome := filepath.Join(home, ".codex")
			if err := os.Mkdir(codexHome, 0o700); err != nil {
				t.Fatal(err)
			}
			// danger-full-access: exec_command runs without a sandbox,
			// which needs user namespaces a container may not have.
			args := []string{"exec", "--skip-git-repo-check", "--sandbox", "danger-full-access", "-m", "fake-model",
				"-c", "model_provider=fake",
				"-c", `model_providers.fake={name="fake",base_url="` + m.URL + `/v1",wire_api="responses",env_key="FAKE_MODEL_KEY"}`}
			if mcpURL != "" {
				args = append(args, "-c", `mcp_servers.rt.url="`+mcpURL+`"`, "-c", `mcp_servers.rt.default_tools_approval_mode="approve"`)
			}
			return []string{"HOME=" + home, "CODEX_HOME=" + codexHome, "FAKE_MODEL_KEY=dummy-key"}, append(args, prompt)
		},
		read: func(file string) string { return `call exec_command {"cmd":"cat ` + file + `"}` },
	},
	{
		name: "claude", format: agenttest.FormatMessages,
		run: func(t *testing.T, m *agenttest.Model, dir, mcpURL, prompt string) ([]string, []string) {
			// The prompt right after -p: --allowedTools takes every word after it.
			args := []string{"-p", prompt, "--strict-mcp-config"}
			if mcpURL != "" {
				cfg := filepath.Join(dir, "mcp.json")
				if err := os.WriteFile(cfg, []byte(`{"mcpServers":{"rt":{"type":"http","url":"`+mcpURL+`"}}}`), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--mcp-config", cfg)
			}
			args = append(args, "--allowedTools", "Read", "mcp__rt__note_post")
			return []string{"HOME=" + agenttest.Home(t), "ANTHROPIC_BASE_URL=" + m.URL, "ANTHROPIC_API_KEY=dummy-key",
				"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1"}, args
		},
		read: func(file string) string { return `call Read {"file_path":"` + file + `"}` },
	},
	{
		name: "opencode", format: agenttest.FormatChat,
		run: func(t *testing.T, m *agenttest.Model, dir, mcpURL, prompt string) ([]string, []string) {
			mcp := ""
			if mcpURL != "" {
				mcp = `, "mcp": {"rt": {"type": "remote", "url": "` + mcpURL + `", "enabled": true, "oauth": false}}`
			}
			cfg := `{"$schema": "https://opencode.ai/config.json",
 "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake model",
   "options": {"baseURL": "` + m.URL + `/v1", "apiKey": "dummy-key"},
   "models": {"fake-model": {"name": "Fake model", "tool_call": true}}}},
 "model": "fake/fake-model", "small_model": "fake/fake-model"` + mcp + `}`
			if err := os.WriteFile(filepath.Join(dir, "opencode.json"), []byte(cfg), 0o600); err != nil {
				t.Fatal(err)
			}
			home := agenttest.Home(t)
			return []string{"HOME=" + home,
					"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"), "XDG_DATA_HOME=" + filepath.Join(home, ".local/share"),
					"XDG_CACHE_HOME=" + filepath.Join(home, ".cache"), "XDG_STATE_HOME=" + filepath.Join(home, ".local/state"),
					"OPENCODE_DISABLE_AUTOUPDATE=1", "OPENCODE_DISABLE_MODELS_FETCH=1", "OPENCODE_DISABLE_DEFAULT_PLUGINS=1",
					"OPENCODE_DISABLE_LSP_DOWNLOAD=1", "OPENCODE_DISABLE_SHARE=1", "OPENCODE_DISABLE_CLAUDE_CODE=1"},
				[]string{"run", "-m", "fake/fake-model", prompt}
		},
		read: func(file string) string { return `call read {"filePath":"` + file + `"}` },
	},
}

// noteServer is an MCP server (Streamable HTTP, the go-sdk's) with one
// tool, note_post, that answers "posted <text>"; it returns its URL and
// the texts it was called with.
func noteServer(t *testing.T) (string, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var calls []string
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	type in struct {
		Text string `json:"text"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "note_post", Description: "Post a note."},
		func(_ context.Context, _ *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			calls = append(calls, a.Text)
			mu.Unlock()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "posted " + a.Text}}}, nil, nil
		})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(func() {
		hs.CloseClientConnections() // a client's GET stream would hold Close
		hs.Close()
		for ss := range srv.Sessions() { // Claude Code and OpenCode never send DELETE
			_ = ss.Close()
		}
	})
	return hs.URL + "/mcp", func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(calls)
	}
}

// TestCLIs runs each pinned CLI in one-shot mode (codex exec, claude -p,
// opencode run) against the model:
//   - text: "hello" comes back "ok: hello" (the format's text stream);
//   - tool: the call of a built-in tool that reads a file comes back
//     "saw: …" with the file's text, the result recorded (the format's
//     tool-call loop);
//   - mcp: the call of an MCP server's tool (Codex's namespace, Claude
//     Code's ToolSearch first, OpenCode's <server>_<tool>) reaches the
//     server and its result comes back.
//
// Every request the CLI sent is in its format.
func TestCLIs(t *testing.T) {
	for _, c := range clis {
		t.Run(c.name, func(t *testing.T) {
			bin := agenttest.Binary(t, c.name)
			for _, test := range []string{"text", "tool", "mcp"} {
				t.Run(test, func(t *testing.T) {
					m := agenttest.NewModel(t)
					dir := t.TempDir()
					prompt, want, wantResult, mcpURL := "hello", "ok: hello", "", ""
					var mcpCalls func() []string
					switch test {
					case "tool":
						// In the working directory: OpenCode asks before it reads outside.
						note := filepath.Join(dir, "note.txt")
						if err := os.WriteFile(note, []byte("the note says 42\n"), 0o600); err != nil {
							t.Fatal(err)
						}
						prompt, want, wantResult = c.read(note), "saw: ", "the note says 42"
					case "mcp":
						mcpURL, mcpCalls = noteServer(t)
						prompt, want, wantResult = `call note_post {"text":"hi"}`, "saw: posted hi", "posted hi"
					}
					env, args := c.run(t, m, dir, mcpURL, prompt)
					stdout, stderr := runCLI(t, dir, bin, env, args...)
					if !strings.Contains(stdout, want) {
						t.Errorf("%s printed\n%s\nstderr:\n%s\nwant %q", c.name, stdout, stderr, want)
					}
					results := m.ToolResults()
					if wantResult != "" && (len(results) != 1 || !strings.Contains(results[0], wantResult)) {
						t.Errorf("ToolResults = %q, want one holding %q", results, wantResult)
					}
					if wantResult == "" && len(results) != 0 {
						t.Errorf("ToolResults = %q, want none", results)
					}
					if mcpCalls != nil {
						if got := mcpCalls(); !slices.Equal(got, []string{"hi"}) {
							t.Errorf("the MCP server's note_post was called with %q, want [hi]", got)
						}
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

package clients

import (
	"bufio"
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// everything builds examples/everything in the runtime's own module
// ("../..") and starts it on a loopback port; it returns its endpoint and
// a token that may call every fixture. The process is stopped with
// SIGTERM, by its PID, at cleanup.
func everything(t *testing.T) (url, token string) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "everything")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // detects a hang only
	defer cancel()
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./examples/everything")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./examples/everything: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-listen", "127.0.0.1:0")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			t.Errorf("everything exited with %v\n%s", err, stderr.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("everything printed no announcement: %v\n%s", err, stderr.String())
	}
	var a struct{ URL, Token string }
	if err := json.Unmarshal([]byte(line), &a); err != nil || a.URL == "" || a.Token == "" {
		t.Fatalf("announcement %q: %v", line, err)
	}
	return a.URL, a.Token
}

// TestClientMatrixEverything: the go-sdk and mcp-go clients, each in both
// eras, against examples/everything — the features a client has a
// handler for: tools with text, errors, structured content under an
// outputSchema, an act tool, progress and logging, sampling and
// elicitation asked during a call (a server request in a 2025 session, an
// input_required round in 2026-07-28), a static resource and a template,
// a prompt with arguments and its completion.
func TestClientMatrixEverything(t *testing.T) {
	url, token := everything(t)
	for _, c := range clients {
		t.Run(c.name+"/"+c.version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // detects a hang only
			defer cancel()
			cl := c.connect(t, url, token, c.version)
			defer cl.close()
			if got := cl.version(); got != c.version {
				t.Errorf("negotiated %q, want %q", got, c.version)
			}
			t.Run("tools/list", func(t *testing.T) {
				names, err := cl.tools(ctx)
				for _, want := range []string{"test_simple_text", "test_error_handling", "test_tool_with_progress", "test_tool_with_logging", "test_sampling", "test_elicitation", "report", "deploy"} {
					if err != nil || !slices.Contains(names, want) {
						t.Errorf("tools (%v): no %s among %d", err, want, len(names))
					}
				}
			})
			t.Run("text", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "test_simple_text", nil, false)
				if err != nil || isErr || text != "This is a simple text response for testing." {
					t.Errorf("test_simple_text = %q (isError %v), %v", text, isErr, err)
				}
			})
			t.Run("isError", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "test_error_handling", nil, false)
				if err != nil || !isErr || text != "This tool intentionally returns an error for testing" {
					t.Errorf("test_error_handling = %q (isError %v), %v; want a tool error", text, isErr, err)
				}
			})
			t.Run("outputSchema", func(t *testing.T) {
				_, sc, isErr, _, err := cl.call(ctx, "report", map[string]any{"text": "ship the release today"}, false)
				if err != nil || isErr || sc != `{"first":"ship","words":4}` {
					t.Errorf("report = %s (isError %v), %v", sc, isErr, err)
				}
			})
			t.Run("act", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "deploy", nil, false)
				if err != nil || isErr || text != "deployed main" {
					t.Errorf("deploy = %q (isError %v), %v", text, isErr, err)
				}
			})
			t.Run("progress", func(t *testing.T) {
				text, _, isErr, n, err := cl.call(ctx, "test_tool_with_progress", nil, true)
				if err != nil || isErr || text != "Progress test completed" || n != 3 {
					t.Errorf("test_tool_with_progress = %q (isError %v), %d progress notifications, %v; want 3", text, isErr, n, err)
				}
			})
			t.Run("logging", func(t *testing.T) {
				if err := cl.askLogs(ctx); err != nil {
					t.Fatalf("asking for logs: %v", err)
				}
				before := cl.logged()
				text, _, isErr, _, err := cl.call(ctx, "test_tool_with_logging", nil, false)
				// Both clients run notification handlers apart from the
				// response, which can come first: wait for the three.
				for deadline := time.Now().Add(5 * time.Second); cl.logged()-before < 3 && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				if n := cl.logged() - before; err != nil || isErr || text != "Tool with logging executed successfully" || n != 3 {
					t.Errorf("test_tool_with_logging = %q (isError %v), %d log messages, %v; want 3", text, isErr, n, err)
				}
			})
			t.Run("sampling", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "test_sampling", map[string]any{"prompt": "Say hello"}, false)
				if err != nil || isErr || text != "LLM response: "+sampledText {
					t.Errorf("test_sampling = %q (isError %v), %v", text, isErr, err)
				}
			})
			t.Run("elicitation", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "test_elicitation", map[string]any{"message": "Who are you?"}, false)
				if err != nil || isErr || text != "Elicitation result: action=accept, content=map[username:"+elicitedName+"]" {
					t.Errorf("test_elicitation = %q (isError %v), %v", text, isErr, err)
				}
			})
			t.Run("resources/read", func(t *testing.T) {
				if text, err := cl.read(ctx, "test://static-text"); err != nil || text != "This is the content of the static text resource." {
					t.Errorf("read test://static-text = %q, %v", text, err)
				}
				if text, err := cl.read(ctx, "test://template/42/data"); err != nil || text != `{"id":"42","templateTest":true,"data":"Data for ID: 42"}` {
					t.Errorf("read test://template/42/data = %q, %v", text, err)
				}
			})
			t.Run("prompts/get", func(t *testing.T) {
				text, err := cl.prompt(ctx, "test_prompt_with_arguments", map[string]string{"arg1": "a", "arg2": "b"})
				if err != nil || text != "Prompt with arguments: arg1='a', arg2='b'" {
					t.Errorf("prompt = %q, %v", text, err)
				}
			})
			t.Run("completion/complete", func(t *testing.T) {
				vals, err := cl.complete(ctx, "test_prompt_with_arguments", "arg1", "test")
				if err != nil || !slices.Equal(vals, []string{"testValue1", "testValue2"}) {
					t.Errorf("complete arg1=test = %q, %v", vals, err)
				}
			})
		})
	}
}

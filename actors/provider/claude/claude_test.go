//go:build linux

// The tests run the real Claude Code (e2e/agents, `make test-deps`) against
// a real runtime on loopback and the scripted model, and look at its
// processes through /proc, hence Linux only.

package claude_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/claude"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// sessionDir is the one private directory under configDir.
func sessionDir(t *testing.T, configDir string) string {
	t.Helper()
	ents, err := os.ReadDir(configDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "claude-") {
		t.Fatalf("configDir holds %v, want one claude-* directory", ents)
	}
	return filepath.Join(configDir, ents[0].Name())
}

// mcpAuthorization is the Authorization header the session's mcp.json
// gives the runtime's server.
func mcpAuthorization(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "mcp.json"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatalf("mcp.json: %v", err)
	}
	s, ok := c.MCPServers["mcpruntime"]
	if len(c.MCPServers) != 1 || !ok || s.Type != "http" {
		t.Fatalf("mcp.json %s, want the one http server mcpruntime", b)
	}
	return s.Headers["Authorization"]
}

// TestOpen: an open returns once Claude Code's MCP connection to the
// runtime is up under the session's credential; the token is in the
// session's mcp.json (0600, in the 0700 private directory) and nowhere
// else: not in argv, not in the environment, not in any other file of the
// private directory (HOME, CLAUDE_CONFIG_DIR, XDG), not in a log record;
// the model key is in the environment as ANTHROPIC_API_KEY only.
func TestOpen(t *testing.T) {
	e := newEnv(t)
	configDir := t.TempDir()
	e.Register("A", "T", configDir, nil)
	start := time.Now()
	ps, o := e.Open("T", "A")
	took := time.Since(start)
	if !drivertest.HasStatus(o.Events, driver.StatusConnected) {
		t.Fatalf("no connected status; statuses %+v", o.Events.Statuses())
	}
	pid := e.LastPid(ps.ID)
	pids := drivertest.Group(pid)
	t.Logf("measured: open → connected %v; claude tree %d processes, RSS %d KiB", took.Round(time.Millisecond), len(pids), drivertest.RSSKiB(pids))

	if e.requestsWith(ps.Authorization) == 0 {
		t.Errorf("the endpoint got no request with the session's credential")
	}

	dir := sessionDir(t, configDir)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("session directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	mcpFile := filepath.Join(dir, "mcp.json")
	if fi, err := os.Stat(mcpFile); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mcp.json: %v, %v; want mode 0600", fi.Mode(), err)
	}
	if got := mcpAuthorization(t, dir); got != ps.Authorization {
		t.Errorf("mcp.json holds another Authorization than the session's")
	}

	tok := drivertest.Token(ps.Authorization)
	env := drivertest.Environ(t, pid)
	vars := strings.Split(env, "\x00")
	for _, want := range []string{"ANTHROPIC_API_KEY=" + apiKey, "HOME=" + filepath.Join(dir, "home"),
		"CLAUDE_CONFIG_DIR=" + filepath.Join(dir, "home", ".claude"), "ANTHROPIC_BASE_URL=" + e.Model.URL,
		"DISABLE_AUTOUPDATER=1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1"} {
		if !slices.Contains(vars, want) {
			t.Errorf("claude's environment lacks %s", strings.SplitN(want, "=", 2)[0])
		}
	}
	for _, v := range vars {
		if strings.HasPrefix(v, apiKeyVar+"=") {
			t.Errorf("claude's environment holds the runtime's %s", apiKeyVar)
		}
	}
	if strings.Contains(env, tok) {
		t.Error("claude's environment holds the token")
	}
	if leaks := agenttest.Leaks(tok, []string{mcpFile}, []string{configDir, os.TempDir()}, e.Logs.Text()); len(leaks) > 0 {
		t.Errorf("token found in %v", leaks)
	}
	if leaks := agenttest.Leaks(apiKey, nil, []string{configDir}, e.Logs.Text()); len(leaks) > 0 {
		t.Errorf("model key found in %v", leaks)
	}
}

// TestOpenRefused: an open whose token the endpoint refuses fails with
// Claude Code's own words for it (its mcp_status error), reports
// needs_auth, and leaves no process and no directory behind.
func TestOpenRefused(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	logs := &drivertest.Capture{}
	d, err := claude.Factory(slog.New(logs))("X", e.Config(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	for _, test := range []struct {
		name, endpoint, authorization, want, state string
	}{
		{"unknown token", e.Endpoint, "Bearer mcprt_not-a-token", "HTTP 401", driver.StatusNeedsAuth},
		{"no server there", "http://127.0.0.1:9/mcp", "Bearer mcprt_not-a-token", "MCP server \"mcpruntime\" failed", driver.StatusFailed},
	} {
		t.Run(test.name, func(t *testing.T) {
			ev := &providertest.Events{}
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			id := "ps_" + strings.ReplaceAll(test.name, " ", "_")
			_, err = d.Open(ctx, driver.OpenRequest{SessionID: id, Instance: "X", Events: ev, Binding: driver.Binding{
				Thread: "T", Instance: "X", Endpoint: test.endpoint, Authorization: test.authorization,
			}})
			if err == nil || !strings.Contains(err.Error(), test.want) {
				t.Fatalf("Open: %v, want Claude Code's error with %q", err, test.want)
			}
			t.Logf("open error: %v", err)
			if !drivertest.HasStatus(ev, test.state) {
				t.Errorf("statuses %+v, want %s", ev.Statuses(), test.state)
			}
			for _, r := range logs.Find("claude started", "session", id) {
				waitGone(t, "after the refused open", drivertest.Atoi(t, r.Attrs["pid"]))
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("configDir holds %v after the refused open", ents)
			}
			if len(ev.Deaths()) != 0 {
				t.Errorf("a refused open reported Died: %v", ev.Deaths())
			}
		})
	}
}

// TestTurn: a run started with an input is Claude Code's turn: it posts
// to the thread under the session's credential (after ToolSearch loads
// the deferred tool), reported as turn_started, tool_call and tool_result
// (ToolSearch's, then thread_post's), message and a completed end, which
// ends the run; once the run ended, the same call is refused.
func TestTurn(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	ps, o := e.Open("T", "A")
	var took []time.Duration
	run, end, d := e.RunTurn(o, "T", "A", `call thread_post {"text":"hi"}`)
	took = append(took, d)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn ended %+v, want completed", end)
	}
	e.WaitNoRun("T") // the turn's end ended the run
	msgs := e.Messages("T")
	if len(msgs) != 1 || msgs[0].Text != "hi" || msgs[0].Author != "cred:"+ps.CredentialID {
		t.Fatalf("thread messages %+v, want one \"hi\" by cred:%s", msgs, ps.CredentialID)
	}
	want := []string{driver.EventTurnStarted, driver.EventToolCall, driver.EventToolResult,
		driver.EventToolCall, driver.EventToolResult, driver.EventMessage}
	if got := drivertest.Kinds(o.Events, run); !slices.Equal(got, want) {
		t.Errorf("events of the turn %v, want %v", got, want)
	}
	var calls, results []driver.Event
	for _, ev := range o.Events.Events() {
		switch {
		case ev.Turn != run:
		case ev.Kind == driver.EventToolCall:
			calls = append(calls, ev)
		case ev.Kind == driver.EventToolResult:
			results = append(results, ev)
		case ev.Kind == driver.EventMessage && !strings.HasPrefix(ev.Text, "saw: "):
			t.Errorf("message %q, want the model's answer", ev.Text)
		}
	}
	if len(calls) == 2 && (calls[0].Tool != "ToolSearch" || calls[1].Tool != "mcp__mcpruntime__thread_post" || string(calls[1].Data) != `{"text":"hi"}`) {
		t.Errorf("tool calls %+v, want ToolSearch then mcp__mcpruntime__thread_post {\"text\":\"hi\"}", calls)
	}
	if len(results) == 2 && (results[1].Tool != "mcp__mcpruntime__thread_post" || results[1].Error || !strings.Contains(results[1].Text, "hi")) {
		t.Errorf("tool result %+v, want thread_post's posted message", results[1])
	}

	// Turns outside any run (sent to the session directly): the call is
	// refused; the model sees the runtime's text.
	end, d = e.Turn(o, "T", "after-the-run", `call thread_post {"text":"late"}`)
	took = append(took, d)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn after the run ended %+v, want completed (with a refused call)", end)
	}
	res := e.Model.ToolResults()
	if len(res) == 0 || !strings.Contains(res[len(res)-1], "not own an active run") {
		t.Errorf("tool results the model saw %q, want the last to be the runtime's refusal", res)
	}
	if msgs := e.Messages("T"); len(msgs) != 1 {
		t.Errorf("thread messages %+v after the refused call, want still one", msgs)
	}
	for i := range 3 {
		end, d = e.Turn(o, "T", fmt.Sprintf("plain-%d", i), "hello")
		if end.Outcome != driver.TurnCompleted {
			t.Fatalf("plain turn %+v", end)
		}
		took = append(took, d)
	}
	t.Logf("measured: turn round trips (the first two with an MCP tool call, then text only) %v", took)
}

// TestInterrupt: ending a run whose turn the model is still answering
// interrupts the turn (Runtime.EndRun → Interrupt → control_request
// interrupt); its end is reported interrupted, and the next turn runs.
func TestInterrupt(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	_, o := e.Open("T", "A")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	var took []time.Duration
	for range 3 {
		run, err := e.RT.StartTurn(ctx, "T", "A", "sleep 30s")
		if err != nil {
			t.Fatal(err)
		}
		if !o.Events.Wait(deadline, func(ev *providertest.Events) bool {
			return slices.Contains(drivertest.Kinds(ev, run), driver.EventTurnStarted)
		}) {
			t.Fatal("the turn did not start")
		}
		start := time.Now()
		if err := e.RT.EndRun(ctx, "T", run); err != nil {
			t.Fatal(err)
		}
		end, ok := o.Events.TurnEnd(run, deadline)
		if !ok || end.Outcome != driver.TurnInterrupted {
			t.Fatalf("turn end %+v (%v), want interrupted", end, ok)
		}
		took = append(took, time.Since(start))
		e.WaitNoRun("T")
	}
	t.Logf("measured: EndRun → TurnEnded interrupted %v", took)
	if _, end, _ := e.RunTurn(o, "T", "A", "hello"); end.Outcome != driver.TurnCompleted {
		t.Errorf("turn after the interrupt %+v, want completed", end)
	}
}

// messagesRequest is the part of an Anthropic Messages request the tests
// read.
type messagesRequest struct {
	Messages []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"messages"`
}

// userTexts returns the texts of a Messages request's user messages.
func userTexts(t *testing.T, body []byte) []string {
	t.Helper()
	var r messagesRequest
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("model request: %v", err)
	}
	var out []string
	for _, m := range r.Messages {
		if m.Role != "user" {
			continue
		}
		var s string
		if json.Unmarshal(m.Content, &s) == nil {
			out = append(out, s)
			continue
		}
		var parts []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(m.Content, &parts) == nil {
			for _, p := range parts {
				if p.Type == "text" {
					out = append(out, p.Text)
				}
			}
		}
	}
	return out
}

// TestRotate: a rotation hands the running Claude Code the new token
// (mcp.json rewritten, mcp_set_servers on stdin): the same process, the
// conversation kept (the next model request carries the first turn); the
// agent's MCP session under the new credential is up before Rotate
// returns, the old credential revoked after; the next call lands under the
// new credential, and neither token is anywhere but mcp.json.
func TestRotate(t *testing.T) {
	e := newEnv(t)
	configDir := t.TempDir()
	e.Register("A", "T", configDir, nil)
	ctx := context.Background()
	ps, o := e.Open("T", "A")
	first := `call thread_post {"text":"one"}`
	if _, end, _ := e.RunTurn(o, "T", "A", first); end.Outcome != driver.TurnCompleted {
		t.Fatalf("first turn %+v", end)
	}
	e.WaitNoRun("T")
	pid := e.LastPid(ps.ID)
	dir := sessionDir(t, configDir)

	var took []time.Duration
	prev := ps
	var cred mcpruntime.Credential
	oldAfter := map[string]int{} // old Authorization → how many requests it had made when its Rotate returned
	for range 3 {
		before := len(e.Model.Requests())
		start := time.Now()
		var err error
		cred, err = e.RT.Rotate(ctx, "T", "A")
		if err != nil {
			t.Fatalf("Rotate: %v", err)
		}
		took = append(took, time.Since(start))
		if got := e.LastPid(ps.ID); got != pid {
			t.Fatalf("claude %d was replaced by %d: want the same process", pid, got)
		}
		// Claude Code connected with the new token before Rotate returned
		// (and the runtime revoked the old one).
		if e.requestsWith(cred.Authorization) == 0 {
			t.Errorf("Rotate returned before the endpoint got a request with the new credential %s", cred.ID)
		}
		oldAfter[prev.Authorization] = len(e.requestLog(prev.Authorization))
		if c := e.Credential("T", prev.CredentialID); c.State != "revoked" {
			t.Errorf("old credential %+v, want revoked", c)
		}
		if got := mcpAuthorization(t, dir); got != cred.Authorization {
			t.Error("mcp.json does not hold the new token")
		}
		if len(e.Model.Requests()) != before {
			t.Error("the rotation sent a model request")
		}
		prev = mcpruntime.ProviderSession{CredentialID: cred.ID, Authorization: cred.Authorization}
	}
	t.Logf("measured: rotation (mcp.json + mcp_set_servers + mcp_status connected) %v", took)

	before := len(e.Model.Requests())
	if _, end, _ := e.RunTurn(o, "T", "A", `call thread_post {"text":"two"}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn after the rotation %+v", end)
	}
	msgs := e.Messages("T")
	if len(msgs) != 2 || msgs[1].Text != "two" || msgs[1].Author != "cred:"+cred.ID {
		t.Fatalf("thread messages %+v, want \"two\" by cred:%s", msgs, cred.ID)
	}
	// After its rotation an old token may come back only as the replaced
	// client's notification stream reconnecting once, refused, while
	// Claude Code tears that client down (measured under load); nothing
	// else, nothing that worked.
	for auth, n := range oldAfter {
		for _, r := range e.requestLog(auth)[n:] {
			if r != "POST subscriptions/listen 401" {
				t.Errorf("an old token was sent after its rotation: %s (all: %q)", r, e.requestLog(auth))
			}
		}
	}
	reqs := e.Model.Requests()
	if len(reqs) <= before {
		t.Fatal("no model request after the rotation")
	}
	if texts := userTexts(t, reqs[len(reqs)-1].Body); !slices.Contains(texts, first) {
		t.Errorf("the request after the rotation has user texts %q, want the first turn's %q among them", texts, first)
	}
	for _, secret := range []string{drivertest.Token(ps.Authorization), drivertest.Token(cred.Authorization)} {
		if leaks := agenttest.Leaks(secret, []string{filepath.Join(dir, "mcp.json")}, []string{configDir, os.TempDir()}, e.Logs.Text()); len(leaks) > 0 {
			t.Errorf("token found in %v", leaks)
		}
	}
	if env := drivertest.Environ(t, pid); strings.Contains(env, drivertest.Token(cred.Authorization)) {
		t.Error("claude's environment holds the token")
	}
}

// TestRotateDuringTurn: Claude Code takes mcp_set_servers while a turn
// runs: the rotation does not wait for the turn nor interrupt it; the
// turn completes, and the next call lands under the new credential.
func TestRotateDuringTurn(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	ctx := context.Background()
	_, o := e.Open("T", "A")
	slow, err := e.RT.StartTurn(ctx, "T", "A", "sleep 3s")
	if err != nil {
		t.Fatal(err)
	}
	if !o.Events.Wait(deadline, func(ev *providertest.Events) bool {
		return slices.Contains(drivertest.Kinds(ev, slow), driver.EventTurnStarted)
	}) {
		t.Fatal("the turn did not start")
	}
	start := time.Now()
	cred, err := e.RT.Rotate(ctx, "T", "A")
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	t.Logf("measured: rotation during a turn %v", time.Since(start).Round(time.Millisecond))
	if _, ended := o.Events.TurnEnd(slow, 0); ended {
		t.Log("the turn ended before the rotation returned")
	}
	end, ok := o.Events.TurnEnd(slow, deadline)
	if !ok || end.Outcome != driver.TurnCompleted {
		t.Fatalf("running turn's end %+v (%v), want completed", end, ok)
	}
	e.WaitNoRun("T")
	if _, end, _ := e.RunTurn(o, "T", "A", `call thread_post {"text":"after"}`); end.Outcome != driver.TurnCompleted {
		t.Errorf("turn after the rotation %+v, want completed", end)
	}
	if msgs := e.Messages("T"); len(msgs) != 1 || msgs[0].Author != "cred:"+cred.ID {
		t.Errorf("thread messages %+v, want one by cred:%s", msgs, cred.ID)
	}
}

// TestCloseAndDied: releasing a session ends Claude Code's whole process
// group and removes its directory, with no death reported; a Claude Code
// killed from outside is reported with Died.
func TestCloseAndDied(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.Register("A", "T", dir, nil)
	ps, o := e.Open("T", "A")
	pid := e.LastPid(ps.ID)
	start := time.Now()
	if err := e.RT.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "after the release", pid)
	t.Logf("measured: release → process group gone %v", time.Since(start).Round(time.Millisecond))
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("configDir holds %v after the release", ents)
	}
	if len(o.Events.Deaths()) != 0 {
		t.Errorf("a release reported Died: %v", o.Events.Deaths())
	}

	if _, err := e.RT.CreateThread(context.Background(), "T2", mcpruntime.ThreadOptions{Instance: "A"}); err != nil {
		t.Fatal(err)
	}
	ps2, o2 := e.Open("T2", "A")
	pid2 := e.LastPid(ps2.ID)
	if err := syscall.Kill(pid2, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !o2.Events.Wait(deadline, func(ev *providertest.Events) bool { return len(ev.Deaths()) > 0 }) {
		t.Fatal("no Died after claude was killed")
	}
	t.Logf("died: %v", o2.Events.Deaths()[0])
	waitGone(t, "after the kill", pid2)
	end := time.Now().Add(deadline)
	for ents, _ := os.ReadDir(dir); len(ents) != 0; ents, _ = os.ReadDir(dir) {
		if time.Now().After(end) {
			t.Fatalf("configDir holds %v after the death was released", ents)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestTwoInstances: two instances' agents each hold their own token, and
// neither's process tree (argv, environment) nor directory holds the
// other's; each one's mcp.json is unreadable to anyone but the runtime's
// user.
func TestTwoInstances(t *testing.T) {
	e := newEnv(t)
	dirA, dirB := t.TempDir(), t.TempDir()
	e.Register("A", "TA", dirA, nil)
	e.Register("B", "TB", dirB, nil)
	psA, _ := e.Open("TA", "A")
	psB, _ := e.Open("TB", "B")
	tokA, tokB := drivertest.Token(psA.Authorization), drivertest.Token(psB.Authorization)
	for _, c := range []struct {
		name       string
		pid        int
		own, other string
		dir        string
	}{
		{"A", e.LastPid(psA.ID), psA.Authorization, tokB, dirA},
		{"B", e.LastPid(psB.ID), psB.Authorization, tokA, dirB},
	} {
		if got := mcpAuthorization(t, sessionDir(t, c.dir)); got != c.own {
			t.Errorf("%s's mcp.json lacks its own token", c.name)
		}
		for _, pid := range drivertest.Group(c.pid) {
			for _, f := range []string{"environ", "cmdline"} {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, f))
				if err != nil {
					continue // exited meanwhile
				}
				if strings.Contains(string(b), c.other) {
					t.Errorf("%s of process %d of %s holds the other instance's token", f, pid, c.name)
				}
			}
		}
		if leaks := agenttest.Leaks(c.other, nil, []string{c.dir}); len(leaks) > 0 {
			t.Errorf("the other instance's token found in %v", leaks)
		}
	}
}

// TestRevoked: once the thread is archived (its credentials revoked), the
// agent's next call fails with Claude Code's words for the endpoint's
// 401, and the driver reports needs_auth.
func TestRevoked(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	_, o := e.Open("T", "A")
	if err := e.RT.Archive(context.Background(), "T"); err != nil {
		t.Fatal(err)
	}
	if end, _ := e.Turn(o, "T", "late", `call thread_read {}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	var refused []string
	for _, ev := range o.Events.Events() {
		if ev.Kind == driver.EventToolResult && ev.Error && ev.Tool == "mcp__mcpruntime__thread_read" {
			refused = append(refused, ev.Text)
		}
	}
	t.Logf("refused calls: %q", refused)
	if len(refused) == 0 || !strings.Contains(refused[0], "rejected the Authorization header") {
		t.Errorf("events %+v, want thread_read's result refused (rejected the Authorization header)", o.Events.Events())
	}
	if !drivertest.HasStatus(o.Events, driver.StatusNeedsAuth) {
		t.Errorf("statuses %+v, want needs_auth", o.Events.Statuses())
	}
}

// TestShellEnvironment: a host's own --allowedTools (Config.Args) adds to
// the driver's: the model's Bash command runs, and its environment, the
// agent's, holds no MCP token (the model key it does hold, unless
// scrubSubprocessEnv).
func TestShellEnvironment(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), map[string]any{"args": []string{"--allowedTools", "Bash"}})
	ps, o := e.Open("T", "A")
	end, _ := e.Turn(o, "T", "shell", `call Bash {"command":"env"}`)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	var out string
	for _, ev := range o.Events.Events() {
		if ev.Turn == "shell" && ev.Kind == driver.EventToolResult && ev.Tool == "Bash" {
			if ev.Error {
				t.Fatalf("Bash was refused: %q", ev.Text)
			}
			out = ev.Text
		}
	}
	if !strings.Contains(out, "CLAUDE_CONFIG_DIR=") {
		t.Fatalf("the command's output %q is not its environment", out)
	}
	if strings.Contains(out, drivertest.Token(ps.Authorization)) {
		t.Error("the model's command sees the MCP token")
	}
	t.Logf("the model's command sees the model key: %v", strings.Contains(out, apiKey))
	// Still the runtime's tools too: the driver's --allowedTools holds.
	if end, _ := e.Turn(o, "T", "mcp", `call thread_read {}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	var read bool
	for _, ev := range o.Events.Events() {
		if ev.Turn == "mcp" && ev.Kind == driver.EventToolResult && ev.Tool == "mcp__mcpruntime__thread_read" {
			read = true
			if ev.Error {
				t.Errorf("thread_read refused: %q", ev.Text)
			}
		}
	}
	if !read {
		t.Errorf("no thread_read result; events %+v", o.Events.Events())
	}
}

// TestInterruptEarly: an interrupt right after the prompt was written,
// before Claude Code began the turn, still stops it (the prompt's uuid,
// cancel_queued): the turn ends interrupted, the model's held answer
// never comes, and no stray result ends the next turn.
func TestInterruptEarly(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	_, o := e.Open("T", "A")
	tr := o.Session.(driver.Turner)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	for i := range 3 {
		id := fmt.Sprintf("early-%d", i)
		if err := tr.StartTurn(ctx, driver.Turn{Thread: "T", ID: id, Input: "sleep 20s"}); err != nil {
			t.Fatal(err)
		}
		if err := tr.Interrupt(ctx, "T", id); err != nil {
			t.Fatal(err)
		}
		end, ok := o.Events.TurnEnd(id, deadline)
		if !ok || end.Outcome != driver.TurnInterrupted {
			t.Fatalf("turn end %+v (%v), want interrupted", end, ok)
		}
		for _, ev := range o.Events.Events() {
			if ev.Turn == id && ev.Kind == driver.EventMessage {
				t.Errorf("the interrupted turn went on: message %q", ev.Text)
			}
		}
	}
	if end, _ := e.Turn(o, "T", "after", "hello"); end.Outcome != driver.TurnCompleted {
		t.Errorf("turn after the interrupts %+v, want completed", end)
	}
	if ends := o.Events.TurnsEnded(); len(ends) != 4 {
		t.Errorf("turn ends %+v, want one for each turn", ends)
	}
}

// TestRotateRefused: a rotation to a token the endpoint refuses fails
// with Claude Code's words for it, and the session, whose agent holds no
// working token now, is reported dead.
func TestRotateRefused(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	ps, o := e.Open("T", "A")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	err := o.Session.Attach(ctx, driver.Binding{Thread: "T", Instance: "A", Endpoint: e.Endpoint, Authorization: "Bearer mcprt_not-a-token"})
	if err == nil || !strings.Contains(err.Error(), "HTTP 401") {
		t.Fatalf("Attach with a refused token: %v, want Claude Code's error with HTTP 401", err)
	}
	t.Logf("rotation error: %v", err)
	if !o.Events.Wait(deadline, func(ev *providertest.Events) bool { return len(ev.Deaths()) > 0 }) {
		t.Fatal("no Died after the failed rotation")
	}
	if !drivertest.HasStatus(o.Events, driver.StatusNeedsAuth) {
		t.Errorf("statuses %+v, want needs_auth", o.Events.Statuses())
	}
	if err := o.Session.(driver.Turner).StartTurn(ctx, driver.Turn{Thread: "T", ID: "x", Input: "hello"}); err == nil {
		t.Error("StartTurn on the dead session succeeded")
	}
	waitGone(t, "after the failed rotation's release", e.LastPid(ps.ID))
}

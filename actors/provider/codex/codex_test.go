//go:build linux

// The tests run the real Codex app-server (e2e/agents, `make test-deps`)
// against a real runtime on loopback and the scripted model, and look at
// its processes through /proc, hence Linux only.

package codex_test

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
	"github.com/agenthost/mcpruntime/actors/provider/codex"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestOpen: an open returns once Codex's MCP connection to the runtime is
// up under the session's credential; the token is in the app-server's
// environment under MCPRUNTIME_TOKEN and nowhere else (no argv, no file,
// no log record), the model key likewise under OPENAI_API_KEY; the
// session's directory is private.
func TestOpen(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.Register("A", "T", dir, nil)
	start := time.Now()
	ps, o := e.Open("T", "A")
	took := time.Since(start)
	if !o.Events.Wait(deadline, func(ev *providertest.Events) bool { return drivertest.HasStatus(ev, driver.StatusConnected) }) {
		t.Fatalf("no connected status; statuses %+v", o.Events.Statuses())
	}
	pid := e.LastPid(ps.ID)
	pids := drivertest.Group(pid)
	t.Logf("measured: open → connected %v; app-server tree %d processes, RSS %d KiB", took.Round(time.Millisecond), len(pids), drivertest.RSSKiB(pids))

	var seen bool
	for _, m := range e.RT.MCPSessions() {
		seen = seen || m.Credential == ps.CredentialID
	}
	if !seen {
		t.Errorf("the runtime holds no MCP session of credential %s: %+v", ps.CredentialID, e.RT.MCPSessions())
	}

	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || !strings.HasPrefix(ents[0].Name(), "codex-") {
		t.Fatalf("configDir holds %v, want one codex-* directory", ents)
	}
	if fi, err := os.Stat(filepath.Join(dir, ents[0].Name())); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("session directory: %v, %v; want mode 0700", fi.Mode(), err)
	}

	tok := drivertest.Token(ps.Authorization)
	vars := strings.Split(drivertest.Environ(t, pid), "\x00")
	for _, want := range []string{"MCPRUNTIME_TOKEN=" + tok, "OPENAI_API_KEY=" + apiKey, "HOME=" + e.home} {
		if !slices.Contains(vars, want) {
			t.Errorf("app-server environment lacks %s", strings.SplitN(want, "=", 2)[0])
		}
	}
	for _, v := range vars {
		if strings.HasPrefix(v, apiKeyVar+"=") {
			t.Errorf("app-server environment holds the runtime's %s", apiKeyVar)
		}
	}
	for _, secret := range []string{tok, apiKey} {
		if leaks := agenttest.Leaks(secret, nil, []string{dir, e.home}, e.Logs.Text()); len(leaks) > 0 {
			t.Errorf("secret found in %v", leaks)
		}
	}
}

// TestOpenRefused: an open whose token the endpoint refuses fails with
// Codex's own words for it, reports needs_auth, and leaves no process and
// no directory behind.
func TestOpenRefused(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	logs := &drivertest.Capture{}
	d, err := codex.Factory(slog.New(logs))("X", e.Config(dir, nil))
	if err != nil {
		t.Fatal(err)
	}
	ev := &providertest.Events{}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, err = d.Open(ctx, driver.OpenRequest{SessionID: "ps_refused", Instance: "X", Events: ev, Binding: driver.Binding{
		Thread: "T", Instance: "X", Endpoint: e.Endpoint, Authorization: "Bearer mcprt_not-a-token",
	}})
	if err == nil || !strings.Contains(err.Error(), "Auth required") {
		t.Fatalf("Open with an unknown token: %v, want Codex's toolsError (Auth required)", err)
	}
	t.Logf("open error: %v", err)
	if !drivertest.HasStatus(ev, driver.StatusNeedsAuth) {
		t.Errorf("statuses %+v, want needs_auth", ev.Statuses())
	}
	for _, r := range logs.Find("codex app-server started", "session", "ps_refused") {
		waitGone(t, "after the refused open", drivertest.Atoi(t, r.Attrs["pid"]))
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("configDir holds %v after the refused open", ents)
	}
	if len(ev.Deaths()) != 0 {
		t.Errorf("a refused open reported Died: %v", ev.Deaths())
	}
}

// TestTurn: a run started with an input is Codex's turn: it posts to the
// thread under the session's credential, reported as turn_started,
// tool_call, tool_result, message and a completed end, which ends the
// run; once the run ended, the same call is refused and the model is told
// parent_not_active.
func TestTurn(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	ps, o := e.Open("T", "A")
	run, end, took := e.RunTurn(o, "T", "A", `call thread_post {"text":"hi"}`)
	t.Logf("measured: turn round trip (Runtime.StartTurn → TurnEnded, one MCP tool call) %v", took.Round(time.Millisecond))
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn ended %+v, want completed", end)
	}
	e.WaitNoRun("T") // the turn's end ended the run
	msgs := e.Messages("T")
	if len(msgs) != 1 || msgs[0].Text != "hi" || msgs[0].Author != "cred:"+ps.CredentialID {
		t.Fatalf("thread messages %+v, want one \"hi\" by cred:%s", msgs, ps.CredentialID)
	}
	if got, want := drivertest.Kinds(o.Events, run), []string{driver.EventTurnStarted, driver.EventToolCall, driver.EventToolResult, driver.EventMessage}; !slices.Equal(got, want) {
		t.Errorf("events of the turn %v, want %v", got, want)
	}
	for _, ev := range o.Events.Events() {
		if ev.Kind == driver.EventToolCall && (ev.Tool != "mcp__mcpruntime__thread_post" || string(ev.Data) != `{"text":"hi"}`) {
			t.Errorf("tool call %+v, want mcp__mcpruntime__thread_post {\"text\":\"hi\"}", ev)
		}
		if ev.Kind == driver.EventToolResult && (ev.Error || !strings.Contains(ev.Text, `"text":"hi"`)) {
			t.Errorf("tool result %+v, want the posted message", ev)
		}
		if ev.Kind == driver.EventMessage && !strings.HasPrefix(ev.Text, "saw: ") {
			t.Errorf("message %q, want the model's answer", ev.Text)
		}
	}

	// A turn outside any run (sent to the session directly): the call is
	// refused.
	end, _ = e.Turn(o, "T", "after-the-run", `call thread_post {"text":"late"}`)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn after the run ended %+v, want completed (with a refused call)", end)
	}
	results := e.Model.ToolResults()
	t.Logf("the model saw the refusal as %q", results[len(results)-1])
	if len(results) != 2 || !refusedNotActive(results[1]) {
		t.Errorf("tool results the model saw %q, want the second to be the parent_not_active refusal", results)
	}
	if msgs := e.Messages("T"); len(msgs) != 1 {
		t.Errorf("thread messages %+v after the refused call, want still one", msgs)
	}
}

// TestInterrupt: ending a run whose turn the model is still answering
// interrupts the turn (Runtime.EndRun → Interrupt → turn/interrupt); its
// end is reported interrupted at once, and the next turn runs.
func TestInterrupt(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	_, o := e.Open("T", "A")
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
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
	end, ok := o.Events.TurnEnd(run, 10*time.Second)
	if !ok || end.Outcome != driver.TurnInterrupted {
		t.Fatalf("turn end %+v (%v), want interrupted", end, ok)
	}
	t.Logf("measured: EndRun → TurnEnded interrupted %v", time.Since(start).Round(time.Millisecond))
	if _, end, _ := e.RunTurn(o, "T", "A", "hello"); end.Outcome != driver.TurnCompleted {
		t.Errorf("turn after the interrupt %+v, want completed", end)
	}
}

// TestRotate: a rotation restarts the app-server with the new token and
// resumes the same Codex thread: the next turn's model request carries the
// conversation so far, and its tool call lands under the new credential;
// the old credential is revoked and the old process gone.
func TestRotate(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.Register("A", "T", dir, nil)
	ctx := context.Background()
	ps, o := e.Open("T", "A")
	first := `call thread_post {"text":"one"}`
	if _, end, _ := e.RunTurn(o, "T", "A", first); end.Outcome != driver.TurnCompleted {
		t.Fatalf("first turn %+v", end)
	}
	e.WaitNoRun("T")
	before := len(e.Model.Requests())
	oldPid := e.LastPid(ps.ID)

	start := time.Now()
	cred, err := e.RT.Rotate(ctx, "T", "A")
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	t.Logf("measured: rotation (restart + thread/resume + MCP connected) %v", time.Since(start).Round(time.Millisecond))
	newPid := e.LastPid(ps.ID)
	if newPid == oldPid {
		t.Fatalf("the app-server %d was not restarted", oldPid)
	}
	waitGone(t, "the old app-server", oldPid)
	if c := e.Credential("T", ps.CredentialID); c.State != "revoked" {
		t.Errorf("old credential %+v, want revoked", c)
	}
	if !slices.Contains(strings.Split(drivertest.Environ(t, newPid), "\x00"), "MCPRUNTIME_TOKEN="+drivertest.Token(cred.Authorization)) {
		t.Error("the new app-server does not hold the new token")
	}

	if _, end, _ := e.RunTurn(o, "T", "A", `call thread_post {"text":"two"}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn after the rotation %+v", end)
	}
	msgs := e.Messages("T")
	if len(msgs) != 2 || msgs[1].Text != "two" || msgs[1].Author != "cred:"+cred.ID {
		t.Fatalf("thread messages %+v, want \"two\" by cred:%s", msgs, cred.ID)
	}
	reqs := e.Model.Requests()
	if len(reqs) <= before {
		t.Fatal("no model request after the rotation")
	}
	firstBody, lastBody := decodeRequest(t, reqs[0].Body), decodeRequest(t, reqs[len(reqs)-1].Body)
	if firstBody.PromptCacheKey == "" || lastBody.PromptCacheKey != firstBody.PromptCacheKey {
		t.Errorf("Codex thread before the rotation %q, after %q: want the same", firstBody.PromptCacheKey, lastBody.PromptCacheKey)
	}
	if !slices.Contains(lastBody.userTexts(), first) {
		t.Errorf("the request after the rotation has user messages %q, want the first turn's %q among them", lastBody.userTexts(), first)
	}
	for _, secret := range []string{drivertest.Token(ps.Authorization), drivertest.Token(cred.Authorization)} {
		if leaks := agenttest.Leaks(secret, nil, []string{dir, e.home}, e.Logs.Text()); len(leaks) > 0 {
			t.Errorf("token found in %v", leaks)
		}
	}
	if env := drivertest.Environ(t, newPid); strings.Contains(env, drivertest.Token(ps.Authorization)) {
		t.Error("the new app-server's environment holds the old token")
	}
}

// TestRotateDuringTurn: a rotation waits for a running turn up to
// rotateWait, then interrupts it (reported interrupted) and restarts; the
// session goes on.
func TestRotateDuringTurn(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), map[string]any{"rotateWait": "1s"})
	ctx := context.Background()
	_, o := e.Open("T", "A")
	slow, err := e.RT.StartTurn(ctx, "T", "A", "sleep 30s")
	if err != nil {
		t.Fatal(err)
	}
	if !o.Events.Wait(deadline, func(ev *providertest.Events) bool {
		return slices.Contains(drivertest.Kinds(ev, slow), driver.EventTurnStarted)
	}) {
		t.Fatal("the turn did not start")
	}
	start := time.Now()
	if _, err := e.RT.Rotate(ctx, "T", "A"); err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	took := time.Since(start)
	end, ok := o.Events.TurnEnd(slow, time.Second)
	if !ok || end.Outcome != driver.TurnInterrupted {
		t.Fatalf("running turn's end %+v (%v), want interrupted by the rotation", end, ok)
	}
	if took < time.Second || took > 15*time.Second {
		t.Errorf("rotation took %v, want rotateWait (1s) plus a restart", took)
	}
	e.WaitNoRun("T") // the interrupted turn's end ended its run
	if _, end, _ := e.RunTurn(o, "T", "A", "hello"); end.Outcome != driver.TurnCompleted {
		t.Errorf("turn after the rotation %+v, want completed", end)
	}
}

// TestCloseAndDied: releasing a session ends its app-server's whole
// process group and removes its directory, with no death reported; an
// app-server killed from outside is reported with Died.
func TestCloseAndDied(t *testing.T) {
	e := newEnv(t)
	dir := t.TempDir()
	e.Register("A", "T", dir, nil)
	ps, o := e.Open("T", "A")
	pid := e.LastPid(ps.ID)
	if err := e.RT.ReleaseProviderSession(context.Background(), ps.ID); err != nil {
		t.Fatal(err)
	}
	waitGone(t, "after the release", pid)
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
		t.Fatal("no Died after the app-server was killed")
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
// neither's environment nor directory holds the other's.
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
		{"A", e.LastPid(psA.ID), tokA, tokB, dirA},
		{"B", e.LastPid(psB.ID), tokB, tokA, dirB},
	} {
		if !strings.Contains(drivertest.Environ(t, c.pid), "MCPRUNTIME_TOKEN="+c.own) {
			t.Errorf("%s's app-server lacks its own token", c.name)
		}
		for _, pid := range drivertest.Group(c.pid) {
			env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
			if err != nil {
				continue // exited meanwhile
			}
			if strings.Contains(string(env), c.other) {
				t.Errorf("process %d of %s holds the other instance's token", pid, c.name)
			}
		}
		if leaks := agenttest.Leaks(c.other, nil, []string{c.dir}); len(leaks) > 0 {
			t.Errorf("the other instance's token found in %v", leaks)
		}
	}
}

// refusedNotActive reports whether a tool output Codex handed the model
// is the runtime's parent_not_active refusal. Codex prefixes every MCP
// result with "Wall time: …\nOutput:\n" and hands over the result's
// structuredContent when there is one ({"code":"parent_not_active",…}),
// else its text ("parent_not_active: …").
func refusedNotActive(output string) bool {
	if _, rest, ok := strings.Cut(output, "Output:\n"); ok && strings.HasPrefix(output, "Wall time: ") {
		output = rest
	}
	if strings.HasPrefix(output, "parent_not_active") {
		return true
	}
	var sc struct {
		Code string `json:"code"`
	}
	return json.Unmarshal([]byte(output), &sc) == nil && sc.Code == "parent_not_active"
}

// modelRequest is the part of a Responses request the tests read.
type modelRequest struct {
	PromptCacheKey string `json:"prompt_cache_key"`
	Input          []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	} `json:"input"`
}

func decodeRequest(t *testing.T, body []byte) modelRequest {
	t.Helper()
	var r modelRequest
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatalf("model request: %v", err)
	}
	return r
}

// userTexts returns the texts of the request's user messages.
func (r modelRequest) userTexts() []string {
	var out []string
	for _, in := range r.Input {
		if in.Role != "user" {
			continue
		}
		var parts []struct {
			Text string `json:"text"`
		}
		if json.Unmarshal(in.Content, &parts) == nil {
			for _, p := range parts {
				out = append(out, p.Text)
			}
		}
	}
	return out
}

// TestShellEnvironment: a command the model runs (Codex's exec_command)
// sees neither the MCP token nor the model key: the driver's
// shell_environment_policy.exclude holds on Codex 0.169.
func TestShellEnvironment(t *testing.T) {
	e := newEnv(t)
	e.Register("A", "T", t.TempDir(), nil)
	ps, o := e.Open("T", "A")
	end, _ := e.Turn(o, "T", "shell", `call exec_command {"cmd":"env"}`)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	var out string
	for _, ev := range o.Events.Events() {
		if ev.Turn == "shell" && ev.Kind == driver.EventToolResult && ev.Tool == "shell" {
			out = ev.Text
		}
	}
	if !strings.Contains(out, "CODEX_HOME=") {
		t.Fatalf("the command's output %q is not its environment", out)
	}
	for _, secret := range []string{drivertest.Token(ps.Authorization), apiKey, "MCPRUNTIME_"} {
		if strings.Contains(out, secret) {
			t.Errorf("the model's command sees %q in its environment", secret)
		}
	}
}

// TestRevoked: once the thread is archived (its credentials revoked), the
// agent's next call fails with Codex's "Authentication required", and the
// driver reports needs_auth.
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
	var refused bool
	for _, ev := range o.Events.Events() {
		refused = refused || ev.Kind == driver.EventToolResult && ev.Error && strings.Contains(ev.Text, "Authentication required")
	}
	if !refused {
		t.Errorf("events %+v, want a tool result refused with Authentication required", o.Events.Events())
	}
	if !drivertest.HasStatus(o.Events, driver.StatusNeedsAuth) {
		t.Errorf("statuses %+v, want needs_auth", o.Events.Statuses())
	}
}

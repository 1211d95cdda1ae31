//go:build linux

// TestAgentsStory runs the real agent CLIs (e2e/agents, `make test-deps`)
// under the built binary and looks at their processes through /proc, hence
// Linux only.

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
)

// storyAgents are the agents of TestAgentsStory, by driver kind: thread t1
// starts on the first (Codex), switches to the second and back, and visits
// the others once.
var storyAgents = []string{"codex", "claude", "opencode"}

// storyWait bounds each wait of the story; storyBudget the whole test. A
// correct runtime is far from either (an agent starts in seconds).
const (
	storyWait   = 60 * time.Second
	storyBudget = 3 * time.Minute
)

// storyKeyVar is the server's variable the agents' model key comes from
// (each instance's apiKeyEnv), storyKey its value: a secret like the tokens.
const (
	storyKeyVar = "STORY_MODEL_KEY"
	storyKey    = "story-model-key-5c1e9a"
)

// TestAgentsStory is the switch story of SPEC §3 with real agents, on the
// shipped binary (built here, run as a process) and only through its admin
// API over HTTP, the agents answered by the scripted model on loopback:
//
//   - t1 runs a Codex turn that posts; the turn's events and its end are on
//     /admin/v1/events, the run ends with the turn, the post is in t1;
//   - a Codex turn that sleeps, then posts, is overtaken by a switch to the
//     second agent: the second agent's turn posts, Codex's late post is
//     refused parent_not_active (what its model is told), and a run of
//     Codex is refused not_current_instance;
//   - back on Codex, both agents' sessions are still open (a re-open is a
//     reuse) and Codex reads what the second agent posted;
//   - a rotation of Codex's credential mid-conversation: the next turn posts
//     under the new credential, the old token is refused, the model sees the
//     earlier turns (the conversation was kept);
//   - every other agent of storyAgents takes a turn too;
//   - archive, while two agents are mid-turn: each one's next call is
//     refused (their models are told why);
//   - releasing the sessions leaves no agent process and no private
//     directory; no token or model key is in any argv, the server's log or a
//     file under the agents' directories; SIGTERM, exit 0.
func TestAgentsStory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), storyBudget)
	defer cancel()
	s := startStory(t, ctx)
	model := s.model
	first, second := storyAgents[0], storyAgents[1]

	for _, kind := range storyAgents {
		s.createInstance(kind)
	}
	s.admin("POST", "/admin/v1/threads", map[string]any{"id": "t1", "instance": first}, 201)

	// 1. Codex's turn posts; the run is the turn.
	s.open(first)
	run := s.turn(first, `call thread_post {"text":"from codex"}`)
	end := s.waitTurnEnd(run)
	if end.State != "completed" {
		t.Fatalf("%s's turn ended %+v, want completed", first, end)
	}
	s.waitNoRun()
	if got, want := s.kinds(run), []string{"agent.turn_started", "agent.tool_call", "agent.tool_result", "agent.message", "turn.ended"}; !slices.Equal(got, want) {
		t.Errorf("events of %s's turn %v, want %v", first, got, want)
	}
	s.wantMessage("from codex", s.agents[first].credential)

	// 2. Switch to the second agent while Codex is mid-turn.
	s.open(second)
	late := s.turn(first, `sleep 4s then call thread_post {"text":"codex, too late"}`)
	s.waitModel(first, "sleep 4s then call thread_post")
	var sw struct{ Instance, Previous, EndedRun string }
	s.decode(s.admin("POST", "/admin/v1/threads/t1/switch", map[string]any{"instance": second}, 200), &sw)
	if sw.Previous != first || sw.EndedRun != late {
		t.Fatalf("switch answered %+v, want previous %s and endedRun %s", sw, first, late)
	}
	before := len(model.ToolResults())
	run = s.turn(second, `call thread_post {"text":"from `+second+`"}`)
	if end := s.waitTurnEnd(run); end.State != "completed" {
		t.Fatalf("%s's turn ended %+v, want completed", second, end)
	}
	s.waitNoRun()
	s.wantMessage("from "+second, s.agents[second].credential)
	if end := s.waitTurnEnd(late); end.State != "completed" {
		t.Fatalf("%s's overtaken turn ended %+v, want completed (its post refused)", first, end)
	}
	t.Logf("what the models were told after the switch: %q", model.ToolResults()[before:])
	if !s.refused(model.ToolResults()[before:], "parent_not_active") {
		t.Errorf("tool results after the switch %q; want %s's post refused parent_not_active", model.ToolResults()[before:], first)
	}
	if s.hasMessage("codex, too late") {
		t.Errorf("%s's post landed after the switch", first)
	}
	s.admin("POST", "/admin/v1/threads/t1/runs", map[string]any{"instance": first, "input": "call thread_read {}"}, 409, "not_current_instance")

	// 3. Back to Codex: both sessions are still open, both credentials live.
	s.admin("POST", "/admin/v1/threads/t1/switch", map[string]any{"instance": first}, 200)
	for _, kind := range []string{first, second} {
		var re struct {
			ProviderSessionID string
			Reused            bool
		}
		s.decode(s.admin("POST", "/admin/v1/threads/t1/provider-sessions", map[string]any{"instance": kind}, 200), &re)
		if !re.Reused || re.ProviderSessionID != s.agents[kind].session {
			t.Errorf("re-open of (t1, %s) = %+v, want a reuse of %s", kind, re, s.agents[kind].session)
		}
	}
	before = len(model.ToolResults())
	run = s.turn(first, "call thread_read {}")
	s.waitTurnEnd(run)
	s.waitNoRun()
	if rs := model.ToolResults()[before:]; len(rs) != 1 || !strings.Contains(rs[0], "from "+second) {
		t.Errorf("%s's thread_read gave %q, want the thread with %s's post", first, rs, second)
	}

	// 4. Rotate Codex's credential mid-conversation.
	old := s.agents[first]
	var rot struct{ CredentialID, Authorization string }
	s.decode(s.admin("POST", "/admin/v1/threads/t1/rotate", map[string]any{"instance": first}, 200), &rot)
	if rot.CredentialID == "" || rot.CredentialID == old.credential || !strings.HasPrefix(rot.Authorization, "Bearer ") {
		t.Fatalf("rotate answered %+v", rot)
	}
	s.addToken(first, rot.Authorization)
	s.agents[first].credential = rot.CredentialID
	run = s.turn(first, `call thread_post {"text":"after the rotation"}`)
	s.waitTurnEnd(run)
	s.waitNoRun()
	s.wantMessage("after the rotation", rot.CredentialID)
	if last := s.lastRequest(first); !bytes.Contains(last, []byte("call thread_read {}")) || !bytes.Contains(last, []byte("from codex")) {
		t.Errorf("%s's request after the rotation does not carry the earlier turns: %.600s", first, last)
	}
	c := newMCPClient(t, s.mcpURL, old.authorization)
	if status, body := c.post(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"story","version":"1"}}}`); status != 401 {
		t.Errorf("the rotated-out token: initialize %d %s, want 401", status, body)
	}
	c.http.CloseIdleConnections()

	// 5. Every other agent takes a turn.
	for _, kind := range storyAgents[2:] {
		s.admin("POST", "/admin/v1/threads/t1/switch", map[string]any{"instance": kind}, 200)
		s.open(kind)
		run = s.turn(kind, `call thread_post {"text":"from `+kind+`"}`)
		s.waitTurnEnd(run)
		s.waitNoRun()
		s.wantMessage("from "+kind, s.agents[kind].credential)
	}

	// The tokens are where they belong, and nowhere else, while every agent
	// runs.
	s.checkLeaks()

	// 6. Archive while two agents are mid-turn: the second agent's turn is
	// overtaken by a switch to Codex, Codex's by the archive; both calls
	// that follow are refused.
	s.admin("POST", "/admin/v1/threads/t1/switch", map[string]any{"instance": second}, 200)
	before = len(model.ToolResults())
	lateSecond := s.turn(second, "sleep 8s then call thread_read {}")
	s.waitModel(second, "sleep 8s then call thread_read")
	s.admin("POST", "/admin/v1/threads/t1/switch", map[string]any{"instance": first}, 200)
	lateFirst := s.turn(first, "sleep 3s then call thread_read {}")
	s.waitModel(first, "sleep 3s then call thread_read")
	var archived struct{ Status string }
	s.decode(s.admin("POST", "/admin/v1/threads/t1/archive", nil, 200), &archived)
	if archived.Status != "archived" {
		t.Fatalf("archive answered status %q", archived.Status)
	}
	s.waitTurnEnd(lateFirst)
	s.waitTurnEnd(lateSecond)
	results := model.ToolResults()[before:]
	for _, kind := range []string{first, second} {
		if !s.refused(results, revokedWords[kind]) {
			t.Errorf("tool results after the archive %q; want %s's thread_read refused (%q)", results, kind, revokedWords[kind])
		}
	}
	if slices.ContainsFunc(results, func(r string) bool { return strings.Contains(r, "from codex") }) {
		t.Errorf("a read after the archive succeeded: %q", results)
	}
	t.Logf("what the models were told after the archive: %q", results)
	s.admin("POST", "/admin/v1/threads/t1/runs", map[string]any{"instance": first}, 409, "thread_archived")

	// 7. Release every session: no agent process, no private directory.
	for _, kind := range storyAgents {
		a := s.agents[kind]
		var rel struct{ Status string }
		s.decode(s.admin("DELETE", "/admin/v1/provider-sessions/"+a.session, nil, 200), &rel)
		if rel.Status != "released" {
			t.Errorf("release of %s: status %q", a.session, rel.Status)
		}
		for _, pid := range s.pids(a.session) {
			if left := drivertest.Group(pid); len(left) > 0 {
				t.Errorf("%s: processes %v of group %d are left after the release", kind, left, pid)
			}
		}
		if ents, _ := os.ReadDir(a.configDir); len(ents) != 0 {
			t.Errorf("%s: %s holds %v after the release", kind, a.configDir, ents)
		}
	}
	s.checkLeaks()
	if code := s.stop(); code != 0 {
		t.Fatalf("runtime exited %d after SIGTERM; log:\n%s", code, s.logs.String())
	}
	for secret := range s.secrets() {
		if leaks := agenttest.Leaks(secret, nil, nil, []byte(s.logs.String())); len(leaks) > 0 {
			t.Errorf("a secret is in the server's log after its exit: %v", leaks)
		}
	}
}

// revokedWords is what each agent tells its model when a call's token is
// revoked: the runtime's 401, in the agent's words.
var revokedWords = map[string]string{
	"codex":    "Authentication required",
	"opencode": "unauthorized",
	"claude":   "rejected the Authorization header",
}

// agentConfig is the instance configuration of each agent kind: the
// pinned CLI, the scripted model, its sessions' directories under
// configDir, its project workDir (where it takes one), its HOME (where it
// takes one) home.
func agentConfig(t *testing.T, kind, modelURL, configDir, workDir, home string) map[string]any {
	c := map[string]any{
		"command":   agenttest.Binary(t, kind),
		"configDir": configDir,
		"baseURL":   modelURL + "/v1",
		"model":     "scripted",
		"apiKeyEnv": storyKeyVar,
		"grace":     "3s",
	}
	switch kind {
	case "codex":
		c["inheritEnv"] = []string{"PATH"}
		c["env"] = map[string]string{"HOME": home}
	case "opencode":
		c["dir"] = workDir
		c["env"] = map[string]string{"npm_config_offline": "true"}
	case "claude":
		c["baseURL"] = modelURL // Claude Code posts to <baseURL>/v1/messages
		c["dir"] = workDir
	default:
		t.Fatalf("agentConfig: no configuration for kind %q", kind)
	}
	return c
}

// story is a running binary, its admin API, the scripted model and what
// the test learnt of each agent.
type story struct {
	t        *testing.T
	ctx      context.Context
	model    *agenttest.Model
	http     *http.Client
	adminURL string
	mcpURL   string
	token    string // the admin token
	home     string
	logs     *syncBuffer
	stop     func() int
	agents   map[string]*storyAgent
	tokens   map[string]string // every token minted (and the admin token): the agent kind holding it, "" for none
	dirs     []string          // every directory an agent may write to

	mu     sync.Mutex // guards events
	events []storyEvent
}

// storyAgent is one agent of the story: its instance (named after its
// kind), its session, its credential.
type storyAgent struct {
	configDir     string
	session       string
	credential    string
	authorization string
}

// storyEvent is one record of /admin/v1/events.
type storyEvent struct {
	ID       uint64 `json:"id"`
	Kind     string `json:"kind"`
	Instance string `json:"instance"`
	Session  string `json:"session"`
	Thread   string `json:"thread"`
	Turn     string `json:"turn"`
	State    string `json:"state"`
	Text     string `json:"text"`
	Tool     string `json:"tool"`
}

// startStory builds the binary, starts the scripted model and the binary
// on free loopback ports, and follows t1's events.
func startStory(t *testing.T, ctx context.Context) *story {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "runtime")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := &story{t: t, ctx: ctx, model: agenttest.NewModel(t), home: agenttest.Home(t), logs: &syncBuffer{},
		agents: map[string]*storyAgent{}, token: "story-admin-token-0123456789abcdef-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	s.http = &http.Client{Transport: tr}
	s.tokens = map[string]string{s.token: ""}
	s.dirs = append(s.dirs, s.home, dir)

	cmd := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--log-format", "json", "--no-demo", "--shutdown-grace", "30s")
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + s.home, "TMPDIR=" + os.TempDir(),
		"RUNTIME_ADMIN_TOKEN=" + s.token, storyKeyVar + "=" + storyKey}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	ready := make(chan map[string]any, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			s.logs.Write(append(sc.Bytes(), '\n'))
			var rec map[string]any
			if json.Unmarshal(sc.Bytes(), &rec) == nil && rec["msg"] == "runtime ready" {
				ready <- rec
			}
		}
		io.Copy(io.Discard, stderr)
		exited <- cmd.Wait()
	}()
	var stopped bool
	var code int
	s.stop = func() int {
		if stopped {
			return code
		}
		stopped = true
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			code = cmd.ProcessState.ExitCode()
			if err != nil && code == 0 {
				code = -1
			}
		case <-time.After(time.Minute): // detects a hang only
			_ = cmd.Process.Kill()
			t.Errorf("runtime did not exit within a minute of SIGTERM")
			code = -1
		}
		return code
	}
	t.Cleanup(func() { s.stop() })
	select {
	case rec := <-ready:
		s.mcpURL, _ = rec["mcp"].(string)
		admin, _ := rec["admin"].(string)
		s.adminURL = strings.TrimSuffix(admin, "/admin/v1/")
	case err := <-exited:
		t.Fatalf("runtime exited before it was ready: %v\n%s", err, s.logs.String())
	case <-ctx.Done():
		t.Fatalf("runtime not ready:\n%s", s.logs.String())
	}
	s.follow()
	return s
}

// follow reads /admin/v1/events for t1 from the journal's start until the
// test ends.
func (s *story) follow() {
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.adminURL+"/admin/v1/events?thread=t1&after=0", nil)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	resp, err := s.http.Do(req)
	if err != nil || resp.StatusCode != 200 {
		s.t.Fatalf("GET /admin/v1/events: %v %v", resp, err)
	}
	done := make(chan struct{})
	s.t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var ev storyEvent
			if json.Unmarshal([]byte(data), &ev) == nil {
				s.mu.Lock()
				s.events = append(s.events, ev)
				s.mu.Unlock()
			}
		}
	}()
}

// admin sends one request to the admin API and fails the test unless it
// answers status (and, if given, the error code); it returns the body.
func (s *story) admin(method, path string, body any, status int, code ...string) []byte {
	s.t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(s.ctx, storyWait)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.adminURL+path, rd)
	if err != nil {
		s.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != status {
		s.stop() // its log read to the end
		s.t.Fatalf("%s %s: %d %s, want %d; the server's warnings and errors:\n%s", method, path, resp.StatusCode, out, status, s.problems())
	}
	if len(code) > 0 {
		var e struct{ Error string }
		if json.Unmarshal(out, &e) != nil || e.Error != code[0] {
			s.t.Fatalf("%s %s: %d %s, want error %s", method, path, resp.StatusCode, out, code[0])
		}
	}
	if method != http.MethodGet {
		s.t.Logf("%s %s → %d (%v)", method, path, resp.StatusCode, time.Since(start).Round(time.Millisecond))
	}
	return out
}

// problems are the server's log records above info and those that name
// an error or a failure, a line each.
func (s *story) problems() string {
	var b strings.Builder
	for _, line := range strings.Split(s.logs.String(), "\n") {
		if strings.Contains(line, `"level":"WARN"`) || strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"err":`) || strings.Contains(line, "fail") {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func (s *story) decode(data []byte, v any) {
	s.t.Helper()
	if err := json.Unmarshal(data, v); err != nil {
		s.t.Fatalf("decode %s: %v", data, err)
	}
}

// createInstance registers the agent kind as the instance of that name.
func (s *story) createInstance(kind string) {
	s.t.Helper()
	a := &storyAgent{configDir: s.t.TempDir()}
	work := s.t.TempDir()
	s.agents[kind] = a
	s.dirs = append(s.dirs, a.configDir, work)
	s.admin("POST", "/admin/v1/instances", map[string]any{"id": kind, "driver": kind,
		"config": agentConfig(s.t, kind, s.model.URL, a.configDir, work, s.home)}, 201)
}

// open opens (t1, kind): its agent is up and connected when it answers.
func (s *story) open(kind string) {
	s.t.Helper()
	start := time.Now()
	var ps struct{ ProviderSessionID, CredentialID, Authorization, Driver string }
	s.decode(s.admin("POST", "/admin/v1/threads/t1/provider-sessions", map[string]any{"instance": kind}, 201), &ps)
	took := time.Since(start)
	if ps.Driver != kind || !strings.HasPrefix(ps.Authorization, "Bearer ") {
		s.t.Fatalf("open (t1, %s) answered %+v", kind, ps)
	}
	a := s.agents[kind]
	a.session, a.credential, a.authorization = ps.ProviderSessionID, ps.CredentialID, ps.Authorization
	s.addToken(kind, ps.Authorization)
	var rss int
	for _, pid := range s.pids(a.session) {
		rss += drivertest.RSSKiB(drivertest.Group(pid))
	}
	s.t.Logf("measured: %s open → connected %v, process tree RSS %d MiB", kind, took.Round(time.Millisecond), rss/1024)
}

// turn starts a run of kind on t1 whose input is its agent's turn.
func (s *story) turn(kind, input string) string {
	s.t.Helper()
	var r struct{ RunID string }
	s.decode(s.admin("POST", "/admin/v1/threads/t1/runs", map[string]any{"instance": kind, "input": input}, 201), &r)
	if r.RunID == "" {
		s.t.Fatalf("run of %s: no runId", kind)
	}
	return r.RunID
}

// waitFor polls cond until it holds, failing the test with what after
// storyWait (or the test's budget).
func (s *story) waitFor(what string, cond func() bool) {
	s.t.Helper()
	end := time.Now().Add(storyWait)
	for !cond() {
		if time.Now().After(end) || s.ctx.Err() != nil {
			s.t.Fatalf("waited in vain for %s; events:\n%s\nlog:\n%s", what, s.eventsText(), s.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitTurnEnd waits for the end of turn run on the event stream.
func (s *story) waitTurnEnd(run string) storyEvent {
	s.t.Helper()
	var end storyEvent
	s.waitFor("turn.ended of "+run, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ev := range s.events {
			if ev.Kind == "turn.ended" && ev.Turn == run {
				end = ev
				return true
			}
		}
		return false
	})
	return end
}

// kinds are the kinds of the events of turn run, in order.
func (s *story) kinds(run string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, ev := range s.events {
		if ev.Turn == run {
			out = append(out, ev.Kind)
		}
	}
	return out
}

func (s *story) eventsText() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	for _, ev := range s.events {
		fmt.Fprintf(&b, "  %+v\n", ev)
	}
	return b.String()
}

// thread is t1 as GET answers it.
type storyThread struct {
	Status string
	Run    *struct{ ID, Instance string }
	// Messages are t1's messages.
	Messages []struct{ Text, Author string }
}

func (s *story) thread() storyThread {
	s.t.Helper()
	var th storyThread
	s.decode(s.admin("GET", "/admin/v1/threads/t1", nil, 200), &th)
	return th
}

// waitNoRun waits until t1 has no run: the turn's end ended it.
func (s *story) waitNoRun() {
	s.t.Helper()
	s.waitFor("t1's run to end", func() bool { return s.thread().Run == nil })
}

func (s *story) hasMessage(text string) bool {
	s.t.Helper()
	for _, m := range s.thread().Messages {
		if m.Text == text {
			return true
		}
	}
	return false
}

// wantMessage checks that t1 holds text, posted under credential.
func (s *story) wantMessage(text, credential string) {
	s.t.Helper()
	th := s.thread()
	for _, m := range th.Messages {
		if m.Text == text {
			if m.Author != "cred:"+credential {
				s.t.Errorf("message %q by %s, want cred:%s", text, m.Author, credential)
			}
			return
		}
	}
	s.t.Errorf("t1 lacks the message %q: %+v", text, th.Messages)
}

// format is the model API each agent kind speaks.
var format = map[string]string{"codex": agenttest.FormatResponses, "claude": agenttest.FormatMessages, "opencode": agenttest.FormatChat}

// waitModel waits until kind's agent sent the model a request holding
// prompt: its turn is with the model.
func (s *story) waitModel(kind, prompt string) {
	s.t.Helper()
	s.waitFor(kind+"'s request "+strconv.Quote(prompt), func() bool {
		for _, r := range s.model.Requests() {
			if r.Format == format[kind] && bytes.Contains(r.Body, []byte(prompt)) {
				return true
			}
		}
		return false
	})
}

// lastRequest is the body of kind's agent's last model request.
func (s *story) lastRequest(kind string) []byte {
	rs := s.model.Requests()
	for i := len(rs) - 1; i >= 0; i-- {
		if rs[i].Format == format[kind] {
			return rs[i].Body
		}
	}
	return nil
}

// refused reports whether one of the tool results holds words.
func (s *story) refused(results []string, words string) bool {
	return slices.ContainsFunc(results, func(r string) bool { return strings.Contains(r, words) })
}

// startedMsgs are the drivers' log messages that name an agent process
// they started ("pid").
var startedMsgs = map[string]bool{"codex app-server started": true, "provider process started": true, "claude started": true}

// pids are the process (group) ids of a session's agent processes, from
// the server's log.
func (s *story) pids(session string) []int {
	var out []int
	for _, line := range strings.Split(s.logs.String(), "\n") {
		var rec struct {
			Msg     string
			Session string
			PID     int
		}
		if json.Unmarshal([]byte(line), &rec) != nil || rec.Session != session || rec.PID == 0 {
			continue
		}
		if startedMsgs[rec.Msg] {
			out = append(out, rec.PID)
		}
	}
	if len(out) == 0 {
		s.t.Fatalf("the log names no process of session %s", session)
	}
	return out
}

// tokenFiles are the agent kinds whose driver writes the token into a
// 0600 file in the session's private directory (Claude Code's
// --mcp-config); the others keep it in memory or the environment only.
var tokenFiles = map[string]bool{"claude": true}

// addToken records a token minted for kind's agent.
func (s *story) addToken(kind, authorization string) {
	s.tokens[strings.TrimPrefix(authorization, "Bearer ")] = kind
}

// secrets are every token and the model key, each with the agent kind
// that holds it ("" for none).
func (s *story) secrets() map[string]string {
	out := maps.Clone(s.tokens)
	out[storyKey] = ""
	return out
}

// checkLeaks: no token, nor the model key, in any argv, the server's log
// or a file under the agents' directories.
func (s *story) checkLeaks() {
	s.t.Helper()
	for secret, kind := range s.secrets() {
		var allow []string
		if tokenFiles[kind] {
			allow = []string{s.agents[kind].configDir} // its session's private directory
		}
		if leaks := agenttest.Leaks(secret, allow, s.dirs, []byte(s.logs.String())); len(leaks) > 0 {
			s.t.Errorf("a secret is out of place: %v", leaks)
		}
	}
}

//go:build linux

// The tests run the real OpenCode server against a real runtime on
// loopback and the scripted model, and check on the server through /proc,
// hence Linux only.

package opencode_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
	"github.com/agenthost/mcpruntime/actors/provider/opencode"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestOpen: OpenProviderSession returns once OpenCode's MCP connection is
// up: the session reported pending then connected, and the runtime holds
// an MCP session of OpenCode under the session's credential (it
// initialized and listed the tools with the token). The private directory
// is 0700, its configuration file 0600 and free of the token.
func TestOpen(t *testing.T) {
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	t.Logf("measured: OpenProviderSession (OpenCode started, MCP connected) took %v", s.took.Round(time.Millisecond))

	st := s.Events.Statuses()
	if len(st) < 2 || st[0].State != driver.StatusPending || st[len(st)-1].State != driver.StatusConnected || st[len(st)-1].Thread != "T" {
		t.Fatalf("statuses %+v, want pending … connected for T", st)
	}
	var mine int
	for _, m := range e.RT.MCPSessions() {
		if m.Credential == s.CredentialID {
			mine++
			if m.ClientName != "opencode" {
				t.Errorf("MCP session %+v: client %q, want opencode", m, m.ClientName)
			}
		}
	}
	if mine == 0 {
		t.Fatalf("no MCP session under credential %s: %+v", s.CredentialID, e.RT.MCPSessions())
	}

	dir := privateDir(t, in.configDir)
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("private directory %s: %v, %v; want mode 0700", dir, fi.Mode(), err)
	}
	file := filepath.Join(dir, "opencode.json")
	fi, err := os.Stat(file)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("configuration file %s: %v, %v; want mode 0600", file, fi.Mode(), err)
	}
	data, _ := os.ReadFile(file)
	token := strings.TrimPrefix(s.Authorization, "Bearer ")
	if strings.Contains(string(data), token) || strings.Contains(string(data), e.key) {
		t.Fatalf("configuration file holds a secret:\n%s", data)
	}
	var got map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"$schema": "https://opencode.ai/config.json", "autoupdate": false, "share": "disabled",
		"model": "mcpruntime/scripted", "small_model": "mcpruntime/scripted",
		"provider": map[string]any{"mcpruntime": map[string]any{
			"npm": "@ai-sdk/openai-compatible", "name": "mcpruntime",
			"options": map[string]any{"baseURL": e.Model.URL + "/v1", "apiKey": "{env:MCPRUNTIME_MODEL_API_KEY}"},
			"models":  map[string]any{"scripted": map[string]any{"name": "scripted", "tool_call": true}},
		}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("configuration file (-want +got):\n%s", diff)
	}
	if env := drivertest.Environ(t, s.pid); strings.Contains(env, token) {
		t.Fatal("the server's environment holds the MCP token")
	}
	t.Logf("measured: RSS of the OpenCode process tree after open: %d MiB", rssKiB(s.pid)/1024)
}

// TestTurn: a run started with an input is OpenCode's turn: its call
// posts to the thread through OpenCode's own MCP connection, authored by
// the session's credential, with the model key the model API got; the
// turn ends completed, reported with what the agent did, and its end ends
// the run. A prompt sent once the run is over makes the same call, which
// is refused: the model sees a result beginning with the refusal's code.
func TestTurn(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)

	start := time.Now()
	run, end := e.turn(s, `call thread_post {"text":"hi"}`)
	t.Logf("measured: turn round trip (StartTurn → tool call → answer → idle → run ended) %v", time.Since(start).Round(time.Millisecond))
	if end.Outcome != driver.TurnCompleted || end.Thread != "T" || end.Turn != run {
		t.Fatalf("turn end %+v, want completed on T for run %s", end, run)
	}
	t.Logf("measured: RSS of the OpenCode process tree after a turn: %d MiB", rssKiB(s.pid)/1024)
	th, err := e.RT.Thread(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 1 || th.Messages[0].Text != "hi" || th.Messages[0].Author != "cred:"+s.CredentialID {
		t.Fatalf("thread messages %+v, want one \"hi\" by cred:%s", th.Messages, s.CredentialID)
	}
	evs := s.events(run)
	kinds := make([]string, len(evs))
	for i, ev := range evs {
		kinds[i] = ev.Kind
	}
	want := []string{driver.EventTurnStarted, driver.EventToolCall, driver.EventToolResult, driver.EventMessage}
	if strings.Join(kinds, ",") != strings.Join(want, ",") {
		t.Fatalf("events %+v, want kinds %v", evs, want)
	}
	call, result, msg := evs[1], evs[2], evs[3]
	if !strings.HasSuffix(call.Tool, "_thread_post") || string(call.Data) != `{"text":"hi"}` {
		t.Errorf("tool call %+v, want *_thread_post with {\"text\":\"hi\"}", call)
	}
	if result.Error || !strings.Contains(result.Text, `"text":"hi"`) || result.Tool != call.Tool {
		t.Errorf("tool result %+v, want the posted message", result)
	}
	if !strings.HasPrefix(msg.Text, "saw: ") {
		t.Errorf("message %+v, want the model's \"saw: …\"", msg)
	}
	reqs := e.Model.Requests()
	if len(reqs) != 2 {
		t.Errorf("the model got %d requests, want 2 (the call, the answer; no title)", len(reqs))
	}
	for _, r := range reqs {
		if r.Format != agenttest.FormatChat || r.Header.Get("Authorization") != "Bearer "+e.key {
			t.Errorf("model request %s %s: Authorization %q, want the model key", r.Format, r.Path, r.Header.Get("Authorization"))
		}
	}

	end = s.direct(t, "after-the-run", `call thread_post {"text":"late"}`)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn after the run %+v, want completed (the agent saw a refusal)", end)
	}
	results := e.Model.ToolResults()
	if len(results) != 2 || !strings.HasPrefix(results[1], "parent_not_active") {
		t.Fatalf("tool results the model saw %q, want the second to begin with parent_not_active", results)
	}
	var refused *driver.Event
	for _, ev := range s.events("after-the-run") {
		if ev.Kind == driver.EventToolResult {
			refused = &ev
		}
	}
	if refused == nil || !refused.Error || !strings.HasPrefix(refused.Text, "parent_not_active") {
		t.Fatalf("tool result event %+v, want an error beginning with parent_not_active", refused)
	}
	if th, _ := e.RT.Thread(ctx, "T"); len(th.Messages) != 1 {
		t.Fatalf("thread messages %+v after the refused call, want the first only", th.Messages)
	}
}

// TestInterrupt: ending the run of a turn the model holds for 30s
// interrupts it (the runtime calls Interrupt, the driver aborts OpenCode's
// session): the turn ends interrupted within seconds, and the session
// takes the next turn. The interrupt comes as the first turn begins,
// when OpenCode would be loading its model had Open not loaded it: an
// abort of that first load leaves every later prompt failing.
func TestInterrupt(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	run, err := e.RT.StartTurn(ctx, "T", in.id, "sleep 30s")
	if err != nil {
		t.Fatal(err)
	}
	if !s.Events.Wait(wait, func(ev *providertest.Events) bool {
		for _, e := range ev.Events() {
			if e.Turn == run && e.Kind == driver.EventTurnStarted {
				return true
			}
		}
		return false
	}) {
		t.Fatalf("turn did not start: %+v", s.Events.Events())
	}
	start := time.Now()
	if err := e.RT.EndRun(ctx, "T", run); err != nil {
		t.Fatal(err)
	}
	end, ok := s.Events.TurnEnd(run, 10*time.Second)
	if !ok || end.Outcome != driver.TurnInterrupted {
		t.Fatalf("turn end %+v (%v), want interrupted", end, ok)
	}
	t.Logf("measured: EndRun → TurnEnded interrupted in %v", time.Since(start).Round(time.Millisecond))
	// The next turn is not ended by the idles the abort left behind: it
	// ends once the model answered.
	next, end := e.turn(s, "hello")
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("next turn %+v, want completed", end)
	}
	if evs := s.events(next); len(evs) == 0 || evs[len(evs)-1].Kind != driver.EventMessage || evs[len(evs)-1].Text != "ok: hello" {
		t.Fatalf("next turn's events %+v, want the model's answer last", evs)
	}
}

// TestRotation: a rotation mid-conversation reaches the running server
// without a restart: Rotate returns once OpenCode's MCP connection is up
// with the new token (the runtime holds an MCP session of it under the new
// credential), the old credential is revoked, and the next turn, in the
// same OpenCode session (the model sees the first turn), posts under the
// new credential.
func TestRotation(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	if _, end := e.turn(s, `call thread_post {"text":"one"}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("first turn %+v", end)
	}

	start := time.Now()
	cred, err := e.RT.Rotate(ctx, "T", in.id)
	if err != nil {
		t.Fatalf("Rotate: %v", err)
	}
	t.Logf("measured: Rotate (re-registration with the new token, connected) took %v", time.Since(start).Round(time.Millisecond))
	if cred.ID == s.CredentialID || cred.Authorization == "" {
		t.Fatalf("Rotate = %+v, want a new credential", cred)
	}
	var seen bool
	for _, m := range e.RT.MCPSessions() {
		seen = seen || m.Credential == cred.ID
	}
	if !seen {
		t.Fatalf("when Rotate returned, no MCP session under the new credential %s: %+v", cred.ID, e.RT.MCPSessions())
	}
	if last := s.Events.Statuses(); last[len(last)-1].State != driver.StatusConnected {
		t.Fatalf("statuses %+v, want connected last", last)
	}
	for _, c := range e.RT.Credentials("T") {
		switch c.ID {
		case s.CredentialID:
			if c.State != "revoked" {
				t.Errorf("old credential %+v, want revoked", c)
			}
		case cred.ID:
			if c.State != "live" {
				t.Errorf("new credential %+v, want live", c)
			}
		}
	}
	if _, err := e.RT.Authenticate(strings.TrimPrefix(s.Authorization, "Bearer ")); err == nil {
		t.Fatal("the old token still authenticates")
	}

	start = time.Now()
	if _, end := e.turn(s, `call thread_post {"text":"two"}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("second turn %+v", end)
	}
	t.Logf("measured: a later turn's round trip %v", time.Since(start).Round(time.Millisecond))
	th, err := e.RT.Thread(ctx, "T")
	if err != nil {
		t.Fatal(err)
	}
	if len(th.Messages) != 2 || th.Messages[0].Author != "cred:"+s.CredentialID || th.Messages[1].Text != "two" || th.Messages[1].Author != "cred:"+cred.ID {
		t.Fatalf("thread messages %+v, want \"one\" by cred:%s then \"two\" by cred:%s", th.Messages, s.CredentialID, cred.ID)
	}
	if n := len(e.Logs.Find("provider process started", "instance", in.id)); n != 1 {
		t.Fatalf("%d OpenCode servers started, want 1 (no restart)", n)
	}
	if len(drivertest.Live(s.pid)) == 0 {
		t.Fatal("the server is gone")
	}
	// The same OpenCode session: the model's last request carries the
	// first turn's prompt.
	bodies := e.chatBodies()
	last := bodies[len(bodies)-1]
	if !strings.Contains(last, `thread_post {\"text\":\"one\"}`) || !strings.Contains(last, `thread_post {\"text\":\"two\"}`) {
		t.Fatalf("the model's last request does not hold both turns:\n%s", last)
	}
	// Re-attach without a token: nothing changes.
	if err := s.Session.Attach(ctx, driver.Binding{Thread: "T", Instance: in.id, CredentialID: cred.ID, Endpoint: e.Endpoint}); err != nil {
		t.Fatalf("re-attach: %v", err)
	}
}

// TestTwoInstances: two instances' servers on two threads each hold their
// own token only: neither token is in any process's argv, in any file
// under the instances' directories (their HOME and XDG directories
// included), in the captured log, nor in either server's environment; a
// server's environment and configuration file hold nothing of the other.
func TestTwoInstances(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	a, b := e.register("a"), e.register("b")
	sa, sb := e.open("TA", a), e.open("TB", b)
	for _, x := range []struct {
		s  *opened
		in instance
	}{{sa, a}, {sb, b}} {
		if _, end := e.turn(x.s, `call thread_post {"text":"from `+x.in.id+`"}`); end.Outcome != driver.TurnCompleted {
			t.Fatalf("turn of %s: %+v", x.in.id, end)
		}
	}
	for _, th := range []struct{ id, author string }{{"TA", "cred:" + sa.CredentialID}, {"TB", "cred:" + sb.CredentialID}} {
		got, err := e.RT.Thread(ctx, th.id)
		if err != nil || len(got.Messages) != 1 || got.Messages[0].Author != th.author {
			t.Fatalf("thread %s: %+v (%v), want one message by %s", th.id, got.Messages, err, th.author)
		}
	}
	dirs := []string{a.configDir, a.workDir, b.configDir, b.workDir}
	for _, s := range []*opened{sa, sb} {
		token := strings.TrimPrefix(s.Authorization, "Bearer ")
		if where := agenttest.Leaks(token, nil, dirs, e.Logs.Text()); len(where) > 0 {
			t.Errorf("the token of %s leaked: %v", s.ID, where)
		}
	}
	if where := agenttest.Leaks(e.key, nil, nil, e.Logs.Text()); len(where) > 0 {
		t.Errorf("the model API key leaked: %v", where)
	}
	for _, x := range []struct {
		s, other *opened
		dir      string
	}{{sa, sb, a.configDir}, {sb, sa, b.configDir}} {
		env := drivertest.Environ(t, x.s.pid)
		cfg, err := os.ReadFile(filepath.Join(privateDir(t, x.dir), "opencode.json"))
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range []string{x.s.Authorization, x.other.Authorization} {
			tok = strings.TrimPrefix(tok, "Bearer ")
			if strings.Contains(env, tok) || strings.Contains(string(cfg), tok) {
				t.Errorf("the environment or configuration of %s holds a token", x.s.ID)
			}
		}
		if !strings.Contains(env, "\x00MCPRUNTIME_MODEL_API_KEY="+e.key+"\x00") {
			t.Errorf("the environment of %s lacks the model key", x.s.ID)
		}
	}
}

// TestClose: releasing the session stops the server: its whole process
// group is gone, its private directory removed, and no death is
// reported.
func TestClose(t *testing.T) {
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	privateDir(t, in.configDir)
	if len(drivertest.Live(s.pid)) == 0 {
		t.Fatal("no server process")
	}
	start := time.Now()
	if err := e.RT.ReleaseProviderSession(context.Background(), s.ID); err != nil {
		t.Fatal(err)
	}
	t.Logf("measured: release (SIGTERM, exit, cleanup) took %v", time.Since(start).Round(time.Millisecond))
	wantGone(t, "after release", s.pid)
	wantEmpty(t, "after release", in.configDir)
	if d := s.Events.Deaths(); len(d) > 0 {
		t.Fatalf("a released session reported deaths %v", d)
	}
}

// TestDied: a server killed from outside is reported dead; the runtime
// releases the session (its credential is revoked), and nothing of it is
// left.
func TestDied(t *testing.T) {
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	if err := syscall.Kill(s.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if !s.Events.Wait(wait, func(ev *providertest.Events) bool { return len(ev.Deaths()) > 0 }) {
		t.Fatal("no death reported")
	}
	if d := s.Events.Deaths(); len(d) != 1 || !strings.Contains(d[0].Error(), "opencode exited") {
		t.Fatalf("deaths %v, want one \"opencode exited\"", d)
	}
	wantGone(t, "after the kill", s.pid)
	// The runtime releases the session: its record goes, then its
	// credential is revoked.
	end := time.Now().Add(wait)
	for {
		_, err := e.RT.ProviderSession(s.ID)
		_, aerr := e.RT.Authenticate(strings.TrimPrefix(s.Authorization, "Bearer "))
		if err != nil && aerr != nil {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the runtime did not release the dead session: session %v, token %v", err, aerr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	wantEmpty(t, "after the death", in.configDir)
}

// TestOpenRefused: an open whose credential the endpoint refuses fails
// with OpenCode's own words for it, and leaves no process and no file.
func TestOpenRefused(t *testing.T) {
	e := newEnv(t)
	in := instance{id: "oc", configDir: t.TempDir(), workDir: t.TempDir()}
	drv, err := opencode.Factory(slog.New(e.Logs))(in.id, e.config(in))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ev := &providertest.Events{}
	s, err := drv.Open(ctx, driver.OpenRequest{SessionID: "ps_refused", Instance: in.id, Events: ev, Binding: driver.Binding{
		Thread: "T", Instance: in.id, CredentialID: "cred_x", Endpoint: e.Endpoint, Authorization: "Bearer mcprt_not-a-token",
	}})
	if err == nil {
		s.Close(ctx)
		t.Fatal("Open with a refused token succeeded")
	}
	t.Logf("Open: %v", err)
	if !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), "not-a-token") {
		t.Fatalf("Open error %q, want OpenCode's 401 text without the token", err)
	}
	if st := ev.Statuses(); len(st) == 0 || st[len(st)-1].State != driver.StatusNeedsAuth {
		t.Fatalf("statuses %+v, want needs_auth last", st)
	}
	recs := e.Logs.Find("provider process started", "session", "ps_refused")
	if len(recs) != 1 {
		t.Fatalf("%d start records", len(recs))
	}
	pid, _ := strconv.Atoi(recs[0].Attrs["pid"])
	wantGone(t, "after the failed open", pid)
	wantEmpty(t, "after the failed open", in.configDir)
}

// TestOpenWithoutKey: an open whose model key variable is unset fails
// before anything starts.
func TestOpenWithoutKey(t *testing.T) {
	e := newEnv(t)
	in := instance{id: "oc", configDir: t.TempDir(), workDir: t.TempDir()}
	drv, err := opencode.Factory(slog.New(e.Logs))(in.id, e.config(in))
	if err != nil {
		t.Fatal(err)
	}
	os.Unsetenv(apiKeyVar) // t.Setenv restores it
	_, err = drv.Open(context.Background(), driver.OpenRequest{SessionID: "ps_nokey", Instance: in.id, Events: &providertest.Events{}, Binding: driver.Binding{
		Thread: "T", Instance: in.id, CredentialID: "cred_x", Endpoint: e.Endpoint, Authorization: "Bearer mcprt_x",
	}})
	if err == nil || !strings.Contains(err.Error(), apiKeyVar+" is not set") {
		t.Fatalf("Open = %v, want an error naming %s", err, apiKeyVar)
	}
	if recs := e.Logs.Find("provider process started", "session", "ps_nokey"); len(recs) > 0 {
		t.Fatal("a server was started")
	}
	wantEmpty(t, "after the failed open", in.configDir)
}

// TestReregister: when OpenCode reloads its project (here: POST
// /instance/dispose, as a configuration change does), it forgets the live
// MCP entry; the driver notices and registers it again with the current
// token, and the next turn's call lands.
func TestReregister(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	recs := e.Logs.Find("opencode session ready", "session", s.ID)
	if len(recs) != 1 {
		t.Fatalf("%d ready records", len(recs))
	}
	req, err := http.NewRequest(http.MethodPost, recs[0].Attrs["url"]+"/instance/dispose", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(opencode.Username, s.password(t))
	before := len(s.Events.Statuses())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST /instance/dispose: %s", resp.Status)
	}
	http.DefaultClient.CloseIdleConnections()
	if !s.Events.Wait(wait, func(ev *providertest.Events) bool {
		st := ev.Statuses()[before:]
		return len(st) >= 2 && st[len(st)-1].State == driver.StatusConnected
	}) {
		t.Fatalf("statuses after the dispose %+v, want pending … connected", s.Events.Statuses()[before:])
	}
	if _, end := e.turn(s, `call thread_post {"text":"after"}`); end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v", end)
	}
	if th, _ := e.RT.Thread(ctx, "T"); len(th.Messages) != 1 || th.Messages[0].Text != "after" {
		t.Fatalf("thread messages %+v, want \"after\"", th.Messages)
	}
}

// TestPermissionRejected: a project whose opencode.json says "ask" for a
// tool gets no answer from a person: the driver rejects the request, the
// turn goes on (the tool's result is the rejection) and ends, and the
// request is reported as an error event.
func TestPermissionRejected(t *testing.T) {
	e := newEnv(t)
	in := instance{id: "oc", configDir: t.TempDir(), workDir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(in.workDir, "opencode.json"), []byte(`{"permission":{"bash":"ask"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.RT.RegisterInstance(context.Background(), in.id, mcpruntime.InstanceSpec{Driver: opencode.Kind, Config: e.config(in)}); err != nil {
		t.Fatal(err)
	}
	s := e.open("T", in)
	run, end := e.turn(s, `call bash {"command":"touch made-it","description":"touch a file"}`)
	if end.Outcome != driver.TurnCompleted {
		t.Fatalf("turn %+v, want completed", end)
	}
	var asked, rejected bool
	for _, ev := range s.events(run) {
		asked = asked || (ev.Kind == driver.EventError && strings.Contains(ev.Text, "asked permission for bash"))
		rejected = rejected || (ev.Kind == driver.EventToolResult && ev.Tool == "bash" && ev.Error)
	}
	if !asked || !rejected {
		t.Fatalf("events %+v, want the request reported and the bash call failed", s.events(run))
	}
	if _, err := os.Stat(filepath.Join(in.workDir, "made-it")); err == nil {
		t.Fatal("the rejected command ran")
	}
}

// TestAPIPinned: the server's own OpenAPI document (GET /doc) still has
// every endpoint, request field and event the driver uses, so an OpenCode
// upgrade that drops one fails here rather than in a turn.
func TestAPIPinned(t *testing.T) {
	e := newEnv(t)
	in := e.register("oc")
	s := e.open("T", in)
	doc := s.get(t, e, "/doc")
	var api struct {
		Paths      map[string]map[string]json.RawMessage `json:"paths"`
		Components struct {
			Schemas map[string]json.RawMessage `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(doc, &api); err != nil {
		t.Fatal(err)
	}
	for _, op := range []struct{ method, path string }{
		{"get", "/global/health"}, {"get", "/config/providers"}, {"get", "/event"},
		{"get", "/mcp"}, {"post", "/mcp"}, {"post", "/session"}, {"get", "/session/status"},
		{"post", "/session/{sessionID}/prompt_async"}, {"post", "/session/{sessionID}/abort"},
		{"post", "/permission/{requestID}/reply"}, {"post", "/question/{requestID}/reject"},
	} {
		if _, ok := api.Paths[op.path][op.method]; !ok {
			t.Errorf("GET /doc has no %s %s", strings.ToUpper(op.method), op.path)
		}
	}
	// Request bodies: the fields the driver sends.
	for _, body := range []struct {
		method, path string
		fields       []string
	}{
		{"post", "/mcp", []string{`"name"`, `"config"`}},
		{"post", "/session", []string{`"title"`, `"permission"`}},
		{"post", "/session/{sessionID}/prompt_async", []string{`"model"`, `"providerID"`, `"modelID"`, `"parts"`}},
		{"post", "/permission/{requestID}/reply", []string{`"reply"`, `"reject"`}},
	} {
		raw := string(api.Paths[body.path][body.method])
		for _, f := range body.fields {
			if !strings.Contains(raw, f) {
				t.Errorf("%s %s: its body has no %s", strings.ToUpper(body.method), body.path, f)
			}
		}
	}
	schemas := map[string][]string{
		"McpRemoteConfig":             {`"url"`, `"headers"`, `"oauth"`, `"enabled"`},
		"MCPStatusConnected":          {`"connected"`},
		"MCPStatusFailed":             {`"failed"`, `"error"`},
		"EventServerConnected":        {`"server.connected"`},
		"EventServerInstanceDisposed": {`"server.instance.disposed"`},
		"EventSessionStatus":          {`"session.status"`, `"sessionID"`},
		"EventSessionIdle":            {`"session.idle"`},
		"EventSessionError":           {`"session.error"`},
		"EventMessageUpdated":         {`"message.updated"`, `"info"`},
		"EventMessagePartUpdated":     {`"message.part.updated"`, `"part"`},
		"EventPermissionAsked":        {`"permission.asked"`, `"permission"`, `"patterns"`},
		"EventQuestionAsked":          {`"question.asked"`},
		"AssistantMessage":            {`"role"`, `"completed"`},
		"ToolPart":                    {`"tool"`, `"state"`},
		"ToolStateCompleted":          {`"output"`},
		"ToolStateError":              {`"error"`},
		"TextPart":                    {`"text"`, `"synthetic"`, `"end"`},
	}
	for name, fields := range schemas {
		raw := string(api.Components.Schemas[name])
		if raw == "" {
			t.Errorf("GET /doc has no schema %s", name)
			continue
		}
		for _, f := range fields {
			if !strings.Contains(raw, f) {
				t.Errorf("schema %s has no %s", name, f)
			}
		}
	}
}

// get calls the session's OpenCode server as the driver does (the test
// runs as the runtime's user: the password is in the server's
// environment, the URL in the driver's log).
func (s *opened) get(t *testing.T, e *env, path string) []byte {
	t.Helper()
	recs := e.Logs.Find("opencode session ready", "session", s.ID)
	if len(recs) != 1 {
		t.Fatalf("%d ready records", len(recs))
	}
	req, err := http.NewRequest(http.MethodGet, recs[0].Attrs["url"]+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.SetBasicAuth(opencode.Username, s.password(t))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	defer http.DefaultClient.CloseIdleConnections()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s, %v", path, resp.Status, err)
	}
	return body
}

// password is the server's basic-auth password, from its environment.
func (s *opened) password(t *testing.T) string {
	t.Helper()
	for _, kv := range strings.Split(drivertest.Environ(t, s.pid), "\x00") {
		if v, ok := strings.CutPrefix(kv, "OPENCODE_SERVER_PASSWORD="); ok {
			return v
		}
	}
	t.Fatal("no OPENCODE_SERVER_PASSWORD in the server's environment")
	return ""
}

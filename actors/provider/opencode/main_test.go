package opencode_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
	"github.com/agenthost/mcpruntime/actors/provider/opencode"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
)

// TestMain fails the package if a test leaves a goroutine behind: every
// session's loops, stream and connections must be gone once it is closed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// wait bounds every wait of the tests: OpenCode starts in a few seconds
// and a scripted turn takes a few more, on a loaded 2-core machine too.
const wait = 45 * time.Second

// apiKeyVar is the runtime's variable the tests hand the model key in.
const apiKeyVar = "OPENCODE_TEST_MODEL_KEY"

// env is a real runtime serving MCP on loopback, with the opencode
// driver registered (recorded), and the scripted model.
type env struct {
	*drivertest.Env
	key string // the model API key, in apiKeyVar
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{key: "model-key-" + strconv.FormatInt(time.Now().UnixNano(), 36)}
	e.Env = drivertest.New(t, drivertest.Options{
		Kind: opencode.Kind, Factory: opencode.Factory,
		Started: "provider process started", Deadline: wait,
		APIKeyVar: apiKeyVar, APIKey: e.key,
		OpenTimeout: wait, StrictClose: true,
	})
	return e
}

// instance is a registered opencode instance and its directories.
type instance struct {
	id        string
	configDir string // where its sessions' private directories go
	workDir   string // OpenCode's project
}

// config is the instance configuration the tests use: the real CLI, the
// scripted model over Chat Completions, offline npm (OpenCode installs
// its plugin package into its config directory at start).
func (e *env) config(in instance) json.RawMessage {
	raw, err := json.Marshal(map[string]any{
		"command":   agenttest.Binary(e.T, "opencode"),
		"dir":       in.workDir,
		"configDir": in.configDir,
		"env":       map[string]string{"npm_config_offline": "true"},
		"grace":     "5s",
		"baseURL":   e.Model.URL + "/v1",
		"model":     "scripted",
		"apiKeyEnv": apiKeyVar,
	})
	if err != nil {
		e.T.Fatal(err)
	}
	return raw
}

func (e *env) register(id string) instance {
	e.T.Helper()
	in := instance{id: id, configDir: e.T.TempDir(), workDir: e.T.TempDir()}
	if err := e.RT.RegisterInstance(context.Background(), id, mcpruntime.InstanceSpec{Driver: opencode.Kind, Config: e.config(in)}); err != nil {
		e.T.Fatalf("RegisterInstance(%s): %v", id, err)
	}
	return in
}

// opened is a provider session the runtime opened on a thread.
type opened struct {
	mcpruntime.ProviderSession
	thread   string
	instance string
	*drivertest.Opened
	pid  int
	took time.Duration // OpenProviderSession's time: OpenCode up and connected
}

// open creates thread (if new) and opens inst's session on it.
func (e *env) open(thread string, in instance) *opened {
	e.T.Helper()
	ctx := context.Background()
	if _, err := e.RT.Thread(ctx, thread); err != nil {
		if _, err := e.RT.CreateThread(ctx, thread, mcpruntime.ThreadOptions{Instance: in.id}); err != nil {
			e.T.Fatalf("CreateThread(%s): %v", thread, err)
		}
	}
	start := time.Now()
	ps, err := e.RT.OpenProviderSession(ctx, thread, in.id)
	if err != nil {
		e.T.Fatalf("OpenProviderSession(%s, %s): %v", thread, in.id, err)
	}
	took := time.Since(start)
	if ps.Authorization == "" {
		e.T.Fatalf("OpenProviderSession(%s, %s) minted no token: %+v", thread, in.id, ps)
	}
	recs := e.Logs.Find("provider process started", "session", ps.ID)
	if len(recs) != 1 {
		e.T.Fatalf("%d process start records for %s, want 1", len(recs), ps.ID)
	}
	pid, err := strconv.Atoi(recs[0].Attrs["pid"])
	if err != nil {
		e.T.Fatal(err)
	}
	return &opened{ProviderSession: ps, thread: thread, instance: in.id, Opened: e.Session(ps.ID), pid: pid, took: took}
}

// turn runs input as the agent's turn of a new run (the runtime's
// StartTurn), waits for the turn's end and for the runtime to end the run
// with it, and returns the run id and the end.
func (e *env) turn(s *opened, input string) (string, driver.TurnEnd) {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	run, err := e.RT.StartTurn(ctx, s.thread, s.instance, input)
	if err != nil {
		e.T.Fatalf("StartTurn(%s, %s, %q): %v", s.thread, s.instance, input, err)
	}
	end := s.waitEnd(e.T, run)
	e.WaitNoRun(s.thread)
	return run, end
}

// waitEnd waits for the end of turn.
func (s *opened) waitEnd(t *testing.T, turn string) driver.TurnEnd {
	t.Helper()
	end, ok := s.Events.TurnEnd(turn, wait)
	if !ok {
		t.Fatalf("turn %s did not end; events %+v", turn, s.Events.Events())
	}
	return end
}

// direct sends input to s's agent as turn id, outside the runtime (no
// run), and waits for the turn's end.
func (s *opened) direct(t *testing.T, id, input string) driver.TurnEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if err := s.Session.(driver.Turner).StartTurn(ctx, driver.Turn{Thread: s.thread, ID: id, Input: input}); err != nil {
		t.Fatalf("StartTurn(%s, %q): %v", id, input, err)
	}
	return s.waitEnd(t, id)
}

// chatBodies are the bodies of the model's Chat Completions requests.
func (e *env) chatBodies() []string {
	var out []string
	for _, r := range e.Model.Requests() {
		if r.Format == agenttest.FormatChat {
			out = append(out, string(r.Body))
		}
	}
	return out
}

// events returns the events s reported during turn.
func (s *opened) events(turn string) []driver.Event {
	var out []driver.Event
	for _, e := range s.Events.Events() {
		if e.Turn == turn {
			out = append(out, e)
		}
	}
	return out
}

// waitStatus waits until the last status s reported is state.
func (s *opened) waitStatus(t *testing.T, state string) driver.Status {
	t.Helper()
	var last driver.Status
	if !s.Events.Wait(wait, func(ev *providertest.Events) bool {
		st := ev.Statuses()
		if len(st) == 0 {
			return false
		}
		last = st[len(st)-1]
		return last.State == state
	}) {
		t.Fatalf("last status %+v, want %s; all %+v", last, state, s.Events.Statuses())
	}
	return last
}

// privateDir returns the one private directory under configDir.
func privateDir(t *testing.T, configDir string) string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(configDir, "opencode-*"))
	if err != nil || len(dirs) != 1 {
		t.Fatalf("private directories in %s: %v (%v), want one", configDir, dirs, err)
	}
	return dirs[0]
}

// wantEmpty requires that dir holds nothing.
func wantEmpty(t *testing.T, what, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("%s: %s holds %v", what, dir, names)
	}
}

// wantGone waits until no process of group pgid is left and pid is
// reaped.
func wantGone(t *testing.T, what string, pgid int) {
	t.Helper()
	end := time.Now().Add(wait)
	for len(drivertest.Live(pgid)) > 0 {
		if time.Now().After(end) {
			t.Fatalf("%s: processes %v of group %d still run", what, drivertest.Live(pgid), pgid)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(pgid, 0); err == nil {
		t.Fatalf("%s: process %d still exists", what, pgid)
	}
}

// rssKiB is the resident memory of the live processes of group pgid.
func rssKiB(pgid int) int { return drivertest.RSSKiB(drivertest.Live(pgid)) }

//go:build linux

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// stubbornAgent is the exec config of a process that ignores SIGTERM and
// says so on stdout ("term"), after saying "ready <pid>" once it runs. Its
// grace is an hour: only SIGKILL ends it.
func stubbornAgent(t *testing.T) json.RawMessage {
	t.Helper()
	sh, err := exec.LookPath("sh")
	noErr(t, err)
	raw, err := json.Marshal(map[string]any{
		"command":   sh,
		"args":      []string{"-c", `trap 'echo term' TERM; echo "ready $$"; while :; do sleep 0.01; done`},
		"configDir": t.TempDir(),
		"grace":     "1h",
	})
	noErr(t, err)
	return raw
}

// outputIndex returns the index, among every record logs captured, of the
// first record with message msg whose attribute key is value (and, for
// "provider output", whose line is line); -1 if there is none.
func (c *logCapture) index(msg, key, value, line string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, r := range c.recs {
		if r.msg == msg && r.attrs[key] == value && (line == "" || r.attrs["line"] == line) {
			return i
		}
	}
	return -1
}

// TestReleaseRevokesBeforeClose: releasing a provider session — by the
// host, or as idle — revokes its credential before the driver's Close
// begins, so while an agent that ignores SIGTERM is given its grace its
// token is already refused; the release answers once the process is gone,
// and "provider session closed" is logged only then. It looks at the token
// once the agent got SIGTERM, a moment after Close began; the order itself
// is TestReleaseRefusedAtClose's.
func TestReleaseRevokesBeforeClose(t *testing.T) {
	for _, how := range []string{"release", "idle"} {
		t.Run(how, func(t *testing.T) {
			ctx := context.Background()
			logs := &logCapture{}
			clk := newFakeClock()
			rt := newRuntime(t, mcpruntime.Config{Logger: slog.New(logs.handler()), Now: clk.Now, ProviderIdle: time.Minute})
			noErr(t, rt.RegisterInstance(ctx, "I", mcpruntime.InstanceSpec{Driver: "exec", Config: stubbornAgent(t)}))
			createThreads(t, rt, "T")
			ps, tok := openMinted(t, rt, "T", "I")
			var pid int
			waitUntil(t, "the agent says it is ready", func() bool {
				for _, r := range logs.records("provider output", "session", ps.ID) {
					if p, ok := strings.CutPrefix(r.attrs["line"], "ready "); ok {
						pid, _ = strconv.Atoi(p)
						return pid > 0
					}
				}
				return false
			})
			assertLive(t, rt, "before the release", tok)

			done := make(chan error, 1)
			go func() {
				switch how {
				case "release":
					done <- rt.ReleaseProviderSession(ctx, ps.ID)
				case "idle":
					clk.Advance(2 * time.Minute)
					ids, err := rt.ReleaseIdleProviderSessions(ctx)
					if err == nil && (len(ids) != 1 || ids[0] != ps.ID) {
						t.Errorf("ReleaseIdleProviderSessions released %v, want [%s]", ids, ps.ID)
					}
					done <- err
				}
			}()
			// The agent got SIGTERM (the driver's Close is running) and ignores it.
			waitUntil(t, "the agent reports SIGTERM", func() bool {
				return logs.index("provider output", "session", ps.ID, "term") >= 0
			})
			assertDead(t, rt, "while the agent ignores SIGTERM", tok)
			select {
			case err := <-done:
				t.Fatalf("%s returned (%v) while the agent still runs", how, err)
			default:
			}
			if logs.index("provider session closed", "session", ps.ID, "") >= 0 {
				t.Errorf("\"provider session closed\" logged while the agent still runs")
			}

			// The process goes; only now does the release answer.
			noErr(t, syscall.Kill(pid, syscall.SIGKILL))
			select {
			case err := <-done:
				noErr(t, err)
			case <-time.After(30 * time.Second): // detects a hang only
				t.Fatalf("%s did not return after the agent was killed", how)
			}
			wantReaped(t, "the agent after the release", pid)
			closing := logs.index("provider session closing", "session", ps.ID, "")
			term := logs.index("provider output", "session", ps.ID, "term")
			exited := logs.index("provider process exited", "session", ps.ID, "")
			closed := logs.index("provider session closed", "session", ps.ID, "")
			if closing < 0 || !(closing < term && term < exited && exited < closed) {
				t.Errorf("log order: closing %d, SIGTERM %d, exited %d, closed %d; want them in this order", closing, term, exited, closed)
			}
			assertDead(t, rt, "after the release", tok)
		})
	}
}

// TestShutdownDeadlineKills: Shutdown gives a provider session its driver's
// close budget only until ctx is done; then the exec agent that ignores
// SIGTERM (grace: an hour) is killed, and Shutdown returns with every
// token revoked.
func TestShutdownDeadlineKills(t *testing.T) {
	ctx := context.Background()
	logs := &logCapture{}
	rt := newRuntime(t, mcpruntime.Config{Logger: slog.New(logs.handler())})
	noErr(t, rt.RegisterInstance(ctx, "I", mcpruntime.InstanceSpec{Driver: "exec", Config: stubbornAgent(t)}))
	createThreads(t, rt, "T")
	ps, tok := openMinted(t, rt, "T", "I")
	waitUntil(t, "the agent says it is ready", func() bool {
		return len(logs.records("provider output", "session", ps.ID)) > 0
	})
	sctx, deadline := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rt.Shutdown(sctx) }()
	waitUntil(t, "the agent reports SIGTERM", func() bool {
		return logs.index("provider output", "session", ps.ID, "term") >= 0
	})
	assertDead(t, rt, "during the shutdown", tok)
	select {
	case err := <-done:
		t.Fatalf("Shutdown returned (%v) before its deadline, with the agent running", err)
	default:
	}
	deadline()
	select {
	case err := <-done:
		noErr(t, err)
	case <-time.After(30 * time.Second): // detects a hang only
		t.Fatal("Shutdown did not return after its deadline")
	}
	if len(logs.records("provider process did not stop on SIGTERM; killing", "session", ps.ID)) != 1 {
		t.Error("the agent was not killed at the deadline")
	}
	if n := len(logs.records("provider process exited", "session", ps.ID)); n != 1 {
		t.Errorf("%d exits logged, want 1", n)
	}
	if _, err := rt.Threads(ctx); !errors.Is(err, mcpruntime.ErrClosed) {
		t.Errorf("Threads after Shutdown = %v, want ErrClosed", err)
	}
}

//go:build linux

package execdriver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// idle is the tail of a script that has nothing more to do: it waits to be
// signalled. A background sleep lets the shell run a trap as soon as a
// signal arrives; "ready" is printed once the sleep is running as sleep
// (not a shell between fork and exec, which would not yet die of SIGTERM),
// so that from then on a SIGTERM to the group ends everything but a shell
// that traps it.
const idle = `sleep 60 &
while read c < /proc/$!/comm; [ "$c" != sleep ]; do :; done
echo ready
wait`

// idleHour is idle for an hour: the agent of a test that detects a hang
// must outlive the detector, or its own exit would end the wait.
const idleHour = `sleep 3600 &
while read c < /proc/$!/comm; [ "$c" != sleep ]; do :; done
echo ready
wait`

// TestOpenWritesConfigFile: the MCP config file is written 0600 into
// configDir, named after the session, holds exactly the binding's endpoint
// and Authorization under serverName, and its path replaces the
// placeholder in every argument and is in MCPRUNTIME_MCP_CONFIG.
func TestOpenWritesConfigFile(t *testing.T) {
	agent := script(t, `for a in "$@"; do echo "arg:$a"; done
echo "env:$MCPRUNTIME_MCP_CONFIG"
`+idle)
	f := newFixture(t, map[string]any{
		"command":    agent,
		"args":       []string{"--mcp-config={mcpConfig}", "{mcpConfig}", "plain", "{mcpConfig}:{mcpConfig}"},
		"serverName": "host",
	})
	b := binding("T1", "tok-1")
	f.open("ps_1", b, &events{})
	f.log.waitLine(t, "ps_1", "stdout", "ready")

	files := configFiles(t, f.configDir)
	if len(files) != 1 {
		t.Fatalf("config dir holds %v, want one file", files)
	}
	path := files[0]
	if base := filepath.Base(path); !strings.HasPrefix(base, "mcp-ps_1-") || !strings.HasSuffix(base, ".json") {
		t.Errorf("config file name %q, want mcp-ps_1-*.json", base)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("config file mode %v, want 0600", fi.Mode().Perm())
	}
	if diff := cmp.Diff(mcpConfigOf("host", b), readJSON(t, path)); diff != "" {
		t.Errorf("config file (-want +got):\n%s", diff)
	}
	want := []string{"arg:--mcp-config=" + path, "arg:" + path, "arg:plain", "arg:" + path + ":" + path, "env:" + path, "ready"}
	if diff := cmp.Diff(want, f.log.lines("ps_1", "stdout")); diff != "" {
		t.Errorf("process output (-want +got):\n%s", diff)
	}
}

// TestEnvironment: the process's environment is exactly the inherited
// variables present in the runtime's environment, the configured ones, and
// its own session's MCPRUNTIME_* — a secret of the runtime's environment
// is never passed on, and a configured variable overrides an inherited one.
func TestEnvironment(t *testing.T) {
	t.Setenv("EXECDRIVER_TEST_SECRET", "hunter2-secret")
	t.Setenv("EXECDRIVER_TEST_INHERITED", "inherited value")
	t.Setenv("LANG", "en_US.UTF-8")
	t.Setenv("RUNTIME_ADMIN_TOKEN", "admin-secret")
	t.Setenv("MCPRUNTIME_AUTHORIZATION", "Bearer the-runtime-own")
	os.Unsetenv("EXECDRIVER_TEST_UNSET")

	agent := script(t, `env | sed 's/^/env:/'
`+idle)
	f := newFixture(t, map[string]any{
		"command":    agent,
		"inheritEnv": []string{"PATH", "LANG", "EXECDRIVER_TEST_INHERITED", "EXECDRIVER_TEST_UNSET"},
		"env":        map[string]string{"EXTRA": "x y=z", "LANG": "C.UTF-8"},
	})
	b := binding("T1", "tok-1")
	f.open("ps_1", b, &events{})
	f.log.waitLine(t, "ps_1", "stdout", "ready")
	file := configFiles(t, f.configDir)[0]

	want := map[string]string{
		"PATH":                      os.Getenv("PATH"),
		"LANG":                      "C.UTF-8",
		"EXECDRIVER_TEST_INHERITED": "inherited value",
		"EXTRA":                     "x y=z",
		"MCPRUNTIME_URL":            testEndpoint,
		"MCPRUNTIME_AUTHORIZATION":  "Bearer tok-1",
		"MCPRUNTIME_MCP_CONFIG":     file,
		"MCPRUNTIME_SERVER_NAME":    "mcpruntime",
		"MCPRUNTIME_THREAD":         "T1",
		"MCPRUNTIME_INSTANCE":       testInstance,
		"MCPRUNTIME_SESSION":        "ps_1",
	}
	if diff := cmp.Diff(want, procEnviron(t, f.log.pid(t, "ps_1"))); diff != "" {
		t.Errorf("process environment (-want +got):\n%s", diff)
	}
	// What the process itself prints: the shell adds PWD, nothing else.
	got := map[string]string{}
	for _, l := range f.log.lines("ps_1", "stdout") {
		if kv, ok := strings.CutPrefix(l, "env:"); ok {
			k, v, _ := strings.Cut(kv, "=")
			got[k] = v
		}
	}
	delete(got, "PWD")
	delete(got, "OLDPWD")
	// The log never holds a session's token: what the process printed of
	// it is redacted.
	want["MCPRUNTIME_AUTHORIZATION"] = "Bearer [redacted]"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("environment the process printed (-want +got):\n%s", diff)
	}
}

// TestEnvironmentDefaultInherit: without inheritEnv only the default list
// passes; the runtime's secrets and its own MCPRUNTIME_*/RUNTIME_* never do.
func TestEnvironmentDefaultInherit(t *testing.T) {
	t.Setenv("EXECDRIVER_TEST_SECRET", "hunter2-secret")
	t.Setenv("RUNTIME_ADMIN_TOKEN", "admin-secret")
	t.Setenv("MCPRUNTIME_AUTHORIZATION", "Bearer the-runtime-own")
	t.Setenv("HOME", "/home/execdriver-test")
	t.Setenv("TZ", "UTC")

	agent := script(t, idle)
	f := newFixture(t, map[string]any{"command": agent})
	f.open("ps_1", binding("T1", "tok-1"), &events{})
	file := configFiles(t, f.configDir)[0]

	want := map[string]string{}
	for _, name := range agentproc.DefaultInheritEnv {
		if v, ok := os.LookupEnv(name); ok {
			want[name] = v
		}
	}
	for k, v := range map[string]string{
		"MCPRUNTIME_URL": testEndpoint, "MCPRUNTIME_AUTHORIZATION": "Bearer tok-1",
		"MCPRUNTIME_MCP_CONFIG": file, "MCPRUNTIME_SERVER_NAME": "mcpruntime", "MCPRUNTIME_THREAD": "T1",
		"MCPRUNTIME_INSTANCE": testInstance, "MCPRUNTIME_SESSION": "ps_1",
	} {
		want[k] = v
	}
	if want["HOME"] != "/home/execdriver-test" || want["TZ"] != "UTC" {
		t.Fatalf("test setup: HOME/TZ not in the default list %v", agentproc.DefaultInheritEnv)
	}
	if diff := cmp.Diff(want, procEnviron(t, f.log.pid(t, "ps_1"))); diff != "" {
		t.Errorf("process environment (-want +got):\n%s", diff)
	}
}

// TestSessionsIsolated: two sessions of one instance each see their own
// token, in the environment and in the config file, and never the other's
// or the runtime's secrets — checked through what each process prints.
func TestSessionsIsolated(t *testing.T) {
	t.Setenv("EXECDRIVER_TEST_SECRET", "hunter2-secret")
	t.Setenv("MCPRUNTIME_AUTHORIZATION", "Bearer the-runtime-own")
	agent := script(t, `env
cat "$MCPRUNTIME_MCP_CONFIG"
ls "$(dirname "$MCPRUNTIME_MCP_CONFIG")"
echo
`+idle)
	f := newFixture(t, map[string]any{"command": agent})
	f.open("ps_a", binding("TA", "tok-AAAA"), &events{})
	f.open("ps_b", binding("TB", "tok-BBBB"), &events{})
	f.log.waitLine(t, "ps_a", "stdout", "ready")
	f.log.waitLine(t, "ps_b", "stdout", "ready")

	for _, tc := range []struct{ session, own, other string }{
		{"ps_a", "tok-AAAA", "tok-BBBB"},
		{"ps_b", "tok-BBBB", "tok-AAAA"},
	} {
		// The process printed its own token; the log has it redacted.
		out := strings.Join(f.log.lines(tc.session, "stdout"), "\n")
		if strings.Contains(out, tc.own) {
			t.Errorf("%s's own token is in the log:\n%s", tc.session, out)
		}
		if !strings.Contains(out, "MCPRUNTIME_AUTHORIZATION=Bearer [redacted]") {
			t.Errorf("%s did not see its own token in its environment:\n%s", tc.session, out)
		}
		if !strings.Contains(out, `"Authorization": "Bearer [redacted]"`) {
			t.Errorf("%s did not see its own token in its config file:\n%s", tc.session, out)
		}
		for _, leak := range []string{tc.other, "hunter2-secret", "the-runtime-own", "EXECDRIVER_TEST_SECRET"} {
			if strings.Contains(out, leak) {
				t.Errorf("%s saw %q:\n%s", tc.session, leak, out)
			}
		}
	}
}

// TestOutputLogged: every line on stdout and stderr is a record with the
// instance, session and stream; a trailing CR is dropped; a last line
// without a newline is logged when the process exits.
func TestOutputLogged(t *testing.T) {
	agent := script(t, `echo out-line
echo err-line >&2
printf 'crlf-line\r\n'
printf '\n'
echo "  spaced  "
echo ready
while [ ! -e "$STOP" ]; do sleep 0.01; done
printf 'no-newline'`)
	stop := filepath.Join(t.TempDir(), "stop")
	f := newFixture(t, map[string]any{"command": agent, "env": map[string]string{"STOP": stop}})
	ev := &events{}
	f.open("ps_1", binding("T1", "tok-1"), ev)
	f.log.waitLine(t, "ps_1", "stdout", "ready")

	started := f.log.find("ps_1", "provider process started")
	if len(started) != 1 || started[0].Attrs["instance"] != testInstance || started[0].Attrs["thread"] != "T1" {
		t.Errorf("started records = %+v, want one with instance %s and thread T1", started, testInstance)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ev.waitDied(t)

	if diff := cmp.Diff([]string{"out-line", "crlf-line", "", "  spaced  ", "ready", "no-newline"}, f.log.lines("ps_1", "stdout")); diff != "" {
		t.Errorf("stdout records (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"err-line"}, f.log.lines("ps_1", "stderr")); diff != "" {
		t.Errorf("stderr records (-want +got):\n%s", diff)
	}
	for _, r := range f.log.find("ps_1", "provider output") {
		if r.Attrs["instance"] != testInstance {
			t.Errorf("output record %+v has no instance %s", r, testInstance)
		}
	}
}

// TestLongLineCut: a line longer than 4096 bytes is logged as one record,
// its first 4096 bytes (never half a rune) and "…"; the next line is
// logged on its own, whole.
func TestLongLineCut(t *testing.T) {
	dir := t.TempDir()
	ascii := strings.Repeat("a", 5000)
	runes := "a" + strings.Repeat("é", 3000) // byte 4096 falls inside an é
	huge := strings.Repeat("b", 100_000)     // arrives in several reads
	for name, s := range map[string]string{"ascii": ascii, "runes": runes, "huge": huge} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// Each long line's newline is written separately, after the line.
	agent := script(t, `cd "$DATA"
cat ascii; echo; echo after-ascii
cat runes; echo; echo after-runes
cat huge; echo; echo after-huge
`+idle)
	f := newFixture(t, map[string]any{"command": agent, "env": map[string]string{"DATA": dir}})
	f.open("ps_1", binding("T1", "tok-1"), &events{})
	f.log.waitLine(t, "ps_1", "stdout", "ready")

	wantRunes := "a" + strings.Repeat("é", 2047) + "…"
	want := []string{ascii[:4096] + "…", "after-ascii", wantRunes, "after-runes", huge[:4096] + "…", "after-huge", "ready"}
	got := f.log.lines("ps_1", "stdout")
	for _, l := range got {
		if !utf8.ValidString(l) {
			t.Errorf("logged line is not valid UTF-8: %q…", l[:min(len(l), 40)])
		}
		if len(l) > 4096+len("…") {
			t.Errorf("logged line of %d bytes, want at most 4096 and the mark", len(l))
		}
	}
	if !slices.Equal(want, got) {
		short := func(ls []string) []string {
			out := make([]string, len(ls))
			for i, l := range ls {
				out[i] = fmt.Sprintf("%d bytes %.12q…%q", len(l), l, l[max(0, len(l)-8):])
			}
			return out
		}
		t.Errorf("stdout records:\n got %q\nwant %q", short(got), short(want))
	}
}

// TestExitAtOnce: a process that exits within startupWait fails the open
// with its exit status and the tail of its stderr; its config file is
// removed and Died is never called.
func TestExitAtOnce(t *testing.T) {
	agent := script(t, `for i in 01 02 03 04 05 06 07 08 09 10; do echo "L$i" >&2; done
echo "not on stderr"
exit 3`)
	f := newFixture(t, map[string]any{"command": agent, "startupWait": "10s"})
	ev := &events{}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	s, err := f.drv.Open(ctx, driver.OpenRequest{SessionID: "ps_1", Instance: testInstance, Binding: binding("T1", "tok-1"), Events: ev})
	if err == nil {
		s.Close(ctx)
		t.Fatal("Open of a process that exits at once succeeded")
	}
	msg := err.Error()
	for _, want := range []string{"exit status 3", "L03", "L10"} {
		if !strings.Contains(msg, want) {
			t.Errorf("Open error %q does not mention %q", msg, want)
		}
	}
	for _, not := range []string{"L02", "not on stderr"} {
		if strings.Contains(msg, not) {
			t.Errorf("Open error %q mentions %q: only the last 8 stderr lines belong there", msg, not)
		}
	}
	assertReaped(t, f.log.pid(t, "ps_1"))
	assertEmptyDir(t, f.configDir)
	if rec := f.log.exited(t, "ps_1"); rec.Attrs["died"] != "false" || rec.Attrs["status"] != "exit status 3" {
		t.Errorf("exit record %+v, want status \"exit status 3\" and died=false", rec.Attrs)
	}
	if d := ev.died(); len(d) != 0 {
		t.Errorf("Died called %v for a failed open", d)
	}
}

// TestExitAtOnceSuccess: even status 0 within startupWait fails the open.
func TestExitAtOnceSuccess(t *testing.T) {
	f := newFixture(t, map[string]any{"command": script(t, "exit 0"), "startupWait": "10s"})
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	_, err := f.drv.Open(ctx, driver.OpenRequest{SessionID: "ps_1", Instance: testInstance, Binding: binding("T1", "tok-1"), Events: &events{}})
	if err == nil || !strings.Contains(err.Error(), "exited") {
		t.Fatalf("Open = %v, want an error saying the process exited", err)
	}
	assertEmptyDir(t, f.configDir)
}

// TestDied: a process that exits after startupWait is reported with
// Died, once, with its status and stderr; its config file is gone, it is
// reaped, Attach with a new token is refused and Close is a no-op that
// reports nothing more.
func TestDied(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "stop")
	agent := script(t, `echo ready
while [ ! -e "$STOP" ]; do sleep 0.01; done
echo "dying now" >&2
exit 7`)
	f := newFixture(t, map[string]any{"command": agent, "env": map[string]string{"STOP": stop}})
	ev := &events{}
	s := f.open("ps_1", binding("T1", "tok-1"), ev)
	pid := f.log.pid(t, "ps_1")
	f.log.waitLine(t, "ps_1", "stdout", "ready")
	if d := ev.died(); len(d) != 0 {
		t.Fatalf("Died(%v) before the process exited", d)
	}
	if err := os.WriteFile(stop, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := ev.waitDied(t)
	if err == nil || !strings.Contains(err.Error(), "exit status 7") || !strings.Contains(err.Error(), "dying now") {
		t.Errorf("Died(%v), want the exit status 7 and the stderr tail", err)
	}
	// Reaped and cleaned up before it was reported.
	assertReaped(t, pid)
	assertEmptyDir(t, f.configDir)
	if rec := f.log.exited(t, "ps_1"); rec.Attrs["died"] != "true" || rec.Attrs["pid"] != strconv.Itoa(pid) {
		t.Errorf("exit record %+v, want died=true and pid %d", rec.Attrs, pid)
	}

	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	if err := s.Attach(ctx, binding("T1", "tok-2")); err == nil {
		t.Error("Attach with a new token to a dead session succeeded")
	}
	assertEmptyDir(t, f.configDir) // and wrote no file
	closeSession(t, s)
	if d := ev.died(); len(d) != 1 {
		t.Errorf("Died called %d times (%v), want once", len(d), d)
	}
}

// TestDiedKilled: a process killed by a signal is reported with Died.
func TestDiedKilled(t *testing.T) {
	f := newFixture(t, map[string]any{"command": script(t, idle)})
	ev := &events{}
	f.open("ps_1", binding("T1", "tok-1"), ev)
	pid := f.log.pid(t, "ps_1")
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := ev.waitDied(t)
	if err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Died(%v), want it to say the process was killed", err)
	}
	assertReaped(t, pid)
	assertEmptyDir(t, f.configDir)
}

// TestCloseSIGTERM: Close sends SIGTERM; a process that traps it finishes
// its own cleanup and exits within the grace, is not SIGKILLed, and is
// not reported dead.
func TestCloseSIGTERM(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mark")
	agent := script(t, `trap 'echo term > "$MARK"; exit 0' TERM
`+idle)
	f := newFixture(t, map[string]any{"command": agent, "grace": "30s", "env": map[string]string{"MARK": mark}})
	ev := &events{}
	s := f.open("ps_1", binding("T1", "tok-1"), ev)
	pid := f.log.pid(t, "ps_1")
	f.log.waitLine(t, "ps_1", "stdout", "ready")

	closeSession(t, s)
	if data, err := os.ReadFile(mark); err != nil || string(data) != "term\n" {
		t.Errorf("marker = %q, %v; want the TERM trap to have run", data, err)
	}
	assertReaped(t, pid)
	assertEmptyDir(t, f.configDir)
	if rec := f.log.exited(t, "ps_1"); rec.Attrs["died"] != "false" || rec.Attrs["status"] != "exit status 0" {
		t.Errorf("exit record %+v, want status 0 and died=false", rec.Attrs)
	}
	if n := len(f.log.find("ps_1", "provider process did not stop on SIGTERM; killing")); n != 0 {
		t.Error("a process that honoured SIGTERM was SIGKILLed")
	}
	if d := ev.died(); len(d) != 0 {
		t.Errorf("Died(%v) after Close", d)
	}
}

// TestCloseSIGKILL: a process ignoring SIGTERM is SIGKILLed once the
// grace has passed, with its children.
func TestCloseSIGKILL(t *testing.T) {
	agent := script(t, `trap '' TERM
sleep 60 >/dev/null 2>&1 &
echo "child:$!"
`+idle)
	const grace = 200 * time.Millisecond
	f := newFixture(t, map[string]any{"command": agent, "grace": grace.String()})
	ev := &events{}
	s := f.open("ps_1", binding("T1", "tok-1"), ev)
	pid := f.log.pid(t, "ps_1")
	child, _ := strconv.Atoi(f.log.waitPrefix(t, "ps_1", "child:"))
	f.log.waitLine(t, "ps_1", "stdout", "ready")

	start := time.Now()
	closeSession(t, s)
	if el := time.Since(start); el < grace {
		t.Errorf("Close returned after %v, before the grace of %v", el, grace)
	}
	assertReaped(t, pid)
	assertDead(t, "background child", child)
	assertEmptyDir(t, f.configDir)
	if n := len(f.log.find("ps_1", "provider process did not stop on SIGTERM; killing")); n != 1 {
		t.Errorf("%d SIGKILL warnings, want 1", n)
	}
	if rec := f.log.exited(t, "ps_1"); rec.Attrs["died"] != "false" || !strings.Contains(rec.Attrs["status"], "killed") {
		t.Errorf("exit record %+v, want a kill and died=false", rec.Attrs)
	}
	if d := ev.died(); len(d) != 0 {
		t.Errorf("Died(%v) after Close", d)
	}
}

// TestCloseCancelled: Close with a done context does not wait the grace.
// The grace is an hour: a Close that waited it would hang, which the
// deadline detects; how long Close took is not measured.
func TestCloseCancelled(t *testing.T) {
	agent := script(t, `trap '' TERM
`+idleHour)
	f := newFixture(t, map[string]any{"command": agent, "grace": "1h"})
	s := f.open("ps_1", binding("T1", "tok-1"), &events{})
	pid := f.log.pid(t, "ps_1")
	f.log.waitLine(t, "ps_1", "stdout", "ready")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	closed := make(chan error, 1)
	go func() { closed <- s.Close(ctx) }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close = %v", err)
		}
	case <-time.After(deadline):
		t.Fatal("Close with a done context did not return: it waits the grace")
	}
	assertReaped(t, pid)
	assertEmptyDir(t, f.configDir)
}

// TestGrandchildKilledOnClose: a process the agent started in the
// background (still holding its stdout) dies with it on Close.
func TestGrandchildKilledOnClose(t *testing.T) {
	agent := script(t, `sleep 60 &
echo "child:$!"
`+idle)
	f := newFixture(t, map[string]any{"command": agent})
	s := f.open("ps_1", binding("T1", "tok-1"), &events{})
	pid := f.log.pid(t, "ps_1")
	child, _ := strconv.Atoi(f.log.waitPrefix(t, "ps_1", "child:"))
	if st := procState(child); st == 0 || st == 'Z' {
		t.Fatalf("background child %d not running (state %q) before Close", child, st)
	}
	closeSession(t, s)
	assertReaped(t, pid)
	assertDead(t, "background child", child)
	assertEmptyDir(t, f.configDir)
}

// TestGrandchildKilledOnExit: when the leader exits on its own, the rest
// of its group is killed; the death is reported with the leader's status.
func TestGrandchildKilledOnExit(t *testing.T) {
	for _, tc := range []struct {
		name, redirect string
	}{
		{"detached output", ">/dev/null 2>&1"},
		{"holding stdout", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stop := filepath.Join(t.TempDir(), "stop")
			agent := script(t, `sleep 60 `+tc.redirect+` &
echo "child:$!"
while [ ! -e "$STOP" ]; do sleep 0.01; done
exit 0`)
			f := newFixture(t, map[string]any{"command": agent, "env": map[string]string{"STOP": stop}})
			ev := &events{}
			f.open("ps_1", binding("T1", "tok-1"), ev)
			pid := f.log.pid(t, "ps_1")
			child, _ := strconv.Atoi(f.log.waitPrefix(t, "ps_1", "child:"))
			if err := os.WriteFile(stop, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			err := ev.waitDied(t)
			assertReaped(t, pid)
			assertDead(t, "background child", child)
			assertEmptyDir(t, f.configDir)
			if err == nil || !strings.Contains(err.Error(), "exit status 0") {
				t.Errorf("Died(%v), want the leader's status, exit status 0", err)
			}
		})
	}
}

// TestAttachRotates: Attach with a new Authorization rewrites the config
// file in place of the old one (a rename: same path, new file, still
// 0600, no temporary left); a reader never sees half a file.
func TestAttachRotates(t *testing.T) {
	f := newFixture(t, map[string]any{"command": script(t, idle)})
	s := f.open("ps_1", binding("T1", "tok-1"), &events{})
	path := configFiles(t, f.configDir)[0]
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	b2 := binding("T1", "tok-2")
	b2.CredentialID = "cred-2"
	if err := s.Attach(ctx, b2); err != nil {
		t.Fatalf("Attach(new token) = %v", err)
	}
	if files := configFiles(t, f.configDir); !slices.Equal(files, []string{path}) {
		t.Fatalf("config dir holds %v after a rotation, want only %s", files, path)
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if after.Mode().Perm() != 0o600 {
		t.Errorf("mode after rotation %v, want 0600", after.Mode().Perm())
	}
	if os.SameFile(before, after) {
		t.Error("the rotation wrote into the old file instead of replacing it")
	}
	if diff := cmp.Diff(mcpConfigOf("mcpruntime", b2), readJSON(t, path)); diff != "" {
		t.Errorf("config file after rotation (-want +got):\n%s", diff)
	}

	// A reader racing many rotations sees one whole file or the next.
	var (
		wg   sync.WaitGroup
		done = make(chan struct{})
		bad  []string
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			data, err := os.ReadFile(path)
			var m map[string]map[string]struct {
				Headers map[string]string `json:"headers"`
			}
			if err == nil {
				err = json.Unmarshal(data, &m)
			}
			if err == nil && !strings.HasPrefix(m["mcpServers"]["mcpruntime"].Headers["Authorization"], "Bearer tok-") {
				err = fmt.Errorf("no token in %s", data)
			}
			if err != nil {
				bad = append(bad, err.Error())
			}
		}
	}()
	for i := range 200 {
		if err := s.Attach(ctx, binding("T1", fmt.Sprintf("tok-r%d", i))); err != nil {
			t.Errorf("Attach %d = %v", i, err)
			break
		}
	}
	close(done)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("a reader saw %d broken files during rotations, first: %s", len(bad), bad[0])
	}
	if diff := cmp.Diff(mcpConfigOf("mcpruntime", binding("T1", "tok-r199")), readJSON(t, path)); diff != "" {
		t.Errorf("config file after the last rotation (-want +got):\n%s", diff)
	}
	if files := configFiles(t, f.configDir); !slices.Equal(files, []string{path}) {
		t.Fatalf("config dir holds %v after rotations, want only %s", files, path)
	}
}

// TestAttachSameToken: a re-attach with an empty Authorization leaves the
// file alone; Detach keeps the process; Attach of another thread is
// refused and changes nothing.
func TestAttachSameToken(t *testing.T) {
	f := newFixture(t, map[string]any{"command": script(t, idle)})
	ev := &events{}
	s := f.open("ps_1", binding("T1", "tok-1"), ev)
	pid := f.log.pid(t, "ps_1")
	path := configFiles(t, f.configDir)[0]
	before, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	content := readJSON(t, path)
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()

	if err := s.Detach(ctx, "T1"); err != nil {
		t.Fatalf("Detach = %v", err)
	}
	if st := procState(pid); st == 0 || st == 'Z' {
		t.Fatalf("process state %q after Detach, want it running", st)
	}
	reattach := binding("T1", "")
	reattach.Authorization = ""
	if err := s.Attach(ctx, reattach); err != nil {
		t.Fatalf("re-Attach without a token = %v", err)
	}
	if err := s.Attach(ctx, binding("T2", "tok-other")); err == nil {
		t.Error("Attach of another thread to an exclusive session succeeded")
	}
	after, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(before, after) || !after.ModTime().Equal(before.ModTime()) {
		t.Error("config file replaced by a re-attach or a refused attach")
	}
	if diff := cmp.Diff(content, readJSON(t, path)); diff != "" {
		t.Errorf("config file changed (-before +after):\n%s", diff)
	}
	if files := configFiles(t, f.configDir); !slices.Equal(files, []string{path}) {
		t.Errorf("config dir holds %v, want only %s", files, path)
	}
	if st := procState(pid); st == 0 || st == 'Z' {
		t.Errorf("process state %q after the attaches, want it running", st)
	}
	if d := ev.died(); len(d) != 0 {
		t.Errorf("Died(%v)", d)
	}
}

// TestOpenCancelled: a context cancelled during startupWait fails the open
// and kills the process; nothing is left and no death is reported.
// startupWait and the grace are an hour: an Open that waited either would
// hang, which the deadline detects; how long it took is not measured.
func TestOpenCancelled(t *testing.T) {
	for _, tc := range []struct{ name, trap string }{
		{"default TERM", ""},
		// A process ignoring SIGTERM must not hold Open for the grace:
		// the driver must return promptly once ctx is done.
		{"TERM ignored", "trap '' TERM\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, map[string]any{"command": script(t, tc.trap+idleHour), "startupWait": "1h", "grace": "1h"})
			ev := &events{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			type result struct {
				s   driver.Session
				err error
			}
			res := make(chan result, 1)
			go func() {
				s, err := f.drv.Open(ctx, driver.OpenRequest{SessionID: "ps_1", Instance: testInstance, Binding: binding("T1", "tok-1"), Events: ev})
				res <- result{s, err}
			}()
			f.log.waitLine(t, "ps_1", "stdout", "ready")
			pid := f.log.pid(t, "ps_1")
			cancel()
			var r result
			select {
			case r = <-res:
			case <-time.After(deadline):
				t.Fatal("Open did not return after its context was cancelled: it waits startupWait or the grace")
			}
			if r.err == nil {
				r.s.Close(context.Background())
				t.Fatal("Open with a cancelled context succeeded")
			}
			if !errors.Is(r.err, context.Canceled) {
				t.Errorf("Open = %v, want context.Canceled", r.err)
			}
			assertReaped(t, pid)
			assertEmptyDir(t, f.configDir)
			if rec := f.log.exited(t, "ps_1"); rec.Attrs["died"] != "false" {
				t.Errorf("exit record %+v, want died=false", rec.Attrs)
			}
		})
	}
}

// TestOpenRefused: an open without a credential, or after the config
// directory was removed, fails clearly and starts nothing.
func TestOpenRefused(t *testing.T) {
	t.Run("no Authorization", func(t *testing.T) {
		f := newFixture(t, map[string]any{"command": script(t, idle)})
		b := binding("T1", "")
		b.Authorization = ""
		_, err := f.drv.Open(context.Background(), driver.OpenRequest{SessionID: "ps_1", Instance: testInstance, Binding: b, Events: &events{}})
		if err == nil || !strings.Contains(err.Error(), "credential") {
			t.Errorf("Open without Authorization = %v, want a refusal naming the credential", err)
		}
		if n := len(f.log.find("ps_1", "provider process started")); n != 0 {
			t.Error("a process was started")
		}
		assertEmptyDir(t, f.configDir)
	})
	t.Run("configDir removed", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "mcp")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		f := newFixture(t, map[string]any{"command": script(t, idle), "configDir": dir})
		if err := os.Remove(dir); err != nil {
			t.Fatal(err)
		}
		_, err := f.drv.Open(context.Background(), driver.OpenRequest{SessionID: "ps_1", Instance: testInstance, Binding: binding("T1", "tok-1"), Events: &events{}})
		if err == nil || !strings.Contains(err.Error(), "MCP config file") || !strings.Contains(err.Error(), dir) {
			t.Errorf("Open = %v, want an error about writing the MCP config file in %s", err, dir)
		}
		if n := len(f.log.find("ps_1", "provider process started")); n != 0 {
			t.Error("a process was started")
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("config dir recreated: %v", err)
		}
	})
}

// TestRelativePaths: a relative command or configDir means what it meant
// at registration (relative to the runtime's working directory), even when
// the process runs in another dir.
func TestRelativePaths(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel := func(p string) string {
		r, err := filepath.Rel(wd, p)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(r, "/") {
			r = "./" + r
		}
		return r
	}
	agent := script(t, `echo "config:$MCPRUNTIME_MCP_CONFIG"
for a in "$@"; do echo "arg:$a"; done
`+idle)
	// Deeper than the working directory, so that the ".." of a relative
	// path do not all end at / from there as well.
	workDir := filepath.Join(t.TempDir(), "a", "b", "c", "d", "e", "f", "g", "h")
	if err := os.MkdirAll(workDir, 0o755); err != nil {
		t.Fatal(err)
	}
	configDir := t.TempDir()

	t.Run("command", func(t *testing.T) {
		f := newFixture(t, map[string]any{"command": rel(agent), "dir": workDir})
		f.open("ps_1", binding("T1", "tok-1"), &events{})
		f.log.waitLine(t, "ps_1", "stdout", "ready")
	})
	t.Run("configDir", func(t *testing.T) {
		f := newFixture(t, map[string]any{"command": agent, "dir": workDir, "configDir": rel(configDir), "args": []string{"{mcpConfig}"}})
		f.configDir = configDir
		f.open("ps_1", binding("T1", "tok-1"), &events{})
		f.log.waitLine(t, "ps_1", "stdout", "ready")
		path := f.log.waitPrefix(t, "ps_1", "config:")
		arg := f.log.waitPrefix(t, "ps_1", "arg:")
		for what, p := range map[string]string{"MCPRUNTIME_MCP_CONFIG": path, "the {mcpConfig} argument": arg} {
			// The process resolves a relative path against its own dir.
			if !filepath.IsAbs(p) {
				p = filepath.Join(workDir, p)
			}
			if _, err := os.Stat(p); err != nil {
				t.Errorf("%s names a file the process cannot find: %v", what, err)
			}
		}
	})
}

// TestAttachRacesExit: a rotation racing the process's own exit never
// leaves a config file (holding a token) behind once the death is
// reported.
func TestAttachRacesExit(t *testing.T) {
	for i := range 5 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			stop := filepath.Join(t.TempDir(), "stop")
			agent := script(t, `while [ ! -e "$STOP" ]; do sleep 0.01; done
exit 0`)
			f := newFixture(t, map[string]any{"command": agent, "env": map[string]string{"STOP": stop}})
			ev := &events{}
			s := f.open("ps_1", binding("T1", "tok-1"), ev)
			ctx, cancel := context.WithTimeout(context.Background(), deadline)
			defer cancel()
			if err := os.WriteFile(stop, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			// Rotate until the driver notices the exit.
			for n := 0; ; n++ {
				if err := s.Attach(ctx, binding("T1", fmt.Sprintf("tok-r%d", n))); err != nil {
					break
				}
				if ctx.Err() != nil {
					t.Fatal("Attach kept succeeding after the process exited")
				}
			}
			ev.waitDied(t)
			if left, _ := filepath.Glob(filepath.Join(f.configDir, "*")); len(left) > 0 {
				t.Errorf("after the death was reported, %v is left (the last rotation recreated the removed file)", left)
				for _, p := range left {
					os.Remove(p) // so the fixture's cleanup does not report it again
				}
			}
		})
	}
}

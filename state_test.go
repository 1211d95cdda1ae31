package mcpruntime_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/providertest"
	"github.com/agenthost/mcpruntime/memdb"
)

// openDurable starts a runtime on the state file path, with a test
// double of the in-process driver; the caller closes it (a restart is a
// Close and another openDurable on the same path).
func openDurable(t *testing.T, path string) *mcpruntime.Runtime {
	t.Helper()
	in := &providertest.Inproc{}
	rt, err := mcpruntime.New(mcpruntime.Config{
		StateFile: path, Logger: slog.New(slog.DiscardHandler),
		Drivers: map[string]driver.Factory{driver.InprocKind: in.Factory()},
	})
	if err != nil {
		t.Fatalf("New on %s: %v", path, err)
	}
	return rt
}

// TestStateSurvivesRestart: threads with their messages, status, archive
// and delete, client grants and their tokens, and provider instances
// outlive a restart; provider credentials do not (revoked, reason
// restart), and an active run is ended (SPEC §3.8).
func TestStateSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	rt := openDurable(t, path)
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Config: []byte(`{ }`), Capabilities: []string{"x"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ps, err := rt.OpenProviderSession(ctx, "t1", "A")
	if err != nil {
		t.Fatal(err)
	}
	agent, err := rt.Authenticate(strings.TrimPrefix(ps.Authorization, "Bearer "))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartRun(ctx, "t1", "A"); err != nil {
		t.Fatal(err)
	}
	var posted []string
	for i := range 300 { // past the 256 a thread keeps: the oldest are dropped on disk too
		text := strings.Repeat("m", i+1)
		if _, err := rt.Post(ctx, agent, "t1", text); err != nil {
			t.Fatal(err)
		}
		posted = append(posted, text)
	}
	if err := rt.Archive(ctx, "t2"); err != nil {
		t.Fatal(err)
	}
	if err := rt.DeleteThread(ctx, "t3"); err != nil {
		t.Fatal(err)
	}
	client, err := rt.IssueClient(ctx, "ide", memdb.AccessReadWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}

	rt = openDurable(t, path)
	defer rt.Close()
	t1, err := rt.Thread(ctx, "t1")
	if err != nil {
		t.Fatalf("t1 after the restart: %v", err)
	}
	if t1.Run != nil {
		t.Errorf("t1's run after the restart = %+v, want none", t1.Run)
	}
	want := posted[len(posted)-mcpruntime.DefaultMessageLog:]
	if len(t1.Messages) != len(want) {
		t.Fatalf("t1 has %d messages after the restart, want %d", len(t1.Messages), len(want))
	}
	for i, m := range t1.Messages {
		if m.Text != want[i] {
			t.Fatalf("message %d after the restart = %d bytes, want %d: out of order or lost", i, len(m.Text), len(want[i]))
		}
	}
	if t2, err := rt.Thread(ctx, "t2"); err != nil || t2.Status != memdb.ThreadArchived {
		t.Errorf("t2 after the restart = %+v, %v; want archived", t2, err)
	}
	if _, err := rt.Thread(ctx, "t3"); !errors.Is(err, mcpruntime.ErrUnknownThread) {
		t.Errorf("t3 after the restart: %v, want ErrUnknownThread", err)
	}
	if _, err := rt.Authenticate(strings.TrimPrefix(ps.Authorization, "Bearer ")); err == nil {
		t.Error("the provider credential of before the restart authenticates")
	}
	for _, c := range rt.Credentials("t1") {
		if c.ID == ps.CredentialID && c.RevokeReason != "shutdown" && c.RevokeReason != "restart" {
			t.Errorf("provider credential after the restart: %+v", c)
		}
	}
	p, err := rt.Authenticate(client.Token)
	if err != nil {
		t.Fatalf("the client token of before the restart: %v", err)
	}
	if p.Client != client.ClientID {
		t.Errorf("the client token after the restart is %+v, want grant %s", p, client.ClientID)
	}
	if _, err := rt.Instance("A"); err != nil {
		t.Errorf("instance A after the restart: %v", err)
	}
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind, Config: []byte(`{}`), Capabilities: []string{"x"}}); err != nil {
		t.Errorf("registering A again with its spec: %v, want nil", err)
	}
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); !errors.Is(err, mcpruntime.ErrInstanceExists) {
		t.Errorf("registering A again with another spec: %v, want ErrInstanceExists", err)
	}
	if _, err := rt.OpenProviderSession(ctx, "t1", "A"); err != nil {
		t.Errorf("open on t1 after the restart: %v", err)
	}
	if err := rt.RevokeClient(ctx, client.ClientID); err != nil {
		t.Fatal(err)
	}
	var backup bytes.Buffer
	if _, err := rt.Backup(&backup); err != nil {
		t.Fatal(err)
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	copyPath := filepath.Join(t.TempDir(), "copy.db")
	if err := os.WriteFile(copyPath, backup.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	rt = openDurable(t, copyPath)
	defer rt.Close()
	if _, err := rt.Authenticate(client.Token); err == nil {
		t.Error("a revoked client token authenticates on the backup")
	}
	if _, err := rt.Thread(ctx, "t1"); err != nil {
		t.Errorf("t1 on the backup: %v", err)
	}
}

// TestStateFileInUse: one process (one runtime) per state file.
func TestStateFileInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state.db")
	rt := openDurable(t, path)
	defer rt.Close()
	_, err := mcpruntime.New(mcpruntime.Config{StateFile: path, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, mcpruntime.ErrStateInUse) || !strings.Contains(err.Error(), path) {
		t.Fatalf("a second runtime on %s: %v, want ErrStateInUse naming the file", path, err)
	}
}

// TestStateCrashRevokesProviderCredentials: a crash leaves provider
// credentials live in the file (no shutdown revoked them), and the
// runtime that starts on it revokes them (reason restart) and ends the
// run before anything is served: their agents died with the process. A
// backup is the file as a crash at that moment would leave it.
func TestStateCrashRevokesProviderCredentials(t *testing.T) {
	ctx := context.Background()
	rt := openDurable(t, filepath.Join(t.TempDir(), "state.db"))
	defer rt.Close()
	if err := rt.RegisterInstance(ctx, "A", mcpruntime.InstanceSpec{Driver: driver.InprocKind}); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatal(err)
	}
	ps, err := rt.OpenProviderSession(ctx, "t1", "A")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.StartRun(ctx, "t1", "A"); err != nil {
		t.Fatal(err)
	}
	client, err := rt.IssueClient(ctx, "ide", memdb.AccessReadOnly)
	if err != nil {
		t.Fatal(err)
	}
	var crashed bytes.Buffer
	if _, err := rt.Backup(&crashed); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "crashed.db")
	if err := os.WriteFile(path, crashed.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	after := openDurable(t, path)
	defer after.Close()
	tok := strings.TrimPrefix(ps.Authorization, "Bearer ")
	var ae *mcpruntime.AuthError
	if _, err := after.Authenticate(tok); !errors.As(err, &ae) || ae.Reason != mcpruntime.AuthRevoked {
		t.Fatalf("the provider token after the crash: %v, want it revoked", err)
	}
	for _, c := range after.Credentials("t1") {
		if c.ID == ps.CredentialID && c.RevokeReason != "restart" {
			t.Errorf("its row after the crash: %+v, want revoked with reason restart", c)
		}
	}
	if th, err := after.Thread(ctx, "t1"); err != nil || th.Run != nil {
		t.Errorf("t1 after the crash = %+v, %v; want no run", th, err)
	}
	if _, err := after.Authenticate(client.Token); err != nil {
		t.Errorf("the client token after the crash: %v", err)
	}
}

// TestStateKeepsThreadsPastMaxThreads: a restart with a lower MaxThreads
// serves every thread on file, and refuses new ones until deletes make
// room (SPEC §3.8).
func TestStateKeepsThreadsPastMaxThreads(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "state.db")
	rt := openDurable(t, path)
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := rt.CreateThread(ctx, id, mcpruntime.ThreadOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := rt.Close(); err != nil {
		t.Fatal(err)
	}
	rt, err := mcpruntime.New(mcpruntime.Config{StateFile: path, MaxThreads: 2, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close()
	for _, id := range []string{"t1", "t2", "t3"} {
		if _, err := rt.Thread(ctx, id); err != nil {
			t.Errorf("thread %s after a restart with MaxThreads 2: %v", id, err)
		}
	}
	if _, err := rt.CreateThread(ctx, "t4", mcpruntime.ThreadOptions{}); !errors.Is(err, mcpruntime.ErrTooManyThreads) {
		t.Fatalf("a fourth thread past MaxThreads 2: %v, want ErrTooManyThreads", err)
	}
	for _, id := range []string{"t1", "t2"} {
		if err := rt.DeleteThread(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rt.CreateThread(ctx, "t4", mcpruntime.ThreadOptions{}); err != nil {
		t.Fatalf("a thread once deletes made room: %v", err)
	}
}

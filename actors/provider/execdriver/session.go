package execdriver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// session is one process.
type session struct {
	id     string
	thread string
	cfg    Config
	file   string // MCP config file
	proc   *agentproc.Proc
	events driver.Events
	logger *slog.Logger

	done chan struct{} // closed once the process is reaped and cleaned up

	// mu guards the fields below. It is also held while the config file is
	// rewritten (a rotation) or removed (at exit), so that no rewrite lands
	// after the removal.
	mu      sync.Mutex
	opened  bool // Open returned it: from now on an exit is a death
	closing bool // Close was called: an exit is not a death
	exited  bool // reaped, its config file removed
}

func start(ctx context.Context, d *execDriver, req driver.OpenRequest) (*session, error) {
	b := req.Binding
	file, err := writeConfig(d.cfg.ConfigDir, req.SessionID, d.cfg.ServerName, b)
	if err != nil {
		return nil, err
	}
	logger := d.logger.With("session", req.SessionID)
	args := make([]string, len(d.cfg.Args))
	for i, a := range d.cfg.Args {
		args[i] = strings.ReplaceAll(a, ConfigPlaceholder, file)
	}
	proc, err := agentproc.Start(agentproc.Spec{
		Path: d.path, Args: args, Dir: d.cfg.Dir, Env: environ(d.cfg, file, req), Logger: logger,
		Redact: []string{agentproc.Secret(b.Authorization)},
	})
	if err != nil {
		os.Remove(file)
		return nil, fmt.Errorf("exec: %w", err)
	}
	s := &session{
		id: req.SessionID, thread: b.Thread, cfg: d.cfg, file: file, proc: proc,
		events: req.Events, logger: logger, done: make(chan struct{}),
	}
	logger.Info("provider process started", "pid", proc.Pid(), "command", d.cfg.Command, "thread", b.Thread)
	go s.wait()

	timer := time.NewTimer(time.Duration(d.cfg.StartupWait))
	defer timer.Stop()
	select {
	case <-timer.C:
		s.mu.Lock()
		exited := s.exited
		s.opened = !exited
		s.mu.Unlock()
		if !exited {
			return s, nil
		}
		<-s.done
		return nil, s.exitedAtOnce()
	case <-s.done:
		return nil, s.exitedAtOnce()
	case <-ctx.Done():
		s.stop(ctx)
		return nil, fmt.Errorf("exec: start %s: %w", d.cfg.Command, ctx.Err())
	}
}

// wait reaps the process, kills what is left of its group, removes the
// config file, and reports a death unless the session was being closed.
func (s *session) wait() {
	<-s.proc.Done()
	s.mu.Lock()
	if rerr := os.Remove(s.file); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		s.logger.Warn("remove MCP config file", "err", rerr)
	}
	s.exited = true
	died := s.opened && !s.closing
	s.mu.Unlock()
	// Logged before done is closed: Close returns on done, and a runtime
	// shutting down may exit right after.
	s.logger.Info("provider process exited", "pid", s.proc.Pid(), "status", s.proc.Status(), "died", died)
	close(s.done)
	if died {
		s.events.Died(fmt.Errorf("process exited: %s%s", s.proc.Status(), stderrTail(s.proc)))
	}
}

// stderrTail is the process's last stderr lines, for the end of an error.
func stderrTail(p *agentproc.Proc) string {
	if t := p.Tail(); t != "" {
		return "; stderr: " + t
	}
	return ""
}

// exitedAtOnce is Open's error for a process that exited within
// StartupWait; call it once done is closed.
func (s *session) exitedAtOnce() error {
	return fmt.Errorf("exec: %s exited at once (%s)%s", s.cfg.Command, s.proc.Status(), stderrTail(s.proc))
}

// Attach re-binds the session's thread. A new credential (after a
// rotation) is written to the config file; an empty Authorization is a
// re-attach of the token the process already holds.
func (s *session) Attach(ctx context.Context, b driver.Binding) error {
	if b.Thread != s.thread {
		return fmt.Errorf("exec: session %s serves thread %s, not %s", s.id, s.thread, b.Thread)
	}
	if b.Authorization == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.exited {
		return fmt.Errorf("exec: session %s: process has exited", s.id)
	}
	s.proc.Redact(agentproc.Secret(b.Authorization))
	return rewriteConfig(s.file, s.cfg.ServerName, b)
}

// Detach keeps the process: a handoff, the thread may come back.
func (s *session) Detach(ctx context.Context, thread string) error { return nil }

// Close ends the process: SIGTERM to its group, SIGKILL after the grace.
func (s *session) Close(ctx context.Context) error {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	return s.stop(ctx)
}

func (s *session) stop(ctx context.Context) error {
	_ = s.proc.Stop(ctx, time.Duration(s.cfg.Grace)) // a SIGKILL is logged
	<-s.done                                         // the config file removed, the exit logged
	return nil
}

// mcpConfig is the file format agents read.
type mcpConfig struct {
	MCPServers map[string]mcpServer `json:"mcpServers"`
}

type mcpServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

func configJSON(server string, b driver.Binding) ([]byte, error) {
	return json.MarshalIndent(mcpConfig{MCPServers: map[string]mcpServer{server: {
		Type: "http", URL: b.Endpoint, Headers: map[string]string{"Authorization": b.Authorization},
	}}}, "", "  ")
}

// writeConfig creates the session's MCP config file, readable by its owner
// only.
func writeConfig(dir, session, server string, b driver.Binding) (string, error) {
	data, err := configJSON(server, b)
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp(dir, "mcp-"+session+"-*.json") // mode 0600
	if err != nil {
		return "", fmt.Errorf("exec: write MCP config file: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(f.Name())
		return "", fmt.Errorf("exec: write MCP config file: %w", err)
	}
	if err := f.Close(); err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("exec: write MCP config file: %w", err)
	}
	return f.Name(), nil
}

// rewriteConfig replaces the file's content atomically: a reader sees the
// old file or the new one, never half of one.
func rewriteConfig(path, server string, b driver.Binding) error {
	data, err := configJSON(server, b)
	if err != nil {
		return err
	}
	if err := agentproc.WriteFile(path, data); err != nil {
		return fmt.Errorf("exec: rewrite MCP config file: %w", err)
	}
	return nil
}

// environ builds the process's environment from scratch.
func environ(cfg Config, file string, req driver.OpenRequest) []string {
	common := agentproc.Config{InheritEnv: cfg.InheritEnv, Env: cfg.Env}
	return common.Environ(
		EnvURL+"="+req.Binding.Endpoint,
		EnvAuthorization+"="+req.Binding.Authorization,
		EnvMCPConfig+"="+file,
		EnvServerName+"="+cfg.ServerName,
		EnvThread+"="+req.Binding.Thread,
		EnvInstance+"="+req.Instance,
		EnvSession+"="+req.SessionID,
	)
}

package codex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Kind is the driver's kind name.
const Kind = "codex"

// Factory returns the [driver.Factory] to register under [Kind]. The
// app-server's stderr, and what the driver does, is logged to logger.
func Factory(logger *slog.Logger) driver.Factory {
	if logger == nil {
		logger = slog.Default()
	}
	return func(instance string, raw json.RawMessage) (driver.Driver, error) {
		cfg, path, err := ParseConfig(raw)
		if err != nil {
			return nil, err
		}
		if err := agentproc.Supported(); err != nil {
			return nil, err
		}
		return &codexDriver{cfg: cfg, path: path, logger: logger.With("instance", instance)}, nil
	}
}

type codexDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

// MultiThread is false: one app-server per thread, so that no process's
// environment holds another thread's token.
func (d *codexDriver) MultiThread() bool { return false }

// killMargin is what a Close may take beyond the grace: SIGKILL, then the
// process reaped and its output drained.
const killMargin = 5 * time.Second

// CloseBudget implements [driver.CloseBudgeter].
func (d *codexDriver) CloseBudget() time.Duration { return time.Duration(d.cfg.Grace) + killMargin }

func (d *codexDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	b := req.Binding
	token, err := bearer(b.Authorization)
	if err != nil {
		return nil, fmt.Errorf("codex: open %s: %w", req.SessionID, err)
	}
	var apiKey string
	if d.cfg.APIKeyEnv != "" {
		if apiKey = os.Getenv(d.cfg.APIKeyEnv); apiKey == "" {
			return nil, fmt.Errorf("codex: open %s: the model API key variable %s is not set", req.SessionID, d.cfg.APIKeyEnv)
		}
	}
	dir, err := agentproc.PrivateDir(d.cfg.ConfigDir, "codex-"+safeName(req.SessionID)+"-")
	if err != nil {
		return nil, fmt.Errorf("codex: open %s: %w", req.SessionID, err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("codex: open %s: %w", req.SessionID, err)
	}
	s := &session{
		d: d, id: req.SessionID, thread: b.Thread, endpoint: b.Endpoint,
		dir: dir, home: home, apiKey: apiKey, events: req.Events,
		logger: d.logger.With("session", req.SessionID),
	}
	if err := s.open(ctx, token); err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			s.logger.Warn("remove the session's directory", "err", rerr)
		}
		return nil, fmt.Errorf("codex: open %s: %w", req.SessionID, err)
	}
	return s, nil
}

// bearer returns the token of an Authorization header value.
func bearer(authorization string) (string, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || tok == "" || strings.ContainsAny(tok, "\x00\r\n ") {
		return "", errors.New(`the binding's Authorization is not "Bearer <token>"`)
	}
	return tok, nil
}

// safeName keeps the letters, digits, '-' and '_' of s, for a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return -1
	}, s)
}

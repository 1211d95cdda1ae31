package codex

import (
	"context"
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
	return agentproc.Factory(logger, ParseConfig, func(cfg Config, path string, logger *slog.Logger) driver.Driver {
		return &codexDriver{cfg: cfg, path: path, logger: logger}
	})
}

type codexDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

// MultiThread is false: one app-server per thread, so that no process's
// environment holds another thread's token.
func (d *codexDriver) MultiThread() bool { return false }

// CloseBudget implements [driver.CloseBudgeter].
func (d *codexDriver) CloseBudget() time.Duration { return d.cfg.CloseBudget() }

func (d *codexDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	b := req.Binding
	token, err := agentproc.Bearer(b.Authorization)
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

// safeName keeps the letters, digits, '-' and '_' of s, for a file name.
func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			return r
		}
		return -1
	}, s)
}

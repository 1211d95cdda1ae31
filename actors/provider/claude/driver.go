package claude

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
const Kind = "claude"

// Factory returns the [driver.Factory] to register under [Kind]. Claude
// Code's stderr, and what the driver does, is logged to logger.
func Factory(logger *slog.Logger) driver.Factory {
	return agentproc.Factory(logger, ParseConfig, func(cfg Config, path string, logger *slog.Logger) driver.Driver {
		return &claudeDriver{cfg: cfg, path: path, logger: logger}
	})
}

type claudeDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

// MultiThread is false: one Claude Code per thread, so that no process
// holds another thread's token.
func (d *claudeDriver) MultiThread() bool { return false }

// CloseBudget implements [driver.CloseBudgeter].
func (d *claudeDriver) CloseBudget() time.Duration { return d.cfg.CloseBudget() }

func (d *claudeDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	b := req.Binding
	if _, err := agentproc.Bearer(b.Authorization); err != nil {
		return nil, fmt.Errorf("claude: open %s: %w", req.SessionID, err)
	}
	var apiKey string
	if d.cfg.APIKeyEnv != "" {
		if apiKey = os.Getenv(d.cfg.APIKeyEnv); apiKey == "" {
			return nil, fmt.Errorf("claude: open %s: the model API key variable %s is not set", req.SessionID, d.cfg.APIKeyEnv)
		}
	}
	dir, err := agentproc.PrivateDir(d.cfg.ConfigDir, "claude-"+safeName(req.SessionID)+"-")
	if err != nil {
		return nil, fmt.Errorf("claude: open %s: %w", req.SessionID, err)
	}
	home := filepath.Join(dir, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("claude: open %s: %w", req.SessionID, err)
	}
	s := &session{
		d: d, id: req.SessionID, thread: b.Thread, endpoint: b.Endpoint,
		dir: dir, home: home, mcpPath: filepath.Join(dir, "mcp.json"), apiKey: apiKey, events: req.Events,
		logger: d.logger.With("session", req.SessionID), gone: make(chan struct{}),
	}
	if err := s.open(ctx, b.Authorization); err != nil {
		if rerr := os.RemoveAll(dir); rerr != nil {
			s.logger.Warn("remove the session's directory", "err", rerr)
		}
		return nil, fmt.Errorf("claude: open %s: %w", req.SessionID, err)
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

package claude

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
const Kind = "claude"

// Factory returns the [driver.Factory] to register under [Kind]. Claude
// Code's stderr, and what the driver does, is logged to logger.
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
		return &claudeDriver{cfg: cfg, path: path, logger: logger.With("instance", instance)}, nil
	}
}

type claudeDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

// MultiThread is false: one Claude Code per thread, so that no process
// holds another thread's token.
func (d *claudeDriver) MultiThread() bool { return false }

// killMargin is what a Close may take beyond the grace: SIGKILL, then the
// process reaped and its output drained.
const killMargin = 5 * time.Second

// CloseBudget implements [driver.CloseBudgeter].
func (d *claudeDriver) CloseBudget() time.Duration { return time.Duration(d.cfg.Grace) + killMargin }

func (d *claudeDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	b := req.Binding
	if err := checkAuthorization(b.Authorization); err != nil {
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

// checkAuthorization accepts "Bearer <token>" only.
func checkAuthorization(authorization string) error {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || tok == "" || strings.ContainsAny(tok, "\x00\r\n ") {
		return errors.New(`the binding's Authorization is not "Bearer <token>"`)
	}
	return nil
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

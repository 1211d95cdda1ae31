package opencode

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Kind is the driver's kind name.
const Kind = "opencode"

// Factory returns the [driver.Factory] to register under [Kind]. The
// server's logs are logged to logger, a record per line.
func Factory(logger *slog.Logger) driver.Factory {
	return agentproc.Factory(logger, ParseConfig, func(cfg Config, path string, logger *slog.Logger) driver.Driver {
		return &ocDriver{cfg: cfg, path: path, logger: logger}
	})
}

type ocDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

// MultiThread is false: a server per thread (see the package doc).
func (d *ocDriver) MultiThread() bool { return false }

// CloseBudget implements [driver.CloseBudgeter]: a Close gives the server
// its whole grace, then kills it.
func (d *ocDriver) CloseBudget() time.Duration { return d.cfg.CloseBudget() }

func (d *ocDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	if req.Binding.Authorization == "" {
		return nil, fmt.Errorf("opencode: open of %s without a credential", req.SessionID)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(d.cfg.StartTimeout))
	defer cancel()
	return open(ctx, d, req)
}

// Package execdriver is the "exec" provider kind: every provider session is
// one OS process, started from the instance's [Config] the way hosts start
// Codex, Claude Code or OpenCode.
//
// A process is handed its MCP connection two ways, as real agents take it:
//
//   - environment variables: [EnvURL], [EnvAuthorization] and the others
//     named Env…, describing its own session and nothing else;
//
//   - a JSON MCP config file, written 0600 into Config.ConfigDir,
//
//     {"mcpServers":{"<serverName>":{"type":"http","url":"…","headers":{"Authorization":"Bearer …"}}}}
//
//     whose path replaces [ConfigPlaceholder] in the arguments and is in
//     [EnvMCPConfig]. After a credential rotation the file is rewritten
//     (atomically) with the new token; the environment cannot change, so
//     agents that only read the environment see the new token after a
//     restart.
//
// The environment is built from scratch: Config.Env plus the variables named
// in Config.InheritEnv; a process is never handed the runtime's other
// variables, nor any other session's token. (Every process runs as the
// runtime's user: one that goes looking can read a sibling's config file or
// /proc/<pid>/environ. Isolation between agents needs a user per instance.)
//
// The process runs in a process group of its own. Its stdout and stderr go
// to the log, a record per line with the session id. Closing the session
// sends SIGTERM to the group, then SIGKILL after Config.Grace — the whole
// grace, however long (driver.CloseBudget), unless the close's context
// ends first (the runtime's shutdown deadline); when the
// process exits, for whatever reason, the rest of its group is killed, it
// is reaped, and its config file is removed. A process that exits on its
// own is reported with [driver.Events.Died]; one that exits within
// Config.StartupWait of its start fails the open instead.
//
// Sessions are exclusive: one process serves one thread. Detach keeps the
// process (a handoff); a re-attach of the same thread is a no-op.
package execdriver

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agentproc"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// Kind is the driver's kind name.
const Kind = "exec"

// Factory returns the [driver.Factory] to register under [Kind]. Process
// output is logged to logger.
func Factory(logger *slog.Logger) driver.Factory {
	return agentproc.Factory(logger, ParseConfig, func(cfg Config, path string, logger *slog.Logger) driver.Driver {
		return &execDriver{cfg: cfg, path: path, logger: logger}
	})
}

type execDriver struct {
	cfg    Config
	path   string // the command, resolved
	logger *slog.Logger
}

func (d *execDriver) MultiThread() bool { return false }

// CloseBudget implements [driver.CloseBudgeter]: a Close gives the
// process its whole grace, however long, and then kills it; the runtime's
// bound on driver calls (Config.OpenTimeout) does not cut the grace short.
func (d *execDriver) CloseBudget() time.Duration {
	return time.Duration(d.cfg.Grace) + agentproc.KillMargin
}

func (d *execDriver) Open(ctx context.Context, req driver.OpenRequest) (driver.Session, error) {
	if req.Binding.Authorization == "" {
		return nil, fmt.Errorf("exec: open of %s without a credential", req.SessionID)
	}
	return start(ctx, d, req)
}

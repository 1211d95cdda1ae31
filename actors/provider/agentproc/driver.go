package agentproc

import (
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// KillMargin is what a Close may take beyond its grace: the SIGKILL, the
// process reaped and its output drained.
const KillMargin = 5 * time.Second

// CloseBudget is what closing one of c's agents may take: its whole grace,
// however long, then the kill (see [driver.CloseBudgeter]; the runtime's
// bound on driver calls does not cut the grace short).
func (c *Config) CloseBudget() time.Duration { return time.Duration(c.Grace) + KillMargin }

// Factory is the [driver.Factory] of an agent driver: each instance's
// configuration is decoded and checked by parse (which returns the
// resolved command as well), the platform checked ([Supported]), and the
// driver built by build with a logger naming the instance. A nil logger
// is slog.Default().
func Factory[C any](logger *slog.Logger, parse func(json.RawMessage) (C, string, error), build func(cfg C, path string, logger *slog.Logger) driver.Driver) driver.Factory {
	if logger == nil {
		logger = slog.Default()
	}
	return func(instance string, raw json.RawMessage) (driver.Driver, error) {
		cfg, path, err := parse(raw)
		if err != nil {
			return nil, err
		}
		if err := Supported(); err != nil {
			return nil, err
		}
		return build(cfg, path, logger.With("instance", instance)), nil
	}
}

// Bearer returns the token of an Authorization value, which must be
// "Bearer <token>" with a token that is one header-safe word.
func Bearer(authorization string) (string, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok || tok == "" || strings.ContainsAny(tok, "\x00\r\n\t ") {
		return "", errors.New(`the binding's Authorization is not "Bearer <token>"`)
	}
	return tok, nil
}

// Secret is what to redact of an Authorization value: the token of
// "Bearer <token>", else the whole value.
func Secret(authorization string) string {
	if tok, ok := strings.CutPrefix(authorization, "Bearer "); ok && tok != "" {
		return tok
	}
	return authorization
}

package main

import (
	"log/slog"

	"github.com/agenthost/mcpruntime/actors/provider/claude"
	"github.com/agenthost/mcpruntime/actors/provider/codex"
	"github.com/agenthost/mcpruntime/actors/provider/driver"
	"github.com/agenthost/mcpruntime/actors/provider/opencode"
)

// agentDrivers are the provider kinds the server adds to the runtime's
// built-in inproc and exec: a driver per real agent (docs/providers.md).
func agentDrivers(log *slog.Logger) map[string]driver.Factory {
	return map[string]driver.Factory{
		claude.Kind:   claude.Factory(log),
		codex.Kind:    codex.Factory(log),
		opencode.Kind: opencode.Factory(log),
	}
}

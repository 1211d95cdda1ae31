package mcpruntime

import "github.com/agenthost/mcpruntime/internal/actortest"

// Futures counts the runtime's requests in flight, whoever made them: the
// futures of its actor system still waiting for an answer. For testing.
func Futures(r *Runtime) int { return actortest.Futures(r.system) }

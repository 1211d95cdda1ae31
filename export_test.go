package mcpruntime

import (
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/internal/mcphttp"
)

// Futures counts the runtime's requests in flight, whoever made them: the
// futures of its actor system still waiting for an answer. For testing.
func Futures(r *Runtime) int { return actortest.Futures(r.system) }

// EndpointInFlight returns what e's POST requests hold now. For testing.
func EndpointInFlight(e *MCPEndpoint) mcphttp.InFlight { return e.srv.InFlight() }

// EndpointClosed reports whether e's Close has run. For testing.
func EndpointClosed(e *MCPEndpoint) bool { return e.srv.Closed() }

// OnEndpointBuilt makes MCPHandler call f with each endpoint it built,
// before registering it, until restore is called. For testing.
func OnEndpointBuilt(f func(*MCPEndpoint)) (restore func()) {
	testHookEndpointBuilt = f
	return func() { testHookEndpointBuilt = nil }
}

package mcpruntime

import "github.com/agenthost/mcpruntime/internal/mcphttp"

// EndpointInFlight returns what e's POST requests hold now. For testing.
func EndpointInFlight(e *MCPEndpoint) mcphttp.InFlight { return e.srv.InFlight() }

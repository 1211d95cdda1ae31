package mcpruntime

import (
	"github.com/agenthost/mcpruntime/internal/actortest"
	"github.com/agenthost/mcpruntime/transport"
)

// Futures counts the runtime's requests in flight, whoever made them: the
// futures of its actor system still waiting for an answer. For testing.
func Futures(r *Runtime) int { return actortest.Futures(r.system) }

// EndpointInFlight returns what e's POST requests hold now. For testing.
func EndpointInFlight(e *MCPEndpoint) transport.InFlight { return e.srv.InFlight() }

// EndpointClosed reports whether e's Close has run. For testing.
func EndpointClosed(e *MCPEndpoint) bool { return e.srv.Closed() }

// OnEndpointBuilt makes MCPHandler call f with each endpoint it built,
// before registering it, until restore is called. For testing.
func OnEndpointBuilt(f func(*MCPEndpoint)) (restore func()) {
	testHookEndpointBuilt = f
	return func() { testHookEndpointBuilt = nil }
}

// AddChangeFeed makes f hear the runtime's list changes and resource
// updates, as an endpoint does. For testing.
func AddChangeFeed(r *Runtime, f interface {
	ListChanged(kind string)
	ResourceUpdated(uri string)
}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.testFeeds = append(r.testFeeds, f)
}

// NewBackend returns the backend an endpoint made with opts serves, to call
// its Serve directly. For testing.
func NewBackend(r *Runtime, opts MCPOptions) transport.Backend { return newBackend(r, opts) }

// RegistryBuckets is how many concurrent maps r's process registry has,
// and RegistryBucketsWanted how many newSystem makes. For testing.
func RegistryBuckets(r *Runtime) int { return len(r.system.ProcessRegistry.LocalPIDs.LocalPIDs) }

const RegistryBucketsWanted = registryBuckets

// Registered reports whether r's process registry holds a process named
// name. For testing.
func Registered(r *Runtime, name string) bool {
	_, ok := r.system.ProcessRegistry.GetLocal(name)
	return ok
}

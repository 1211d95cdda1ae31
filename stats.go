package mcpruntime

import "github.com/agenthost/mcpruntime/memdb"

// Stats is a snapshot of what the runtime holds, for metrics and for leak
// checks (SPEC §6.7).
type Stats struct {
	Threads          int // thread actors
	Instances        int // provider instance actors
	Clients          int // client-grant actors
	ProviderSessions int // open provider sessions (store)
	MCPSessions      int // live MCP sessions of the runtime's endpoints (their session tables)
	LiveCredentials  int // credential rows in state live (expired ones included until revoked)
	// Processes counts every process of the actor system: all actors
	// (provider and MCP session actors included) and the futures of
	// requests in flight.
	Processes int
}

// Stats returns a snapshot of the runtime's counts.
func (r *Runtime) Stats() Stats {
	r.mu.Lock()
	s := Stats{Threads: len(r.threads), Instances: len(r.instances), Clients: len(r.clients)}
	r.mu.Unlock()
	rd := r.store.Read()
	if ps, err := rd.ProviderSessionsByState(nil, memdb.SessionOpen); err == nil {
		s.ProviderSessions = len(ps)
	}
	s.MCPSessions = r.mcpSessions()
	s.LiveCredentials, _ = rd.CountCredentialsByState(nil, memdb.StateLive)
	for _, bucket := range r.system.ProcessRegistry.LocalPIDs.LocalPIDs {
		s.Processes += bucket.Count()
	}
	return s
}

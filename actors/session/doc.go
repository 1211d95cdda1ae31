// Package session will run one actor per MCP session (Streamable HTTP,
// Mcp-Session-Id), bound to the namespace that initialized it: protocol
// state, open streams, idle eviction and tool dispatch (SPEC §5).
//
// It is built by the transport issue. The ownership record it will write,
// memdb.MCPSession, and its table (indexed by id, owner namespace and
// credential) already exist in the store, so the credential lifecycle can be
// tested against the state the transport will read.
package session

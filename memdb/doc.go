// Package memdb is the runtime's indexed, in-memory state: threads, provider
// instances, provider sessions, credentials, client grants and MCP sessions,
// held in one hashicorp/go-memdb database.
//
// # Ownership
//
// Every table has exactly one kind of writer, always an actor:
//
//	threads, credentials (provider)   thread actor of that thread
//	instances, provider_sessions      provider actor of that instance
//	client_grants, credentials (client) client-grant actor of that grant
//	mcp_sessions                      MCP session actor (transport issue)
//
// Everyone else reads. Reads are lock-free snapshots (go-memdb's immutable
// radix trees), so the HTTP path never waits on an actor to authenticate.
//
// # Reads
//
// Read functions take a [WatchSet] first and add every channel they touch, so
// a caller can block until the answer may have changed (WatchSet.WatchCtx)
// instead of polling. They return copies: records handed out are never
// shared with the store, and a caller may change them freely. A missing
// record is [ErrNotFound], never a nil value with a nil error.
//
// # Writes
//
// [Store.Write] runs a function in one write transaction and commits it only
// if the function returns nil, so a check and its effect (for example "the
// caller owns the active run" and "append the message") are atomic with
// respect to every other write in the store.
package memdb

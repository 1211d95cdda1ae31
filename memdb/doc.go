// Package memdb is the runtime's indexed, in-memory state: threads, provider
// instances, provider sessions, credentials, client grants and MCP sessions,
// held in one hashicorp/go-memdb database.
//
// # Ownership
//
// Every table has exactly one kind of writer, always an actor:
//
//	threads, credentials (provider)      thread actor of that thread
//	instances, provider_sessions         provider actor of that instance
//	client_grants, credentials (client)  client-grant actor of that grant
//	mcp_sessions                         MCP session actor of that session
//
// Credential rows change shape in one package, internal/credential, which
// the thread and client-grant actors call inside their own transactions.
//
// Everyone else reads. Reads are lock-free snapshots (go-memdb's immutable
// radix trees), so the HTTP path never waits on an actor to authenticate.
//
// # Reads
//
// Reads return copies: records handed out are never shared with the store,
// and a caller may change them freely. A missing record is [ErrNotFound],
// never a nil value with a nil error. There is a read, and an index, only
// where production code asks that question (each index's comment in
// schema.go names its readers).
//
// Reads take no watch set: nothing in the runtime blocks on a read's
// answer changing. Whoever must hear of a change hears it from the writer's
// side: [Store.OnCredentialsChanged] tells the liveness monitor of every
// committed credential change (the one subscriber, and the only change
// anyone waits for), and every other table changes only through its owning
// actor, which answers or publishes the change itself.
//
// # Writes
//
// [Store.Write] runs a function in one write transaction and commits it only
// if the function returns nil, so a check and its effect (for example "the
// caller owns the active run" and "append the message") are atomic with
// respect to every other write in the store.
package memdb

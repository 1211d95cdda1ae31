// Package durable is a single node's durable store (SPEC §3.8): a bbolt
// database that is the [memdb.Log] of the node's go-memdb store, as etcd is
// on several nodes. go-memdb stays the read path; the file is read once,
// at start ([Log.Load]), and written by every store write of a durable
// table, synced before the write returns.
//
// # Layout
//
// One bucket per table, keyed by row id, holding the JSON of the memdb
// record — the etcd layout (/mcpruntime/<table>/<id>) with the prefix as
// a bucket — except that a thread's messages are rows of their own:
//
//	meta          format → "1"
//	threads       <id> → Thread without its messages
//	messages      <thread id> 0x00 <seq, 8 bytes big-endian> → Message
//	credentials   <id> → Credential (the token's hash; never the token)
//	client_grants <id> → ClientGrant
//	instances     <id> → Instance
//
// so that a post writes one message row and the thread's small row, not a
// rewrite of the transcript, and the messages of a thread read back in
// sequence order (big-endian keys sort as numbers).
//
// # Writes
//
// [Log.Commit] checks the transaction's reads against the rows as the
// store applied them (or as a commit still on its way to disk will leave
// them): a row changed since is [memdb.ErrStale]. It then queues the
// commit for the one flusher goroutine, which writes every queued commit
// in one bbolt transaction — one sync for all of them (group commit) —
// applies them to the store in commit order, and answers each. A commit
// returns only once it is on disk and in the store, so nothing a caller
// was told (or could read) is lost at a crash. A write the disk refused
// breaks the log for good: every later commit fails, and [Log.Broken]
// tells the runtime to stop serving — an acknowledged revoke must never be
// undone by a restart, and one that could not be written must not be
// served as if it were.
package durable

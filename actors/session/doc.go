// Package session runs one actor per MCP session (Streamable HTTP,
// Mcp-Session-Id), bound to the namespace that initialized it (SPEC §5).
//
// # Components
//
//	transport (HTTP goroutine) ──request──▶ session actor "session/<id>"
//	                                          │ writes: mcp_sessions row
//	liveness monitor ──ownerDead──────────────┘ (the owner namespace lost its last live credential)
//
// The transport authenticates and checks ownership before anything reaches
// the session (SPEC §5 steps 1–3), so only its owner ever reaches it. The
// actor owns the session's lifecycle: its record, its one standalone
// stream, when and why it ends. Calls in flight are kept in the session's
// [Activity], shared with the transport: a call registers itself there
// (a map write under a mutex, no round trip through the mailbox — calls
// are the hot path), and the actor, when the session ends, cancels every
// registered call and closes the table so no call starts afterwards. The
// work itself — a tool call, writing an SSE stream — runs on the HTTP
// request's goroutine, so a slow tool never blocks the mailbox and several
// calls run at once.
//
// # Lifecycle
//
// All sessions of an endpoint share one Props ([NewProps]); the spawner
// sends [Start] with the session's parameters first. Start writes the
// ownership record and registers the owner with the liveness monitor; the
// session ends on DELETE by its owner, on idle eviction (an [IdleCheck]
// finds no request in flight, no open stream, nothing for IdleTimeout), on
// cap eviction by the transport, or when its owner namespace has no live
// credential left (revoked or expired: the monitor tells it). Ending
// cancels every call in flight, closes the stream, removes the ownership
// record, calls OnEnd (the transport frees the session's slot there), and
// stops the actor. The record is removed before the actor stops, so the id
// answers 404 forever after.
//
// # Invariants
//
//   - A session never changes owner.
//   - An ownership record exists exactly while the actor runs (SPEC §6.7).
package session

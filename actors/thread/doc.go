// Package thread runs one actor per thread: the single writer of that
// thread's record (status, current provider instance, active run, message
// log) and of its provider credentials, one per (thread, provider instance)
// (SPEC §3).
//
// # Components
//
//	runtime (module root) ──request──▶ thread actor "thread/<id>"
//	                                     │  writes: threads row, its credentials
//	                                     │  reads:  instances, provider_sessions
//	                                     └─request──▶ provider actor "provider/<instance>"
//
// The thread actor imports actors/provider and talks to provider actors
// with requests; a provider actor only ever replies, so the arrows point one
// way and two actors never wait on each other.
//
// # Message flow
//
// Every lifecycle change is one message, handled on the actor's turn, so no
// two of them race on a thread's state. A change that needs a provider
// actor (open, rotate, detach, archive, delete) sends a request with
// ctx.RequestFuture and continues with ctx.ReenterAfter: Receive never
// blocks, and other messages are handled while a driver starts a process.
// An open in flight for (T, I) is recorded in pending; a second open of the
// same pair waits for the first and gets the same session without a token.
//
// # Invariants
//
//   - A credential belongs to exactly one (thread, instance) pair. Minting one
//     revokes only the pair's previous live credentials; nothing here ever
//     touches another pair's (SPEC §6.4).
//   - Archive and delete revoke every credential of the thread in the same
//     transaction that changes its status (SPEC §6.5).
//   - A mutation ([Mutate]) reads the caller's credential and the caller's
//     thread run state and applies its effect in one store write
//     transaction. Write transactions are serialized, so an EndRun or a
//     switch commits either wholly before the check or wholly after the
//     effect (SPEC §4, §6.6).
//   - Tokens are never stored, only their SHA-256; a token leaves the actor
//     once, in the reply to the message that minted it and in the binding
//     given to the provider session that will use it.
//   - The actor keeps no state that matters in memory except opens in
//     flight: after a restart it reloads its record from the store.
package thread

// Package thread runs one actor per thread: the single writer of that
// thread's record (status, current provider instance, active run, message
// log) and of its provider credentials, one per (thread, provider instance)
// (SPEC §3). It changes credential rows only through the ledger
// (internal/credential), inside its own transactions.
//
// # Components
//
//	runtime (module root) ──request──▶ thread actor "thread/<id>"
//	                                     │  writes: threads row, its credentials (through internal/credential)
//	                                     │  reads:  threads, instances, credentials — never provider_sessions
//	                                     └─request──▶ provider instance actor "provider/<instance>"
//	provider instance actor ──ReleaseCredentials──▶ thread actor (a session it served was released)
//
// The actor's code is split by concern: actor.go (the actor, its
// behaviours, loading), open.go (the open and rotate protocol), runs.go
// (switch, runs, touch, mutations) and lifecycle.go (release, detach,
// archive, delete).
//
// # Message flow
//
// Every request is one message (messages.go), handled on the actor's turn,
// so no two of them race on a thread's state; each carries its deadline
// (internal/deadline) and is answered by one reply whose outcome is a
// fault.Fault. A change that needs a provider instance asks it with
// ctx.RequestFuture, bounded by the request's deadline, and continues with
// ctx.ReenterAfter: Receive never blocks, and other messages are handled
// while a driver starts a process.
//
// Writes (internal/commit). Each write is staged against the store on the
// actor's turn and, where the store's log must answer first (a replica's
// etcd transaction and barrier on several nodes, a state file's sync on
// one), committed on a goroutine of its own; its continuation — the reply,
// the next step of an open or a rotation — runs on the actor's turn once
// the commit answered. Until then the actor's mailbox holds its later
// messages, and a write a continuation asks for waits its turn: the
// thread's writes commit one at a time, in order, each on the state the
// one before left, as if the actor had waited — without its goroutine
// waiting (SPEC §5d.7). A reply is sent to the sender captured when its
// message was current (sendTo), never with ctx.Respond from a
// continuation.
//
// The open protocol (open.go). The instance actor owns provider_sessions
// and every decision about them; the thread owns the pair's credentials.
// An open asks the instance one question, AcquireSession: is there a
// session serving (T, I) with the pair's live credential, or one holding it
// that can take T back? The answer is Reused, Attached or NeedsCredential;
// only on NeedsCredential does the thread mint a credential and send
// OpenSession, which the instance serves as it sees fit (a new session, its
// multi-thread session, or the session T is still attached to). Once the
// open succeeded the thread revokes the pair's older credentials
// (replaced); if it failed, only what it minted (open_failed). A rotation
// mints (revoking the old credential, rotated) and sends RebindThread. An
// open or a rotation in flight for a pair is a flight (kind open or
// rotate): opens of the pair that arrive meanwhile wait for it and share
// its answer, rotations queue behind a rotation, a rotation during an open
// is fault.ErrBusy. The races of the instance's decisions (a session closing
// under an attach) are retried by the instance, never here.
//
// Phases are behaviours: active, then gone once Delete removed the
// thread, when every request is answered fault.ErrUnknownThread until the actor is
// gone (Poison, so that what is queued is answered).
//
// The deadline. An open whose thread is archived while the driver opens
// aborts it and answers once the abort is done — or at the deadline: no
// wait outlives the request it serves. An open, a rotation or a mutation
// that arrives after its deadline is not started. Revocations (release,
// archive, delete, revoke-all) always run.
//
// # Effects
//
// A mutation's effect ([Effect], e.g. [AppendMessage]) travels in a
// message, so it is plain data: ids and values, nothing that points into
// the host's memory. It may touch what its [Txn] offers — the thread's
// record, the time, the verified caller — and nothing else of the store:
// the single-writer rule does not rest on the embedder's manners.
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
//     transaction (credential.CheckLive). Write transactions are
//     serialized, so an EndRun or a switch commits either wholly before the
//     check or wholly after the effect (SPEC §4, §6.6).
//   - Tokens are never stored, only their SHA-256; a token leaves the actor
//     once, in the reply to the message that minted it and in the binding
//     given to the provider session that will use it.
//   - The actor keeps no state that matters in memory except flights: after
//     a restart it reloads its record from the store. The PIDs of askers
//     waiting for a flight stay in the actor, never in a message.
package thread

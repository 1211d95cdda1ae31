// Package provider runs one actor per provider instance, with one child
// actor per provider session, and defines the [Driver] interface that a new
// provider kind implements.
//
// # Writing a driver
//
// A provider kind (Codex, Claude Code, OpenCode, a custom process) is a
// [Driver] built by a [Factory] from the instance's JSON configuration and
// registered by kind name ([Registry]; embedders use the runtime's
// Config.Drivers). [Inproc] is the minimal example and the test double;
// package execdriver runs one OS process per session.
//
// What a driver is given: [Driver.Open] gets an [OpenRequest] with the
// session id, the instance id and a [Binding]: the thread, the MCP
// endpoint, the Authorization header value and the capabilities of the
// credential minted for the pair (thread, instance). The driver hands these
// to its agent (environment, a config file, a handshake) and to nothing
// else, and returns a [Session].
//
// What it reports: Open returning is "started" (an error fails the open);
// Attach and Detach returning are the per-thread reports — Attach binds
// another thread (multi-thread drivers), re-binds one after a credential
// rotation (a new Authorization) or re-attaches one after a detach (an
// empty Authorization); Detach is a handoff, the thread's credential stays
// live. A session that ends on its own calls [Events.Died]; the runtime
// then releases it and revokes its credentials unless another open session
// holds them. Close is called exactly once, last.
//
// Concurrency: driver methods run on goroutines of their own, never inside
// an actor, so they may block until their context is done; calls for one
// session are serialized. See [Driver].
//
// # Supervision
//
// Every session is a child actor of its instance's actor. A death, a
// release, an abandoned open, a shutdown, and idle release all end in the
// same place: the instance actor removes the session's record, publishes
// [SessionClosed], and has the child close the driver session and stop.
// For a release, an idle release and a death it first calls
// [Config].Release, off its turn, which revokes the session's credentials:
// the order is record removed and credentials revoked, then the driver's
// Close, then the answer to whoever waits (once Close returned: for exec,
// the process is gone). A session's Close is bounded by [CloseTimeout]: a
// driver that needs longer than the bound on driver calls (exec's grace
// before SIGKILL) says so with [CloseBudgeter].
// Idle release ([Config].IdleRelease) closes a session none of whose
// threads had a turn (memdb Thread.LastTurn) for that long, unless a run of
// the instance is in flight on one of them. Hosts watch the event stream:
// [SessionOpened], [ThreadAttached], [ThreadDetached], [SessionClosed].
//
// # Components
//
//	thread actor ──request──▶ instance actor "provider/<instance>"
//	                            │ writes: instances row, provider_sessions of the instance
//	                            └─spawns──▶ session actor "provider/<instance>/<session>"
//	                                          └─goroutine──▶ Driver / Session (I/O)
//
// The instance actor decides (new session or attach to an existing one),
// records, and answers; the session actor owns the driver's Session and
// runs its calls one at a time, each in a goroutine that reports back with
// a message. When a session ends for any reason the instance actor removes
// its record and publishes [SessionClosed] on the actor system's event
// stream, where hosts can watch.
//
// This package imports only the store: it never calls a thread actor, it
// only replies to one. Config.Release, the runtime's, is what asks the
// thread actors to revoke; it runs in a goroutine that reports back.
package provider

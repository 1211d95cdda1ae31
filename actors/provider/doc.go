// Package provider runs one actor per provider instance, with one child
// actor per provider session, and defines the [driver.Driver] interface that a new
// provider kind implements.
//
// # Writing a driver
//
// A provider kind (Codex, Claude Code, OpenCode, a custom process) is a
// [driver.Driver] built by a [driver.Factory] from the instance's JSON configuration and
// registered by kind name ([driver.Registry]; embedders use the runtime's
// Config.Drivers). [driver.InprocFactory] is the minimal example; package
// providertest holds its test double, which records what its sessions are
// given; package execdriver runs one OS process per session.
//
// What a driver is given: [driver.Driver.Open] gets an [driver.OpenRequest] with the
// session id, the instance id and a [driver.Binding]: the thread, the MCP
// endpoint, the Authorization header value and the capabilities of the
// credential minted for the pair (thread, instance). The driver hands these
// to its agent (environment, a config file, a handshake) and to nothing
// else, and returns a [driver.Session].
//
// What it reports: Open returning is "started" (an error fails the open);
// Attach and Detach returning are the per-thread reports — Attach binds
// another thread (multi-thread drivers), re-binds one after a credential
// rotation or an expiry (a new Authorization) or re-attaches one after a
// detach (an empty Authorization); Detach is a handoff, the thread's
// credential stays live. A session that ends on its own calls
// [driver.Events.Died]; the instance then releases it: its credentials are
// revoked unless another open session holds them. Close is called exactly
// once, last.
//
// Concurrency: driver methods run on goroutines of their own, never inside
// an actor, so they may block until their context is done; calls for one
// session are serialized. See [driver.Driver].
//
// # Supervision
//
// Every session is a child actor of its instance's actor. A death, a
// release, an abandoned open, a shutdown, and idle release all end in the
// same place (close.go): the instance actor removes the session's record;
// for a release, an idle release and a death it then computes which of
// the session's credentials no other of its open sessions holds and asks
// the actor of each thread they belong to (addressed by name,
// names.Thread) to revoke them, with ReleaseCredentials, waiting for the
// answers without blocking and no longer than the request's deadline; then
// the child closes the driver session and stops; once it has, the instance
// publishes [SessionClosed] and answers whoever waits. The order is record
// removed and credentials revoked, then the driver's Close, then the
// answer (once Close returned: for exec, the process is gone). A session's
// Close is bounded by [driver.CloseTimeout]: a driver that needs longer than the
// bound on driver calls (exec's grace before SIGKILL) says so with
// [driver.CloseBudgeter]. Idle release ([Config].IdleRelease) closes a session
// none of whose threads had a turn (memdb Thread.LastTurn) for that long,
// unless a run of the instance is in flight on one of them. Hosts watch
// the event stream: [SessionOpened], [ThreadAttached], [ThreadDetached],
// [SessionClosed].
//
// # Components
//
//	thread actor ──request──▶ instance actor "provider/<instance>"
//	                            │ writes: instances row, provider_sessions of the instance
//	                            ├─spawns──▶ session actor "provider/<instance>/<session>"
//	                            │             └─goroutine──▶ driver.Driver / driver.Session (I/O)
//	                            └─ReleaseCredentials──▶ thread actor "thread/<id>"
//
// The instance actor is the sole owner of provider_sessions and of every
// decision about sessions (open.go): which session serves a thread
// (AcquireSession: Reused, Attached or NeedsCredential; OpenSession: a new
// session, the multi-thread session, or the session the thread is still
// attached to), which sessions a rotation re-binds (RebindThread), and the
// races of those decisions — a session that closes while it takes a thread
// is not an answer, the question is decided again. The session actor
// (session.go) owns the driver's driver.Session and runs its calls one at a time,
// each in a goroutine that reports back with a message; its phases are
// behaviours (opening, open, closing, failed), as are the instance's
// (running, then stopping once CloseAll came). CloseSession, CloseAll and
// ReleaseIdle share one mechanism: an answer waits until a set of
// children has stopped.
//
// Every request carries its deadline (internal/deadline): a driver call
// made for a request is bounded by it as well as by [Config].OpTimeout, and
// an open whose deadline passed is not started. Messages are plain data:
// replies carry a fault.Fault, records are copied as values, and who waits
// for an Attach or an Open stays in the instance's state, not in a message.
//
// This package imports only the store and the leaf packages: it never
// imports the thread package. ReleaseCredentials, the one request it sends
// a thread actor, is its own message, which the thread actor handles.
package provider

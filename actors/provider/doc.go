// Package provider runs one actor per provider instance, with one child
// actor per provider session, and defines the [Driver] interface that a new
// provider kind implements.
//
// # Writing a driver
//
// A provider kind (Codex, Claude Code, OpenCode, a custom process) is a
// [Driver] built by a [Factory] from the instance's JSON configuration and
// registered by kind name. The runtime gives [Driver.Open] an [OpenRequest]:
// the session id, and a [Binding] with the MCP endpoint, the Authorization
// header value and the capabilities of the credential minted for the pair
// (thread, instance). The driver hands these to its process (environment,
// a config file, a handshake) and returns a [Session]. Later the runtime may
// Attach more threads (multi-thread drivers) or re-bind a thread after a
// credential rotation, Detach a thread (a handoff: its credential stays
// live), and finally Close the session. If the process dies on its own, the
// driver calls [Events.Died]; the runtime then releases the session and
// revokes its credentials. [Inproc] is the minimal example and the test
// double.
//
// Concurrency: driver methods run on goroutines of their own, never inside
// an actor, so they may block until their context is done; calls for one
// session are serialized. See [Driver].
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
// stream, where the runtime turns a death into the release of the session's
// credentials and hosts can watch.
//
// This package imports only the store: it never calls a thread actor, it
// only replies to one.
package provider

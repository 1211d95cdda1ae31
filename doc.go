// Package mcpruntime is an actor-model session runtime for MCP tool access:
// the server an agent host (an IDE, a chat app, an orchestrator) embeds so
// that the coding agents it runs — the providers — can call back into the
// host over MCP, each with its own credential, and without one agent ever
// reaching another's session.
//
// A [Runtime] keeps credentials per (thread, provider instance): switching a
// thread from provider A to B and back never revokes the other's credential;
// rotate and release touch only the matching pair; archive or delete of a
// thread revokes all of its credentials. Tokens are 256-bit random values
// stored only as SHA-256; [Runtime.Authenticate] resolves one with a single
// lock-free read.
//
// Every thread, provider instance, provider session and client grant is an
// actor (protoactor-go); indexed shared state lives in go-memdb, written
// only by the owning actor and read lock-free by everyone else. Lifecycle
// changes are messages handled inside one actor, so none of them race on the
// same state.
//
// # Use
//
//	rt, err := mcpruntime.New(mcpruntime.Config{})
//	defer rt.Close()
//	rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: "inproc"})
//	rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{})
//	ps, err := rt.OpenProviderSession(ctx, "t1", "codex") // ps.Authorization: "Bearer …", shown once
//	p, err := rt.Authenticate(token)                      // on every request
//
// # Several nodes
//
// [Config.Cluster], set to a cluster.Config of the package
// [github.com/agenthost/mcpruntime/cluster], makes the runtime one node of
// several on an etcd cluster (only that import links etcd's client):
// threads, credentials and client grants live in etcd, every node keeps a
// replica and authenticates every token locally, a revoke that
// returned holds on every node, a thread lives on one node (its home, see
// [NotHomeError]) and the MCP endpoint forwards a request to its
// principal's home. Serve [Runtime.InternalHandler] on the address the other
// nodes reach, and restart a node once [Runtime.Lost] is closed.
//
// Every method takes a context whose deadline bounds the wait, and returns
// errors that match the exported sentinels ([ErrUnknownThread], …) with
// errors.Is. The behaviour contract is docs/SPEC.md in the repository: every
// rule, and every choice made where the brief was silent.
package mcpruntime

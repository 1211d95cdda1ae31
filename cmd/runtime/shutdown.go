package main

import (
	"context"
	"net/http"
	"time"
)

// shutdownHookKey is a context key: a func(ctx) ctx that is given the
// shutdown's deadline context and returns the one to use. For testing: a
// test ends the shutdown's grace when it has seen what it waits for.
type shutdownHookKey struct{}

// shutdown stops the server gracefully, within one deadline
// (--shutdown-grace) for all of it, in this order:
//
//  1. /readyz answers 503: the load balancer stops sending.
//  2. No new MCP sessions, and every stream closes.
//  3. The MCP listener stops accepting, calls in flight finish, and the
//     MCP sessions end (cancelling what is left).
//  4. The runtime closes: first it revokes every credential and token.
//  5. Then it closes the provider sessions, whose agents get SIGKILL when
//     the deadline comes. The internal listener (several nodes) serves
//     the other nodes' confirmations until the runtime has left the
//     cluster, and closes then.
//  6. The admin listener closes last: until then /readyz answers 503.
//
// ctx carries the test hooks only: the deadline starts now, since ctx
// has usually ended already. shutdown returns the runtime's error, which
// it also logs.
func (srv *server) shutdown(ctx context.Context) error {
	srv.health.state.Store(stateShuttingDown)
	srv.mcp.CloseStreams()
	sctx, cancel := context.WithTimeout(context.Background(), time.Duration(srv.s.ShutdownGrace))
	defer cancel()
	if hook, ok := ctx.Value(shutdownHookKey{}).(func(context.Context) context.Context); ok {
		sctx = hook(sctx)
	}
	srv.stop(sctx, "MCP", srv.mcpHTTP)
	srv.mcp.Close()
	srv.rtClosed = true
	err := srv.rt.Shutdown(sctx)
	if srv.audit != nil {
		srv.audit.wait() // every audit record the journal held is in the file
	}
	if srv.internalHTTP != nil {
		srv.stop(sctx, "internal", srv.internalHTTP)
	}
	if srv.tracer != nil {
		if terr := srv.tracer.Shutdown(sctx); terr != nil { // the spans still batched
			srv.log.Warn("exporting the last traces", "err", terr)
		}
	}
	srv.stop(sctx, "admin", srv.adminHTTP)
	if err != nil {
		srv.log.Error("closing the runtime", "err", err)
	}
	return err
}

// stop shuts one listener's server down gracefully, and closes its
// connections once ctx ends.
func (srv *server) stop(ctx context.Context, name string, h *http.Server) {
	if err := h.Shutdown(ctx); err != nil {
		srv.log.Warn("shutdown deadline passed; closing connections", "server", name, "err", err)
		_ = h.Close()
	}
}

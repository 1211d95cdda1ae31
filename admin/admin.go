// Package admin is the runtime's admin API: JSON over HTTP, for a host that
// drives the runtime as a sidecar from any language (issue 4).
package admin

import (
	"log/slog"
	"net/http"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/transport"
)

// Options configure the admin API.
type Options struct {
	// Token is the admin bearer token. Required.
	Token string
	// MCP is the MCP endpoint whose sessions GET /admin/v1/sessions lists.
	// Nil: the list comes from the store alone.
	MCP *transport.Server
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
}

// Server is the admin API, an http.Handler serving /admin/v1/….
type Server struct {
	rt   *mcpruntime.Runtime
	opts Options
	mux  http.Handler
}

// New returns the admin API of rt.
func New(rt *mcpruntime.Runtime, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	s := &Server{rt: rt, opts: opts}
	s.mux = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "not implemented", http.StatusNotImplemented)
	})
	return s
}

// ServeHTTP serves the admin API.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

package main

import (
	"net/http"
	"strings"

	"github.com/agenthost/mcpruntime/admin"
	"github.com/agenthost/mcpruntime/internal/httpguard"
)

// adminListener is the handler of the admin listener: /healthz, /readyz,
// /metrics (no token) and the admin API under /admin/ (admin token), behind
// the Host/Origin guard, so that a page re-binding its name to 127.0.0.1
// reads none of them.
//
// It routes on the path as sent. Unlike http.ServeMux it cleans nothing and
// redirects nothing: "//healthz", "/./metrics" and "/admin/v1/threads/.."
// are answered 404, without a token. Every answer is JSON in the admin
// API's error shape, except /metrics (Prometheus text).
type adminListener struct {
	guard   httpguard.Guard
	health  *health
	metrics http.Handler
	api     http.Handler
}

func (l *adminListener) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := l.guard.Check(r); err != nil {
		// The same answer for a bad Origin and a bad Host; the cause is not
		// worth telling a page that should not be here.
		admin.WriteError(w, http.StatusForbidden, admin.CodeForbidden, "Host or Origin not allowed")
		return
	}
	switch path := r.URL.Path; {
	case path == "/healthz":
		readOnly(w, r, l.health.healthz)
	case path == "/readyz":
		readOnly(w, r, l.health.readyz)
	case path == "/metrics":
		readOnly(w, r, l.metrics.ServeHTTP)
	case strings.HasPrefix(path, "/admin/"):
		l.api.ServeHTTP(w, r)
	default:
		admin.WriteError(w, http.StatusNotFound, admin.CodeNotFound, "no such route")
	}
}

// readOnly serves GET and HEAD with h, and answers 405 to anything else.
func readOnly(w http.ResponseWriter, r *http.Request, h http.HandlerFunc) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		admin.WriteError(w, http.StatusMethodNotAllowed, admin.CodeMethodNotAllowed, "method not allowed on this route; see the Allow header")
		return
	}
	h(w, r)
}

package main

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/agenthost/mcpruntime/admin"
	"github.com/agenthost/mcpruntime/internal/connlimit"
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

// minFileReserve is the fewest descriptors the connection caps leave out
// (SPEC §7.1): files, etcd, the agents' pipes, the internal listener; a
// quarter of the limit when that is more.
const minFileReserve = 256

// connCaps are the MCP and the admin listener's connection caps.
type connCaps struct {
	mcp, admin connlimit.Limits
}

// connCaps are the connection caps of the settings, for a process that may
// open fds descriptors (0: unknown, no budget). A cap not set explicitly
// (not in given) is lowered so that both listeners' totals fit in fds less
// a reserve, the admin listener keeping its own share; one set above that
// is kept, and warned about.
func (s *serveCmd) connCaps(given map[string]bool, fds uint64, log *slog.Logger) connCaps {
	caps := connCaps{
		mcp:   connlimit.Limits{Total: s.MaxConnections, PerSource: s.MaxConnectionsPerSource},
		admin: connlimit.Limits{Total: s.AdminMaxConnections, PerSource: s.AdminMaxConnectionsPerSource},
	}
	if fds == 0 || fds > 1<<40 {
		return caps
	}
	reserve := max(minFileReserve, fds/4)
	budget := 2
	if fds > reserve+2 {
		budget = int(min(fds-reserve, 1<<30))
	}
	lower := func(name string, v *int, limit int) {
		if !given[name] {
			*v = max(1, min(*v, limit))
		}
	}
	lower("admin-max-connections", &caps.admin.Total, max(1, budget/8))
	lower("max-connections", &caps.mcp.Total, budget-caps.admin.Total)
	lower("max-connections-per-source", &caps.mcp.PerSource, caps.mcp.Total)
	lower("admin-max-connections-per-source", &caps.admin.PerSource, caps.admin.Total)
	if sum := caps.mcp.Total + caps.admin.Total; sum > budget {
		log.Warn("the connection caps leave fewer descriptors than the reserve for files, etcd and agents; idle connections may exhaust them",
			"max_connections", caps.mcp.Total, "admin_max_connections", caps.admin.Total, "descriptor_limit", fds, "reserve", reserve)
	}
	return caps
}

// fileLimit raises the process's soft limit of open files to its hard
// limit and logs the outcome; it returns the soft limit in force (0 where
// unknown).
func fileLimit(log *slog.Logger) uint64 {
	soft, hard, raised, err := raiseFileLimit()
	switch {
	case errors.Is(err, errors.ErrUnsupported):
		log.Info("no descriptor limit to raise on this system; the connection caps are as set")
		return 0
	case err != nil && soft == 0:
		log.Warn("descriptor limit unknown; the connection caps are as set", "err", err)
		return 0
	case err != nil:
		log.Warn("descriptor limit not raised to its hard limit", "soft", soft, "hard", hard, "err", err)
	case raised:
		log.Info("descriptor limit raised to its hard limit", "soft", soft, "hard", hard)
	default:
		log.Info("descriptor limit", "soft", soft, "hard", hard)
	}
	return soft
}

// registerConnMetrics registers the connection caps' metrics of the named
// listeners (mcp, admin): open connections, and connections closed at
// once by the bound that refused them (total, source).
func registerConnMetrics(reg prometheus.Registerer, listeners []namedListener) {
	for _, nl := range listeners {
		ln := nl.ln
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "mcpruntime_connections_open",
			Help:        "Open TCP connections of a listener (mcp, admin) within its connection caps.",
			ConstLabels: prometheus.Labels{"listener": nl.name},
		}, func() float64 { return float64(ln.Stats().Open) }))
		for _, r := range []struct {
			reason string
			n      func(connlimit.Stats) uint64
		}{
			{"total", func(s connlimit.Stats) uint64 { return s.RefusedTotal }},
			{"source", func(s connlimit.Stats) uint64 { return s.RefusedSource }},
		} {
			reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name:        "mcpruntime_connections_refused_total",
				Help:        "TCP connections a listener (mcp, admin) closed at once on accept, by the cap that refused them (total: the listener's, source: its per-source one).",
				ConstLabels: prometheus.Labels{"listener": nl.name, "reason": r.reason},
			}, func() float64 { return float64(r.n(ln.Stats())) }))
		}
	}
}

// namedListener is a capped listener and its metrics label.
type namedListener struct {
	name string
	ln   *connlimit.Listener
}

// Package metrics exports the runtime's Prometheus metrics: MCP sessions
// (live, opened, closed by reason), authentication failures by reason,
// requests by method and status with a latency histogram, and the
// runtime's actors and records. It implements transport.Observer.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/transport"
)

// Metrics is the transport observer and the runtime's collectors.
type Metrics struct {
	opened   prometheus.Counter
	closed   *prometheus.CounterVec
	authFail *prometheus.CounterVec
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

var _ transport.Observer = (*Metrics)(nil)

// New registers the metrics with reg. rt feeds the gauges of actors and
// records; sessions, if not nil, counts live MCP sessions.
func New(reg prometheus.Registerer, rt *mcpruntime.Runtime, sessions func() int) *Metrics {
	m := &Metrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpruntime_mcp_sessions_opened_total",
			Help: "MCP sessions opened by initialize.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_mcp_sessions_closed_total",
			Help: "MCP sessions ended, by reason (delete, idle, cap, revoke, shutdown).",
		}, []string{"reason"}),
		authFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_auth_failures_total",
			Help: "Requests answered 401, by reason (missing, malformed_header, malformed, unknown, revoked, expired).",
		}, []string{"reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_http_requests_total",
			Help: "MCP endpoint requests, by HTTP method and status.",
		}, []string{"method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcpruntime_http_request_duration_seconds",
			Help:    "MCP endpoint request latency (a stream counts until it ends), by HTTP method.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
	}
	reg.MustRegister(m.opened, m.closed, m.authFail, m.requests, m.latency)
	if sessions != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "mcpruntime_mcp_sessions",
			Help: "Live MCP sessions.",
		}, func() float64 { return float64(sessions()) }))
	}
	gauge := func(name, help string, f func(mcpruntime.Stats) int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(rt.Stats())) }))
	}
	gauge("mcpruntime_actors", "Live processes of the actor system (actors and requests in flight).", func(s mcpruntime.Stats) int { return s.Processes })
	gauge("mcpruntime_threads", "Threads.", func(s mcpruntime.Stats) int { return s.Threads })
	gauge("mcpruntime_provider_sessions", "Open provider sessions.", func(s mcpruntime.Stats) int { return s.ProviderSessions })
	gauge("mcpruntime_live_credentials", "Credentials and client tokens in state live.", func(s mcpruntime.Stats) int { return s.LiveCredentials })
	return m
}

// Request implements transport.Observer.
func (m *Metrics) Request(method string, status int, d time.Duration) {
	m.requests.WithLabelValues(method, strconv.Itoa(status)).Inc()
	m.latency.WithLabelValues(method).Observe(d.Seconds())
}

// AuthFailure implements transport.Observer.
func (m *Metrics) AuthFailure(reason string) { m.authFail.WithLabelValues(reason).Inc() }

// SessionOpened implements transport.Observer.
func (m *Metrics) SessionOpened() { m.opened.Inc() }

// SessionClosed implements transport.Observer.
func (m *Metrics) SessionClosed(reason string) { m.closed.WithLabelValues(reason).Inc() }

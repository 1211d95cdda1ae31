// Package metrics exports the runtime's Prometheus metrics: MCP sessions
// (live, opened, closed by reason), authentication failures by reason,
// requests by method and status with a latency histogram, and the
// runtime's actors and records, requests refused by a bound, and requests
// forwarded to their home node by outcome (several nodes). It
// implements mcpruntime.Observer, and imports the module root only.
//
// Every label takes its value from a fixed set, whatever the request
// carried: HTTP methods, statuses and reasons outside the lists below count
// as "other", so no input, authenticated or not, adds a series.
package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// other is the label value of anything outside a label's fixed set.
const other = "other"

// The fixed label sets.
var (
	methodLabels = labelSet("GET", "POST", "DELETE")
	// eraLabels are the protocol eras of a request.
	eraLabels = labelSet("session", "modern")
	// statusLabels are the statuses the MCP endpoint answers.
	statusLabels = statusSet(200, 202, 204, 400, 401, 403, 404, 405, 406, 408, 409, 413, 415, 429, 500, 503)
	// authReasons: the endpoint's own and the runtime's AuthError reasons.
	authReasons = labelSet("missing", "malformed_header", "malformed", "unknown", "revoked", "expired", "invalid")
	// closeReasons are the MCP session's end reasons.
	closeReasons = labelSet("delete", "idle", "cap", "revoke", "shutdown")
	// boundLabels are the bounds an Observer's Refused names.
	boundLabels = labelSet("requests_per_namespace", "requests", "body_bytes", "sessions_per_namespace", "sessions",
		"modern_requests_per_namespace", "listen_per_namespace", "listen", "unavailable", "rate_per_namespace")
	// forwardOutcomes are the outcomes an Observer's Forward names.
	forwardOutcomes = labelSet("proxied", "home_gone", "proxy_error", "read_here")
)

// labelSet maps each allowed value to itself.
func labelSet(values ...string) map[string]string {
	m := make(map[string]string, len(values))
	for _, v := range values {
		m[v] = v
	}
	return m
}

func statusSet(codes ...int) map[int]string {
	m := make(map[int]string, len(codes))
	for _, c := range codes {
		m[c] = strconv.Itoa(c)
	}
	return m
}

// label returns v's label value in set: v itself, or "other".
func label[K comparable](set map[K]string, v K) string {
	if l, ok := set[v]; ok {
		return l
	}
	return other
}

// Metrics is the MCP endpoint's observer and the runtime's collectors.
type Metrics struct {
	opened   prometheus.Counter
	closed   *prometheus.CounterVec
	authFail *prometheus.CounterVec
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	refused  *prometheus.CounterVec
	forwards *prometheus.CounterVec
}

var _ mcpruntime.Observer = (*Metrics)(nil)

// New registers the metrics with reg. rt feeds the gauges of MCP sessions
// (its Stats: the endpoints' session tables), actors and records.
func New(reg prometheus.Registerer, rt *mcpruntime.Runtime) *Metrics {
	m := &Metrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mcpruntime_mcp_sessions_opened_total",
			Help: "MCP sessions opened by initialize.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_mcp_sessions_closed_total",
			Help: "MCP sessions ended, by reason (delete, idle, cap, revoke, shutdown, other).",
		}, []string{"reason"}),
		authFail: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_auth_failures_total",
			Help: "Requests answered 401, by reason (missing, malformed_header, malformed, unknown, revoked, expired, invalid, other).",
		}, []string{"reason"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_http_requests_total",
			Help: "MCP endpoint requests, by protocol era (session, modern), HTTP method (GET, POST, DELETE, other) and status (those the endpoint answers, other).",
		}, []string{"era", "method", "status"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "mcpruntime_http_request_duration_seconds",
			Help:    "MCP endpoint request latency (a stream counts until it ends), by protocol era (session, modern) and HTTP method (GET, POST, DELETE, other).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"era", "method"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_http_refused_total",
			Help: "MCP endpoint requests refused by a bound (429, 503), by bound (requests_per_namespace, requests, body_bytes, sessions_per_namespace, sessions, modern_requests_per_namespace, listen_per_namespace, listen, unavailable, rate_per_namespace, other).",
		}, []string{"bound"}),
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mcpruntime_forwarded_requests_total",
			Help: "MCP endpoint requests of a principal whose home is another node, by outcome: sent on (proxied, home_gone, proxy_error) or read_here (a read answered from this node's replica), other.",
		}, []string{"outcome"}),
	}
	reg.MustRegister(m.opened, m.closed, m.authFail, m.requests, m.latency, m.refused, m.forwards)
	gauge := func(name, help string, f func(mcpruntime.Stats) int) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return float64(f(rt.Stats())) }))
	}
	gauge("mcpruntime_mcp_sessions", "Live MCP sessions.", func(s mcpruntime.Stats) int { return s.MCPSessions })
	gauge("mcpruntime_mcp_listen_streams", "Open 2026-07-28 listen streams (subscriptions/listen).", func(s mcpruntime.Stats) int { return s.ListenStreams })
	gauge("mcpruntime_mcp_modern_calls", "2026-07-28 requests being answered (listen streams not included).", func(s mcpruntime.Stats) int { return s.ModernCalls })
	gauge("mcpruntime_actors", "Live processes of the actor system (actors and requests in flight).", func(s mcpruntime.Stats) int { return s.Processes })
	gauge("mcpruntime_threads", "Threads.", func(s mcpruntime.Stats) int { return s.Threads })
	gauge("mcpruntime_provider_sessions", "Open provider sessions.", func(s mcpruntime.Stats) int { return s.ProviderSessions })
	gauge("mcpruntime_live_credentials", "Credentials and client tokens in state live.", func(s mcpruntime.Stats) int { return s.LiveCredentials })
	if rt.Node().ID != "" {
		registerNode(reg, rt)
	}
	if rt.StateStats().Path != "" {
		reg.MustRegister(stateCollector{rt})
	}
	return m
}

// stateCollector reports the durable store of one node (SPEC §3.8) from
// the runtime's own counts, read at each scrape.
type stateCollector struct{ rt *mcpruntime.Runtime }

var (
	stateWriteDesc = prometheus.NewDesc("mcpruntime_state_write_duration_seconds",
		"Store writes committed to the state file, by latency from the write's call to its return: its wait for the group commit it joins, the sync and the apply.", nil, nil)
	stateBytesDesc = prometheus.NewDesc("mcpruntime_state_file_bytes", "Size of the state file.", nil, nil)
)

func (stateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- stateWriteDesc
	ch <- stateBytesDesc
}

func (c stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.rt.StateStats()
	buckets := make(map[float64]uint64, len(mcpruntime.StateLatencyBounds))
	for i, b := range mcpruntime.StateLatencyBounds {
		buckets[b.Seconds()] = st.LatencyCounts[i]
	}
	ch <- prometheus.MustNewConstHistogram(stateWriteDesc, st.Commits, st.LatencySum.Seconds(), buckets)
	ch <- prometheus.MustNewConstMetric(stateBytesDesc, prometheus.GaugeValue, float64(st.Bytes))
}

// Request implements mcpruntime.Observer.
func (m *Metrics) Request(era, method string, status int, d time.Duration) {
	era, method = label(eraLabels, era), label(methodLabels, method)
	m.requests.WithLabelValues(era, method, label(statusLabels, status)).Inc()
	m.latency.WithLabelValues(era, method).Observe(d.Seconds())
}

// AuthFailure implements mcpruntime.Observer.
func (m *Metrics) AuthFailure(reason string) {
	m.authFail.WithLabelValues(label(authReasons, reason)).Inc()
}

// SessionOpened implements mcpruntime.Observer.
func (m *Metrics) SessionOpened() { m.opened.Inc() }

// SessionClosed implements mcpruntime.Observer.
func (m *Metrics) SessionClosed(reason string) {
	m.closed.WithLabelValues(label(closeReasons, reason)).Inc()
}

// Refused implements mcpruntime.Observer.
func (m *Metrics) Refused(bound string) {
	m.refused.WithLabelValues(label(boundLabels, bound)).Inc()
}

// Forward implements mcpruntime.Observer.
func (m *Metrics) Forward(outcome string) {
	m.forwards.WithLabelValues(label(forwardOutcomes, outcome)).Inc()
}

// registerNode registers the gauges of a node of several (SPEC §7.4).
func registerNode(reg prometheus.Registerer, rt *mcpruntime.Runtime) {
	node := func(name, help string, f func(mcpruntime.Node) float64) {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return f(rt.Node()) }))
	}
	node("mcpruntime_node_serving", "1 while this node serves (its replica proved current within the fence), else 0.", func(n mcpruntime.Node) float64 {
		if n.Serving {
			return 1
		}
		return 0
	})
	node("mcpruntime_node_members", "Members of the cluster this node sees, itself included.", func(n mcpruntime.Node) float64 { return float64(len(n.Members)) })
	node("mcpruntime_node_applied_revision", "The etcd revision this node's replica has applied.", func(n mcpruntime.Node) float64 { return float64(n.Applied) })
	node("mcpruntime_node_replica_lag_revisions", "etcd revisions the replica was behind at the fence's latest read.", func(n mcpruntime.Node) float64 { return float64(n.Lag) })
	node("mcpruntime_node_fence_age_seconds", "Age of the latest proof that the replica is current; -1 when there is none.", func(n mcpruntime.Node) float64 {
		if n.SinceConfirmed < 0 {
			return -1
		}
		return n.SinceConfirmed.Seconds()
	})
}

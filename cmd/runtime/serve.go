package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/admin"
	"github.com/agenthost/mcpruntime/cluster"
	"github.com/agenthost/mcpruntime/internal/connlimit"
	"github.com/agenthost/mcpruntime/internal/httpguard"
	"github.com/agenthost/mcpruntime/metrics"
)

// serveCmd is `runtime serve`, the default command.
type serveCmd struct {
	Listen               string   `config:"" default:"127.0.0.1:7331" placeholder:"HOST:PORT" help:"MCP listen address; loopback unless told otherwise."`
	MCPPath              string   `config:"" name:"mcp-path" default:"/mcp" placeholder:"PATH" help:"Path of the MCP endpoint."`
	Endpoint             string   `config:"" placeholder:"URL" help:"MCP URL handed to provider sessions. Default: http://<listen address><mcp-path>, 127.0.0.1 for an unspecified host."`
	AllowedHosts         []string `config:"" placeholder:"HOST" help:"Host header values the MCP endpoint accepts besides loopback ones and, when --listen is beyond loopback, its own host."`
	AdminListen          string   `config:"" default:"127.0.0.1:7332" placeholder:"HOST:PORT" help:"Listen address of the admin API, /healthz and /readyz."`
	AdminTokenFile       string   `config:"" default:"${default_token_file}" placeholder:"FILE" help:"Where a generated admin token is written (mode 0600) when $RUNTIME_ADMIN_TOKEN is not set."`
	CredentialWindow     duration `config:"" default:"24h" placeholder:"DURATION" help:"A provider credential expires after this long without a turn start; never: no expiry."`
	ClientTokenTTL       duration `config:"" name:"client-token-ttl" default:"24h" placeholder:"DURATION" help:"A client token authenticates this long after issue; never: no expiry."`
	BodyLimit            byteSize `config:"" default:"4MiB" placeholder:"SIZE" help:"Largest MCP POST body, in bytes or with a KiB, MiB or GiB suffix."`
	HeaderTimeout        duration `config:"" default:"10s" placeholder:"DURATION" help:"How long a request's headers may take to arrive, on both listeners."`
	BodyTimeout          duration `config:"" default:"30s" placeholder:"DURATION" help:"How long an MCP POST body may take to arrive once its headers are admitted; then 408 and the connection closes. never: no deadline."`
	RequestsPerNamespace int      `config:"" default:"256" placeholder:"N" help:"MCP requests of one principal in flight at once, each request of a JSON-RPC batch counted; the next gets 429."`
	RatePerNamespace     float64  `config:"" default:"0" placeholder:"N" help:"Sustained MCP messages a second of one principal (each message of a JSON-RPC batch counted), a token bucket of --burst-per-namespace; past it 429 with the bucket's Retry-After. Per node. 0: no rate limit."`
	BurstPerNamespace    int      `config:"" default:"0" placeholder:"N" help:"The bucket of --rate-per-namespace: messages one principal may send at once before the rate applies. 0: the rate rounded up."`
	MaxRequests          int      `config:"" default:"4096" placeholder:"N" help:"MCP requests in flight in all, each request of a JSON-RPC batch counted; the next gets 503."`
	BodyBytesInFlight    byteSize `config:"" default:"64MiB" placeholder:"SIZE" help:"Bytes of MCP POST bodies held at once (at least --body-limit); a body that does not fit gets 503."`
	IdleTimeout          duration `config:"" default:"30m" placeholder:"DURATION" help:"An MCP session with nothing in flight for this long ends; never: no eviction."`
	ProviderIdle         duration `config:"" default:"30m" placeholder:"DURATION" help:"A provider session none of whose threads had a turn for this long (and none has a run in flight) is released; never: no idle release."`
	ProviderOpenTimeout  duration `config:"" default:"90s" placeholder:"DURATION" help:"Bound on opening a provider session (its agent started and connected) and on each other call to its driver (a rotation, a turn's start); the agents' own startTimeout (60s unless their instance says otherwise) must fit in it."`
	SessionsPerNamespace int      `config:"" default:"64" placeholder:"N" help:"MCP sessions per principal; the next initialize evicts its least recently active idle one, or gets 429."`
	MaxSessions          int      `config:"" default:"100000" placeholder:"N" help:"MCP sessions in all; past it initialize gets 503."`
	KeepAlive            duration `config:"" default:"25s" placeholder:"DURATION" help:"Interval of SSE keep-alive comments."`
	AskTimeout           duration `config:"" default:"60s" placeholder:"DURATION" help:"How long an MCP request waits for its client's answers to one round of the runtime's requests to it (elicitation, sampling, roots; 2025 sessions); then they are cancelled and the request fails."`
	ShutdownGrace        duration `config:"" default:"10s" placeholder:"DURATION" help:"On SIGINT or SIGTERM, the deadline of the whole shutdown: calls and requests in flight, then provider sessions (an agent still running then is killed); /readyz answers 503 meanwhile."`
	StateDir             string   `config:"" default:"${default_state_dir}" placeholder:"DIR" help:"Directory of the durable state (state.db, created 0700, files 0600): threads, messages, client grants and provider instances outlive a restart; one process per directory. Empty: in memory. Not with --etcd: several nodes keep their state in etcd."`
	Memory               bool     `config:"" default:"false" help:"Keep all state in memory, gone at exit, whatever --state-dir says."`
	Demo                 bool     `config:"" default:"false" negatable:"" help:"Create thread demo on an in-process instance demo, start a run, and write its live Authorization value to a 0600 file: for trying the server out (make run passes it), never for production."`

	// The admin listener's guard and the bound on threads.
	AdminAllowedHosts []string `config:"" placeholder:"HOST" help:"Host header values the admin listener (admin API, /healthz, /readyz, /metrics) accepts besides loopback ones and, when --admin-listen is beyond loopback, its own host."`
	MaxThreads        int      `config:"" default:"10000" placeholder:"N" help:"Threads in all (active and archived); past it creating one fails (admin API: 409 too_many_threads)."`

	// The connection caps of the MCP and the admin listener (SPEC §7.1).
	MaxConnections               int `config:"" default:"16384" placeholder:"N" help:"Open TCP connections of the MCP listener in all; one more is closed at once on accept, unanswered. Unless set, lowered to fit the descriptor limit (raised to its hard limit at start) less a reserve of a quarter (at least 256) and the admin listener's share."`
	MaxConnectionsPerSource      int `config:"" default:"1024" placeholder:"N" help:"Open TCP connections of the MCP listener from one source (an IPv4 address or an IPv6 /64, loopback ones included); one more is closed at once on accept, unanswered. Behind a proxy on the same host every client is one source: raise it there."`
	AdminMaxConnections          int `config:"" default:"64" placeholder:"N" help:"Open TCP connections of the admin listener in all, its own share apart from the MCP listener's; one more is closed at once on accept, unanswered. Unless set, lowered to an eighth of the descriptor budget when that is less."`
	AdminMaxConnectionsPerSource int `config:"" default:"16" placeholder:"N" help:"Open TCP connections of the admin listener from one source (an IPv4 address or an IPv6 /64, loopback ones included); one more is closed at once on accept, unanswered."`

	// The audit trail (SPEC §3.7).
	Audit     bool   `config:"" default:"false" help:"Journal an audit record per MCP tools/call, resources/read and prompts/get (principal, what, outcome, duration; never a token or an argument) on the admin event stream (kind audit)."`
	AuditFile string `config:"" placeholder:"FILE" help:"Append the audit records to this file as JSON lines (created 0600; implies --audit), reopened on SIGHUP for log rotation. Records the writer misses because it fell behind the journal are counted in runtime_audit_dropped_total."`

	// The MCP lists.
	ListPageSize int      `config:"" default:"100" placeholder:"N" help:"Entries of one page of an MCP list (tools, resources, resource templates, prompts); the rest follows with nextCursor."`
	OmitBuiltins []string `config:"" placeholder:"NAME" help:"Built-ins not to serve: runtime_capabilities, thread_list, thread_read, thread_post, thread-transcript (the transcript resource template), or * for all."`

	// The MCP session's streams and subscriptions.
	ReplayEvents     int      `config:"" default:"256" placeholder:"N" help:"SSE events one MCP session keeps for its client to resume a lost stream (Last-Event-ID) and for its standalone stream's notifications; past it the oldest goes."`
	ReplayBytes      byteSize `config:"" default:"1MiB" placeholder:"SIZE" help:"Bytes of those events one MCP session keeps; past it the oldest goes."`
	MaxSubscriptions int      `config:"" default:"256" placeholder:"N" help:"Resources one MCP session may subscribe (resources/subscribe); the next is refused."`

	// The 2026-07-28 era.
	ModernRequestsPerNamespace int      `config:"" default:"64" placeholder:"N" help:"2026-07-28 (stateless) MCP requests of one namespace in flight at once, listen streams not counted; the next gets 429."`
	ListenPerNamespace         int      `config:"" default:"8" placeholder:"N" help:"Open subscriptions/listen streams of one namespace; the next gets 429."`
	MaxListen                  int      `config:"" default:"10000" placeholder:"N" help:"Open subscriptions/listen streams in all; the next gets 503."`
	RequestStateTTL            duration `config:"" default:"5m" placeholder:"DURATION" help:"How long the requestState of a 2026-07-28 input_required result stays good for its retry."`

	oauthFlags `embed:""`

	// Several nodes on etcd.
	clusterFlags `embed:""`
}

// validate checks what the types alone do not.
func (s *serveCmd) validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, a := range []struct{ name, addr string }{{"listen", s.Listen}, {"admin-listen", s.AdminListen}} {
		if err := checkAddr(a.name, a.addr); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Listen == s.AdminListen && !strings.HasSuffix(s.Listen, ":0") {
		add("--listen and --admin-listen are both %q; they must differ", s.Listen)
	}
	if s.clustered() && !strings.HasSuffix(s.InternalListen, ":0") && (s.InternalListen == s.Listen || s.InternalListen == s.AdminListen) {
		add("--internal-listen %q: it must differ from --listen and --admin-listen", s.InternalListen)
	}
	if !strings.HasPrefix(s.MCPPath, "/") || strings.ContainsAny(s.MCPPath, " ?#") {
		add("--mcp-path %q: want a path such as /mcp", s.MCPPath)
	}
	if s.Endpoint != "" {
		if u, err := url.Parse(s.Endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("--endpoint %q: want an absolute http(s) URL", s.Endpoint)
		}
	}
	for _, hs := range []struct {
		name  string
		hosts []string
	}{{"allowed-hosts", s.AllowedHosts}, {"admin-allowed-hosts", s.AdminAllowedHosts}} {
		for _, h := range hs.hosts {
			if h == "" || strings.ContainsAny(h, " /") {
				add("--%s: %q is not a host name or IP address", hs.name, h)
			}
		}
	}
	for _, d := range []struct {
		name     string
		v        duration
		canNever bool
	}{
		{"credential-window", s.CredentialWindow, true},
		{"client-token-ttl", s.ClientTokenTTL, true},
		{"idle-timeout", s.IdleTimeout, true},
		{"provider-idle", s.ProviderIdle, true},
		{"provider-open-timeout", s.ProviderOpenTimeout, false},
		{"keep-alive", s.KeepAlive, false},
		{"ask-timeout", s.AskTimeout, false},
		{"header-timeout", s.HeaderTimeout, false},
		{"body-timeout", s.BodyTimeout, true},
		{"shutdown-grace", s.ShutdownGrace, false},
	} {
		if d.v == never && !d.canNever {
			add("--%s: never is not allowed here", d.name)
		} else if d.v != never && d.v <= 0 {
			add("--%s %s: want a positive duration", d.name, time.Duration(d.v))
		}
	}
	for _, n := range []struct {
		name string
		v    int64
	}{
		{"body-limit", int64(s.BodyLimit)}, {"sessions-per-namespace", int64(s.SessionsPerNamespace)}, {"max-sessions", int64(s.MaxSessions)},
		{"requests-per-namespace", int64(s.RequestsPerNamespace)}, {"max-requests", int64(s.MaxRequests)}, {"body-bytes-in-flight", int64(s.BodyBytesInFlight)},
		{"max-threads", int64(s.MaxThreads)}, {"list-page-size", int64(s.ListPageSize)},
		{"max-connections", int64(s.MaxConnections)}, {"max-connections-per-source", int64(s.MaxConnectionsPerSource)},
		{"admin-max-connections", int64(s.AdminMaxConnections)}, {"admin-max-connections-per-source", int64(s.AdminMaxConnectionsPerSource)},
		{"replay-events", int64(s.ReplayEvents)}, {"replay-bytes", int64(s.ReplayBytes)}, {"max-subscriptions", int64(s.MaxSubscriptions)},
		{"modern-requests-per-namespace", int64(s.ModernRequestsPerNamespace)}, {"listen-per-namespace", int64(s.ListenPerNamespace)}, {"max-listen", int64(s.MaxListen)},
	} {
		if n.v < 1 {
			add("--%s %d: want at least 1", n.name, n.v)
		}
	}
	if s.BodyBytesInFlight < s.BodyLimit {
		add("--body-bytes-in-flight %d: want at least --body-limit (%d)", s.BodyBytesInFlight, s.BodyLimit)
	}
	errs = append(errs, s.oauthFlags.validate()...)
	errs = append(errs, s.clusterFlags.validate()...)
	return errors.Join(errs...)
}

// runtimeDuration maps a duration setting to the runtime's convention
// (mcpruntime.NoExpiry, or a negative MCP endpoint timeout, for never).
func runtimeDuration(d duration) time.Duration {
	if d == never {
		return mcpruntime.NoExpiry
	}
	return time.Duration(d)
}

// readyHookKey is a context key: a func(mcpAddr, adminAddr string) called
// once the server is ready. Tests use it to learn the ports of :0.
type readyHookKey struct{}

// health is the state /readyz reports. serving, when set, is asked while
// ready: a node of several that cannot prove its replica current serves
// nothing, so it is not ready either (its load balancer sends elsewhere).
type health struct {
	state   atomic.Int32
	serving func() bool
}

const (
	stateStarting int32 = iota
	stateReady
	stateShuttingDown
)

func (h *health) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	fmt.Fprintln(w, `{"status":"ok"}`)
}

func (h *health) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	switch h.state.Load() {
	case stateReady:
		if h.serving != nil && !h.serving() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, `{"status":"not serving"}`)
			return
		}
		fmt.Fprintln(w, `{"status":"ready"}`)
	case stateShuttingDown:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"status":"shutting down"}`)
	default:
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, `{"status":"starting"}`)
	}
}

// Run serves until d.ctx ends, then shuts down gracefully.
func (s *serveCmd) Run(d *deps) error {
	if err := s.validate(); err != nil {
		return usageError{err}
	}
	srv, err := s.start(d)
	defer srv.release()
	if err != nil {
		return err
	}
	serveErr := srv.serve(d.ctx)
	if err := srv.shutdown(d.ctx); err != nil && !errors.Is(serveErr, errLost) {
		return err // a lost node's revokes may fail: it is still lost
	}
	if serveErr != nil {
		return serveErr
	}
	d.logger.Info("shut down")
	return nil
}

// server is a started runtime with its listeners: start builds it, serve
// runs its listeners, shutdown stops it, and release frees what is left.
type server struct {
	s      *serveCmd
	log    *slog.Logger
	rt     *mcpruntime.Runtime
	mcp    *mcpruntime.MCPEndpoint
	health *health

	mcpLn, adminLn, internalLn       net.Listener
	mcpConns, adminConns             *connlimit.Listener // mcpLn and adminLn, capped
	caps                             connCaps
	mcpHTTP, adminHTTP, internalHTTP *http.Server
	errc                             chan error // each server's Serve error

	cluster  cluster.Config
	endpoint string                   // the MCP URL handed to provider sessions
	issuer   string                   // the OAuth issuer; "" when sign-in is off
	demoFile string                   // the demo credential's file; "" without one
	audit    *auditSink               // --audit-file; nil without one
	tracer   *sdktrace.TracerProvider // OTLP export (tracing.go); nil without one

	rtClosed bool     // shutdown has closed rt
	undo     []func() // run by release, last first
}

// release undoes what start did and shutdown did not: it closes the
// listeners and, after a failed start, the runtime, and removes the
// secret files. srv may be nil.
func (srv *server) release() {
	if srv == nil {
		return
	}
	for i := len(srv.undo) - 1; i >= 0; i-- {
		srv.undo[i]()
	}
}

// start binds the listeners and builds the runtime, its MCP endpoint,
// the admin API and the metrics, and writes the admin token and demo
// credential files. Only the internal listener (several nodes) serves
// when it returns. On an error the server returned still needs release.
func (s *serveCmd) start(d *deps) (*server, error) {
	log := d.logger
	srv := &server{s: s, log: log, health: &health{}, errc: make(chan error, 3)}
	token, generated, err := adminToken(d.env, log)
	if err != nil {
		return srv, err
	}
	if generated && s.AdminTokenFile == "" {
		return srv, usageError{errors.New("no place for the admin token file: set --admin-token-file or $RUNTIME_ADMIN_TOKEN (none of $XDG_RUNTIME_DIR, $XDG_CACHE_HOME, $HOME is set)")}
	}
	if srv.cluster, err = s.clusterConfig(d.env, d.given, log); err != nil {
		return srv, err
	}
	srv.caps = s.connCaps(d.given, fileLimit(log), log)
	log.Info("connection caps", "max_connections", srv.caps.mcp.Total, "max_connections_per_source", srv.caps.mcp.PerSource,
		"admin_max_connections", srv.caps.admin.Total, "admin_max_connections_per_source", srv.caps.admin.PerSource)
	if err := srv.listen(); err != nil {
		return srv, err
	}
	mcpAddr := srv.mcpLn.Addr().String()
	allowed, adminAllowed := s.allowedHosts(mcpAddr, srv.adminLn.Addr().String(), log)
	srv.endpoint = s.Endpoint
	if srv.endpoint == "" {
		srv.endpoint = "http://" + urlHost(s.Listen, mcpAddr) + s.MCPPath
	}

	stateDir, err := s.stateDir(d.env, d.given, log)
	if err != nil {
		return srv, err
	}
	stateFile := ""
	if stateDir != "" {
		stateFile = filepath.Join(stateDir, stateFileName)
	}
	var oauthCfg mcpruntime.OAuthConfig
	if s.clustered() && !s.clusterOAuth(d.given) {
		log.Info("OAuth sign-in is off on several nodes unless --public-origin and --oauth-secret-file are given")
	} else if oauthCfg, err = s.oauthFlags.config("http://"+urlHost(s.Listen, mcpAddr), s.MCPPath, allowed); err != nil {
		return srv, err
	}
	if oauthCfg.PublicOrigin != "" && oauthCfg.Secret == nil && stateDir != "" {
		// The registrations and sign-ins a state file keeps need the secret
		// that MACs their client ids to outlive the restart as well.
		if oauthCfg.Secret, err = stateSecret(filepath.Join(stateDir, oauthSecretName)); err != nil {
			return srv, err
		}
	}
	srv.issuer = oauthCfg.PublicOrigin
	rt, err := mcpruntime.New(mcpruntime.Config{
		Cluster:          clusterOf(srv.cluster),
		OAuth:            oauthCfg,
		Endpoint:         srv.endpoint,
		CredentialWindow: runtimeDuration(s.CredentialWindow),
		ClientTokenTTL:   runtimeDuration(s.ClientTokenTTL),
		ProviderIdle:     runtimeDuration(s.ProviderIdle),
		OpenTimeout:      time.Duration(s.ProviderOpenTimeout),
		MaxThreads:       s.MaxThreads,
		StateFile:        stateFile,
		OmitBuiltins:     s.OmitBuiltins,
		Audit:            s.Audit || s.AuditFile != "",
		Logger:           log,
		Drivers:          agentDrivers(log),
	})
	if errors.Is(err, mcpruntime.ErrInvalidArgument) || errors.Is(err, cluster.ErrNodeInUse) {
		return srv, usageError{err} // a setting the runtime refuses, such as --node's shape, or a --node a live member holds
	}
	if err != nil {
		return srv, stateError(err)
	}
	srv.rt = rt
	srv.undo = append(srv.undo, func() {
		if !srv.rtClosed {
			_ = rt.Close()
		}
	})
	// The internal listener serves from the moment the node is a member:
	// the other nodes' revokes ask it to confirm (one that cannot ask waits
	// out the fence instead).
	if srv.internalLn != nil {
		srv.internalHTTP = s.httpServer(rt.InternalHandler(), log)
		srv.undo = append(srv.undo, func() { _ = srv.internalHTTP.Close() }) // after a shutdown, a no-op
		if tc := srv.cluster.InternalServerTLS(); tc != nil {
			srv.internalHTTP.TLSConfig = tc // mutual TLS: a client certificate of the cluster's CA, in the handshake
			go func() {
				srv.errc <- fmt.Errorf("internal server: %w", srv.internalHTTP.ServeTLS(srv.internalLn, "", ""))
			}()
		} else {
			go func() { srv.errc <- fmt.Errorf("internal server: %w", srv.internalHTTP.Serve(srv.internalLn)) }()
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerConnMetrics(reg, []namedListener{{"mcp", srv.mcpConns}, {"admin", srv.adminConns}})
	if s.AuditFile != "" {
		hup := make(chan os.Signal, 1)
		signal.Notify(hup, syscall.SIGHUP)
		if srv.audit, err = newAuditSink(s.AuditFile, rt, reg, hup, log); err != nil {
			signal.Stop(hup)
			return srv, usageError{err}
		}
		go srv.audit.run()
		srv.undo = append(srv.undo, func() { signal.Stop(hup); srv.audit.abandon() })
		log.Info("audit file", "path", s.AuditFile)
	}
	opts := s.mcpOptions(metrics.New(reg, rt), allowed, log)
	if tracingOn(d.env) {
		tp, err := newTracerProvider(d.ctx, log)
		if err != nil {
			return srv, usageError{err}
		}
		srv.tracer, opts.TracerProvider = tp, tp
		srv.undo = append(srv.undo, func() { _ = tp.Shutdown(context.Background()) }) // after a shutdown, a no-op
	}
	if srv.mcp, err = rt.MCPHandler(opts); err != nil {
		return srv, err
	}
	adminAPI := admin.New(rt, admin.Options{Token: token, MCP: srv.mcp, Logger: log})
	if err := srv.writeFiles(d.ctx, token, generated); err != nil {
		return srv, err
	}

	if s.clustered() {
		srv.health.serving = func() bool { return rt.Node().Serving }
	}
	srv.mcpHTTP = s.httpServer(srv.mcp, log)
	srv.adminHTTP = s.httpServer(&adminListener{
		guard:   httpguard.Guard{AllowedHosts: adminAllowed},
		health:  srv.health,
		metrics: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}),
		api:     adminAPI,
	}, log)
	return srv, nil
}

// listen binds the MCP, admin and (several nodes) internal listeners, the
// first two within their connection caps. Listening comes first: a second
// server on the same ports fails here, before it touches the first one's
// token file.
func (srv *server) listen() error {
	s := srv.s
	ln, err := net.Listen("tcp", s.Listen)
	if err != nil {
		return fmt.Errorf("MCP listener: %w", err)
	}
	srv.mcpConns = connlimit.New(ln, srv.caps.mcp)
	srv.mcpLn = srv.mcpConns
	srv.undo = append(srv.undo, func() { srv.mcpLn.Close() })
	if ln, err = net.Listen("tcp", s.AdminListen); err != nil {
		return fmt.Errorf("admin listener: %w", err)
	}
	srv.adminConns = connlimit.New(ln, srv.caps.admin)
	srv.adminLn = srv.adminConns
	srv.undo = append(srv.undo, func() { srv.adminLn.Close() })
	if !s.clustered() {
		return nil
	}
	if srv.internalLn, err = net.Listen("tcp", s.InternalListen); err != nil {
		return fmt.Errorf("internal listener: %w", err)
	}
	srv.undo = append(srv.undo, func() { srv.internalLn.Close() })
	srv.cluster.URL = s.internalURL(srv.internalLn.Addr().String())
	if !loopback(s.InternalListen) {
		srv.log.Warn("internal listener is beyond loopback: keep it on a network only the nodes reach", "addr", srv.internalLn.Addr().String())
	}
	return nil
}

// allowedHosts are the Host header values the MCP and the admin listener
// accept besides loopback ones: the configured ones and, for a listener
// beyond loopback, its own host.
func (s *serveCmd) allowedHosts(mcpAddr, adminAddr string, log *slog.Logger) (allowed, adminAllowed []string) {
	allowed = append([]string(nil), s.AllowedHosts...)
	if !loopback(s.Listen) {
		own := ownHosts(s.Listen)
		allowed = append(allowed, own...)
		log.Warn("MCP listener is beyond loopback", "addr", mcpAddr)
		log.Info("MCP Host check allows the listener's own host besides loopback", "hosts", own)
	}
	adminAllowed = append([]string(nil), s.AdminAllowedHosts...)
	if !loopback(s.AdminListen) {
		own := ownHosts(s.AdminListen)
		adminAllowed = append(adminAllowed, own...)
		log.Warn("admin listener is beyond loopback", "addr", adminAddr)
		log.Info("admin Host check allows the listener's own host besides loopback", "hosts", own)
	}
	return allowed, adminAllowed
}

// httpServer is the http.Server of one listener, with the header timeout
// and an error log at warning level.
func (s *serveCmd) httpServer(h http.Handler, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: time.Duration(s.HeaderTimeout),
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
}

// mcpOptions are the MCP endpoint's settings.
func (s *serveCmd) mcpOptions(observer *metrics.Metrics, allowed []string, log *slog.Logger) mcpruntime.MCPOptions {
	return mcpruntime.MCPOptions{
		Observer:                      observer,
		Path:                          s.MCPPath,
		AllowedHosts:                  allowed,
		MaxBodyBytes:                  int64(s.BodyLimit),
		BodyTimeout:                   runtimeDuration(s.BodyTimeout),
		MaxRequestsPerNamespace:       s.RequestsPerNamespace,
		MaxRequests:                   s.MaxRequests,
		RatePerNamespace:              s.RatePerNamespace,
		BurstPerNamespace:             s.BurstPerNamespace,
		MaxBodyBytesInFlight:          int64(s.BodyBytesInFlight),
		IdleTimeout:                   runtimeDuration(s.IdleTimeout),
		MaxSessionsPerNamespace:       s.SessionsPerNamespace,
		MaxSessions:                   s.MaxSessions,
		KeepAlive:                     time.Duration(s.KeepAlive),
		AskTimeout:                    time.Duration(s.AskTimeout),
		ListPageSize:                  s.ListPageSize,
		ReplayEvents:                  s.ReplayEvents,
		ReplayBytes:                   int(s.ReplayBytes),
		MaxSubscriptions:              s.MaxSubscriptions,
		MaxModernRequestsPerNamespace: s.ModernRequestsPerNamespace,
		MaxListenStreamsPerNamespace:  s.ListenPerNamespace,
		MaxListenStreams:              s.MaxListen,
		RequestStateTTL:               time.Duration(s.RequestStateTTL),
		Logger:                        log,
	}
}

// writeFiles writes a generated admin token to --admin-token-file and,
// with --demo, sets the demo up and writes its credential beside it.
// release removes both.
func (srv *server) writeFiles(ctx context.Context, token string, generated bool) error {
	s, log := srv.s, srv.log
	if generated {
		if err := writeSecretFile(s.AdminTokenFile, token); err != nil {
			return fmt.Errorf("admin token file: %w", err)
		}
		srv.undo = append(srv.undo, func() { removeSecretFile(s.AdminTokenFile, token) })
		log.Info("admin token written", "file", s.AdminTokenFile)
	}
	if !s.Demo {
		return nil
	}
	demoAuth, err := setupDemo(ctx, srv.rt, log)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if demoAuth == "" { // the demo thread lives on another node
		return nil
	}
	path, remove, err := writeDemoCredential(s.AdminTokenFile, demoAuth)
	if err != nil {
		return fmt.Errorf("demo credential file: %w", err)
	}
	srv.undo = append(srv.undo, remove)
	srv.demoFile = path
	log.Info("demo credential written", "file", path, "thread", "demo", "instance", "demo")
	return nil
}

// serve runs the MCP and admin listeners, reports ready, and waits for
// ctx to end, a server to fail or the node to lose its cluster
// membership. It returns nil for the first, otherwise what happened.
func (srv *server) serve(ctx context.Context) error {
	s, log := srv.s, srv.log
	go func() { srv.errc <- fmt.Errorf("MCP server: %w", srv.mcpHTTP.Serve(srv.mcpLn)) }()
	go func() { srv.errc <- fmt.Errorf("admin server: %w", srv.adminHTTP.Serve(srv.adminLn)) }()
	srv.health.state.Store(stateReady)
	mcpAddr, adminAddr := srv.mcpLn.Addr().String(), srv.adminLn.Addr().String()
	readyAttrs := []any{"mcp", "http://" + urlHost(s.Listen, mcpAddr) + s.MCPPath,
		"admin", "http://" + urlHost(s.AdminListen, adminAddr) + "/admin/v1/", "endpoint", srv.endpoint}
	if srv.demoFile != "" {
		readyAttrs = append(readyAttrs, "demo_credential", srv.demoFile)
	}
	if srv.issuer != "" {
		readyAttrs = append(readyAttrs, "oauth_issuer", srv.issuer)
	}
	if s.clustered() {
		readyAttrs = append(readyAttrs, "node", srv.cluster.Node, "internal", srv.cluster.URL)
	}
	log.Info("runtime ready", readyAttrs...)
	if hook, ok := ctx.Value(readyHookKey{}).(func(mcpAddr, adminAddr string)); ok {
		hook(mcpAddr, adminAddr)
	}

	select {
	case <-ctx.Done():
		log.Info("shutting down", "grace", time.Duration(s.ShutdownGrace))
		return nil
	case err := <-srv.errc:
		log.Error("server failed; shutting down", "err", err)
		return err
	case <-srv.rt.Lost(): // nil, so never, on one node
		log.Error("node lost its cluster membership; shutting down to rejoin as a new member", "node", srv.cluster.Node, "exit_status", exitLost)
		return errLost
	}
}

// adminToken is $RUNTIME_ADMIN_TOKEN, or a new random one (generated).
func adminToken(env map[string]string, log *slog.Logger) (token string, generated bool, err error) {
	if tok := strings.TrimSpace(env[envAdminToken]); tok != "" {
		if len(tok) < 32 {
			log.Warn("$" + envAdminToken + " is short; use at least 32 random characters")
		}
		log.Info("admin token from $" + envAdminToken)
		return tok, false, nil
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", false, err
	}
	return "mcpadm_" + base64.RawURLEncoding.EncodeToString(b), true, nil
}

// writeSecretFile writes secret to path with mode 0600, in a 0700
// directory made if missing, replacing any file there atomically.
func writeSecretFile(path, secret string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, a no-op
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.WriteString(secret + "\n"); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeSecretFile removes path if it still holds secret (another server
// may have replaced it since).
func removeSecretFile(path, secret string) {
	if b, err := os.ReadFile(path); err == nil && bytes.Equal(bytes.TrimSpace(b), []byte(secret)) {
		_ = os.Remove(path)
	}
}

// ownHosts are the Host names a listener beyond loopback answers to: its
// host, or for an unspecified one (":7331", "0.0.0.0:7331") this machine's
// name and addresses.
func ownHosts(addr string) []string {
	host, _, _ := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); host != "" && (ip == nil || !ip.IsUnspecified()) {
		return []string{strings.Trim(host, "[]")}
	}
	var hosts []string
	if name, err := os.Hostname(); err == nil && name != "" {
		hosts = append(hosts, name)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			hosts = append(hosts, n.IP.String())
		}
	}
	return hosts
}

// urlHost is a listener's address as a URL host: the configured host
// (loopback for an unspecified one: 127.0.0.1, or ::1 for "::") with the
// port actually bound (configured 0 picks one).
func urlHost(configured, bound string) string {
	host, _, err := net.SplitHostPort(configured)
	_, port, err2 := net.SplitHostPort(bound)
	if err != nil || err2 != nil {
		return bound
	}
	switch ip := net.ParseIP(host); {
	case host == "" || (ip != nil && ip.Equal(net.IPv4zero)):
		host = "127.0.0.1"
	case ip != nil && ip.IsUnspecified():
		host = "::1"
	}
	return net.JoinHostPort(host, port)
}

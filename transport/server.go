package transport

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/julienschmidt/httprouter"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/mcpruntime/actors/session"
	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/httpguard"
	"github.com/agenthost/mcpruntime/internal/liveness"
	"github.com/agenthost/mcpruntime/internal/principal"
	"github.com/agenthost/mcpruntime/internal/ratelimit"
	"github.com/agenthost/mcpruntime/internal/token"
	"github.com/agenthost/mcpruntime/memdb"
)

// caller is a request's principal as admitted: who its token
// authenticated as, and the endpoint's credential generation read just
// before (SPEC §5 step 0 compares it at dispatch).
type caller struct {
	principal.Principal
	credGen uint64
}

// Options are the endpoint's settings that an embedder chooses; the module
// root's MCPOptions is this type. Zero values mean the defaults given on
// each field. What the program hosting the endpoint wires in itself (its
// clock, its node's place among several, its OAuth discovery) is Host.
type Options struct {
	// Path of the MCP endpoint. Zero: "/mcp".
	Path string
	// AllowedOrigins are Origin values accepted besides loopback ones
	// (http(s)://localhost, 127.0.0.0/8, [::1], any port). A request with any
	// other Origin gets 403.
	AllowedOrigins []string
	// AllowAnyOrigin turns the Origin check off. Not for production.
	AllowAnyOrigin bool
	// AllowedHosts are Host names accepted besides loopback ones. A request
	// with any other Host gets 403 (DNS-rebinding guard).
	AllowedHosts []string
	// DisableHostCheck turns the Host check off (a server bound beyond
	// loopback behind a proxy that checks it).
	DisableHostCheck bool
	// MaxBodyBytes bounds a POST body (413). Zero: 4 MiB.
	MaxBodyBytes int64
	// BodyTimeout bounds how long a POST body may take to arrive once its
	// headers were admitted: the endpoint sets the connection's read
	// deadline (http.ResponseController) when it starts reading the body
	// and clears it once the body is in. A body still incomplete then gets
	// 408 and its connection is closed; it is never served. It overrides
	// http.Server.ReadTimeout for POST bodies. Zero: 30 s; negative: no
	// deadline. The headers' deadline is the http.Server's: set its
	// ReadHeaderTimeout (cmd/runtime: 10 s).
	BodyTimeout time.Duration
	// MaxRequestsPerNamespace bounds the POST requests of one namespace in
	// flight at once, counted from admission (token and session checked)
	// to the end of the handler; the next gets 429 + Retry-After. Each
	// request of a JSON-RPC batch counts as one (SPEC §5b.15). GET
	// streams (one per session, bounded by the session caps) and DELETEs
	// are not counted. Zero: 256.
	MaxRequestsPerNamespace int
	// RatePerNamespace is the sustained rate, in JSON-RPC messages a second,
	// of one namespace's POSTs: a token bucket per namespace of
	// BurstPerNamespace tokens, each message (each of a batch's) taking one
	// when its POST is admitted; one that finds none gets 429 with the
	// Retry-After of the bucket's refill, in both eras, counted refused
	// under "rate_per_namespace". The buckets are this endpoint's: on
	// several nodes each node keeps its own. GET streams and DELETEs take
	// none. Zero: no rate limit.
	RatePerNamespace float64
	// BurstPerNamespace is the bucket's size. Zero: RatePerNamespace
	// rounded up (at least 1).
	BurstPerNamespace int
	// MaxRequests bounds the POST requests in flight in all, counted the
	// same way; the next gets 503 + Retry-After. Zero: 4096.
	MaxRequests int
	// MaxBodyBytesInFlight bounds the bytes of POST bodies held at once,
	// from the start of their reading to the end of their request: a
	// declared Content-Length is reserved before reading, a body of unknown
	// length chunk by chunk as it grows. A body that does not fit gets 503
	// + Retry-After. Zero: 64 MiB; raised to MaxBodyBytes if lower.
	MaxBodyBytesInFlight int64
	// IdleTimeout ends an MCP session with nothing in flight for this long.
	// Zero: 30 min; negative: never.
	IdleTimeout time.Duration
	// MaxSessionsPerNamespace: the next initialize evicts the namespace's
	// least recently active idle session, or gets 429. Zero: 64.
	MaxSessionsPerNamespace int
	// MaxSessions: past it initialize gets 503. Zero: 100 000.
	MaxSessions int
	// KeepAlive is the interval of SSE keep-alive comments. Zero: 25 s.
	KeepAlive time.Duration
	// ReplayEvents bounds the SSE events an MCP session keeps for its
	// client to resume its streams (GET with Last-Event-ID; 2025-11-25
	// resumable streams): the events of streams not delivered to
	// completion, in all of the session's streams; past it the oldest goes
	// (the newest always stays). The notifications waiting for the
	// standalone stream (list changes, resource updates) wait there too.
	// Zero: 256.
	ReplayEvents int
	// ReplayBytes bounds the bytes of those events the same way. Zero:
	// 1 MiB.
	ReplayBytes int
	// MaxSubscriptions bounds the resources one MCP session may subscribe
	// (resources/subscribe); past it a subscribe is refused. Zero: 256.
	MaxSubscriptions int
	// AskTimeout bounds how long a request waits for its client's answers
	// to one round of the runtime's requests to it — a handler's
	// InputRequired asked over a 2025 session's stream (elicitation/create,
	// sampling/createMessage, roots/list): past it the unanswered ones are
	// cancelled (notifications/cancelled to the client) and the request
	// fails (a tools/call with an isError result). Zero: 60 s.
	AskTimeout time.Duration
	// MaxModernRequestsPerNamespace bounds the 2026-07-28 requests of one
	// namespace in flight at once (listen streams not counted), within
	// MaxRequestsPerNamespace: the era has no sessions, so no session cap
	// bounds it. The next gets 429 + Retry-After. Zero: 64.
	MaxModernRequestsPerNamespace int
	// MaxListenStreamsPerNamespace bounds the open subscriptions/listen
	// streams of one namespace; the next gets 429 + Retry-After. Zero: 8.
	MaxListenStreamsPerNamespace int
	// MaxListenStreams bounds the open listen streams in all; the next gets
	// 503 + Retry-After. Zero: 10 000.
	MaxListenStreams int
	// RequestStateTTL is how long the requestState of a 2026-07-28
	// input_required result stays good for its retry. Zero: 5 min.
	RequestStateTTL time.Duration
	// RetryAfter is the Retry-After of 429 and 503 answers. Zero: 1 s.
	RetryAfter time.Duration
	// ActorTimeout bounds each request to an MCP session actor. Zero: 5 s.
	ActorTimeout time.Duration
	// ServerName and ServerVersion go into the initialize result (and the
	// serverInfo of every 2026-07-28 result). Zero: "mcpruntime", "0.1.0".
	ServerName    string
	ServerVersion string
	// ListPageSize is the number of entries of one page of tools/list,
	// resources/list, resources/templates/list and prompts/list; the rest
	// follows with nextCursor. The Backend pages its lists, so it is the
	// Backend that reads it (the module root's does). Zero: 100.
	ListPageSize int
	// Logger receives the endpoint's logs. Nil: slog.Default(); the module
	// root's MCPHandler: the runtime's Config.Logger.
	Logger *slog.Logger
	// Observer is told about requests, authentication failures, MCP
	// sessions and the bounds' refusals, for metrics. Nil: nobody.
	Observer Observer
	// TracerProvider makes the endpoint's spans (SPEC §5b.26): one per
	// HTTP request, continuing the client's W3C traceparent, and one per
	// feature request (tools/call, resources/read, …) under it, or under
	// the trace context of the request's params._meta when it carries one;
	// a tool handler's ctx carries its span. Nil: no spans, no propagation.
	TracerProvider trace.TracerProvider
	// Propagator reads the client's trace context from the HTTP headers
	// and params._meta. Nil: W3C Trace Context and Baggage.
	Propagator propagation.TextMapPropagator
}

// Host is what the program hosting the endpoint wires into it itself, never
// an embedder's choice: the module root's MCPHandler fills it from the
// runtime's Config. The zero Host is one node with the real clock and no
// OAuth discovery.
type Host struct {
	// Now is the clock. Nil: time.Now.
	Now func() time.Time
	// ResourceMetadata is the URL of the endpoint's OAuth protected-resource
	// metadata (RFC 9728). Set, a 401 about a request without a token or
	// with one that is not provider-shaped carries it in WWW-Authenticate
	// (resource_metadata, and scope when ChallengeScope is set), so that an
	// MCP client finds where to sign in; a provider-shaped token's 401
	// never does (SPEC §5c). Zero: no OAuth discovery.
	ResourceMetadata string
	// ChallengeScope is the scope of that challenge. Zero: none.
	ChallengeScope string

	// Several nodes (node.go). Available reports whether the node may
	// serve (its credential replica is proven current). While it returns
	// false every MCP request, of both eras, gets 503 + Retry-After after
	// the Origin/Host check and before authentication, and a request
	// admitted before is refused so at dispatch. Flip it before calling
	// CloseStreamsUnavailable. Nil: always available.
	Available func() bool
	// Route names the node that serves an authenticated request of p,
	// described by req (its headers only): nil, nil to serve it here; the
	// home node's internal MCP URL to reverse-proxy the whole request
	// there, unread, as it came; an error when the home node is gone or
	// unknown (answered 404, the unknown session's answer, when the request
	// names a session, else 503 + Retry-After). It is called right after
	// authentication on the headers, before the session lookup and the
	// body, and never for a request that came in through ServeForwarded.
	// Nil: never forward.
	Route func(p principal.Principal, req RouteRequest) (*url.URL, error)
	// Forwarded is told, once a request Route sent to another node has had
	// its whole answer, whose it was: a read of p that follows may need
	// that node's write (read-your-writes, SPEC §5d.6). Nil: nobody.
	Forwarded func(p principal.Principal, req RouteRequest)
	// Revision is the revision of the shared log this node's store has
	// applied (several nodes): every answer the node begins carries it in
	// the Mcp-Runtime-Revision header, unless the node that served it set
	// its own (a forwarded answer). Nil: no such header.
	Revision func() int64
	// ForwardHeader is set on every request forwarded to a home node,
	// replacing any value the client sent: the node-to-node secret the
	// home's internal listener requires. Nil: none.
	ForwardHeader http.Header
	// ForwardTLS is the TLS configuration of forwarded requests to an
	// https:// home (mutual TLS between nodes: this node's client
	// certificate, the cluster's CA). Nil: Go's defaults.
	ForwardTLS *tls.Config
	// OnSession hears every MCP session's start and end, from the
	// session's actor: it must not block. Nil: nobody is told.
	OnSession func(SessionEvent)
}

// RouteRequest is what Host.Route knows of a request besides its
// principal: its headers' claims, which the node that serves it checks
// against the body.
type RouteRequest struct {
	// Method and Name are a 2026-07-28 request's Mcp-Method and Mcp-Name
	// headers ("tools/call" and the tool's name); both "" for a request of
	// a 2025 session (its session lives on its home) and for a GET or a
	// DELETE.
	Method, Name string
	// Revision is the request's Mcp-Runtime-Revision header: the least
	// revision of the shared log the node that serves it must have applied
	// (one the client was told by an earlier answer); 0 when absent or not
	// a positive number.
	Revision int64
}

// HeaderRevision carries, on an answer, the revision of the shared log
// the node that served it had applied when its answer began, and, on a
// request, the least revision the node that serves it must have applied
// (several nodes, SPEC §5d.6).
const HeaderRevision = "Mcp-Runtime-Revision"

// SessionEvent is an MCP session's start or end, for Host.OnSession.
type SessionEvent = session.Lifecycle

// settings are an endpoint's Options and Host, defaults filled in.
type settings struct {
	Options
	Host
}

func (o settings) withDefaults() settings {
	if o.Path == "" {
		o.Path = "/mcp"
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 4 << 20
	}
	if o.BodyTimeout == 0 {
		o.BodyTimeout = 30 * time.Second
	}
	if o.BodyTimeout < 0 {
		o.BodyTimeout = 0
	}
	if o.MaxRequestsPerNamespace <= 0 {
		o.MaxRequestsPerNamespace = 256
	}
	if o.MaxRequests <= 0 {
		o.MaxRequests = 4096
	}
	if o.MaxBodyBytesInFlight <= 0 {
		o.MaxBodyBytesInFlight = 64 << 20
	}
	o.MaxBodyBytesInFlight = max(o.MaxBodyBytesInFlight, o.MaxBodyBytes)
	if o.IdleTimeout == 0 {
		o.IdleTimeout = 30 * time.Minute
	}
	if o.IdleTimeout < 0 {
		o.IdleTimeout = 0
	}
	if o.MaxSessionsPerNamespace <= 0 {
		o.MaxSessionsPerNamespace = 64
	}
	if o.MaxSessions <= 0 {
		o.MaxSessions = 100_000
	}
	if o.KeepAlive <= 0 {
		o.KeepAlive = 25 * time.Second
	}
	if o.ReplayEvents <= 0 {
		o.ReplayEvents = 256
	}
	if o.ReplayBytes <= 0 {
		o.ReplayBytes = 1 << 20
	}
	if o.MaxSubscriptions <= 0 {
		o.MaxSubscriptions = 256
	}
	if o.AskTimeout <= 0 {
		o.AskTimeout = time.Minute
	}
	if o.MaxModernRequestsPerNamespace <= 0 {
		o.MaxModernRequestsPerNamespace = 64
	}
	if o.MaxListenStreamsPerNamespace <= 0 {
		o.MaxListenStreamsPerNamespace = 8
	}
	if o.MaxListenStreams <= 0 {
		o.MaxListenStreams = 10_000
	}
	if o.RequestStateTTL <= 0 {
		o.RequestStateTTL = 5 * time.Minute
	}
	if o.RetryAfter <= 0 {
		o.RetryAfter = time.Second
	}
	if o.ActorTimeout <= 0 {
		o.ActorTimeout = 5 * time.Second
	}
	if o.ServerName == "" {
		o.ServerName = "mcpruntime"
	}
	if o.ServerVersion == "" {
		o.ServerVersion = "0.1.0"
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TracerProvider != nil && o.Propagator == nil {
		o.Propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	}
	if o.Observer == nil {
		o.Observer = nopObserver{}
	}
	return o
}

// Server is the MCP Streamable HTTP endpoint. It is an http.Handler.
type Server struct {
	opts    settings
	backend Backend
	store   *memdb.Store
	root    *actor.RootContext
	router  *httprouter.Router
	// sessions is the endpoint's MCP sessions (actors/session owns them).
	sessions *session.Table
	// originHost is the DNS-rebinding guard built from opts.
	originHost httpguard.Guard
	// challenge is the OAuth discovery a 401 adds to WWW-Authenticate
	// (Host.ResourceMetadata); "" for none.
	challenge string
	limits    limits
	rates     *ratelimit.Buckets // Options.RatePerNamespace
	tracer    trace.Tracer       // Options.TracerProvider's; nil: no spans
	live      *liveness.Monitor  // session owners and stream credentials
	// credGen counts committed writes that changed credentials; the store's
	// commit hook adds one before the write returns. Unchanged since a
	// request was authenticated, no credential was revoked or removed in
	// between, and the dispatch check needs no store read.
	credGen   atomic.Uint64
	unhookGen func()
	closing   sync.Once
	closed    atomic.Bool // Close has begun
	// sessionProps spawns every session actor of the endpoint, on workers.
	sessionProps *actor.Props
	workers      *session.Workers
	sweepMu      sync.Mutex  // guards the two fields below
	sweepTimer   *time.Timer // next idle sweep; nil without idle eviction
	sweepStopped bool        // Close was called
	// The 2026-07-28 era's state: none of it is a session.
	modernCounts modernCounts
	flights      *flights // the calls in flight, by credential
	serverInfo   []byte   // _meta.serverInfo of every modern result, encoded once
	// initResults are the initialize results of the backend's capabilities,
	// encoded once per value it returns (initializeResult).
	initResults atomic.Pointer[initResults]
	listeners   listeners
	sealer      *sealer
	// proxy forwards requests to their home node (Host.Route); nil
	// without a Route.
	proxy *forwarder
}

// New returns the endpoint. Sessions are actors of system; their records
// live in store.
func New(b Backend, store *memdb.Store, system *actor.ActorSystem, opts Options, host Host) *Server {
	s := &Server{opts: settings{Options: opts, Host: host}.withDefaults(), backend: b, store: store, root: system.Root}
	if s.opts.ResourceMetadata != "" {
		s.challenge = `resource_metadata="` + s.opts.ResourceMetadata + `"`
		if s.opts.ChallengeScope != "" {
			s.challenge += `, scope="` + s.opts.ChallengeScope + `"`
		}
	}
	s.originHost = httpguard.Guard{
		AllowedHosts: s.opts.AllowedHosts, AllowedOrigins: s.opts.AllowedOrigins,
		AllowAnyOrigin: s.opts.AllowAnyOrigin, DisableHostCheck: s.opts.DisableHostCheck,
	}
	s.live = liveness.New(store, s.opts.Now)
	s.flights = newFlights(s.opts.Now)
	s.serverInfo, _ = json.Marshal(serverInfo{Name: s.opts.ServerName, Version: s.opts.ServerVersion})
	s.unhookGen = store.OnCredentialsChanged(s.credentialsChanged)
	s.sessions = session.NewTable(s.opts.MaxSessions, s.opts.MaxSessionsPerNamespace,
		session.StreamLimits{Events: s.opts.ReplayEvents, Bytes: s.opts.ReplayBytes})
	// Four workers per CPU that runs goroutines: a session's turns are
	// short, a burst of them on one CPU waits for that CPU anyway, and a
	// turn with no idle worker gets a goroutine of its own.
	s.workers = session.NewWorkers(4*runtime.GOMAXPROCS(0), sessionThroughput)
	s.sessionProps = session.NewProps(&session.Config{
		Store:       store,
		Table:       s.sessions,
		Now:         s.opts.Now,
		IdleTimeout: max(s.opts.IdleTimeout, 0),
		WatchOwner:  s.live.WatchNamespace,
		OnEnd:       s.opts.Observer.SessionClosed,
		OnEvent:     s.opts.OnSession,
		Logger:      s.opts.Logger,
		Dispatcher:  s.workers,
	})
	s.limits.init(s.opts.MaxRequestsPerNamespace, s.opts.MaxRequests, s.opts.MaxBodyBytesInFlight)
	s.rates = ratelimit.New(s.opts.RatePerNamespace, s.opts.BurstPerNamespace)
	if s.opts.TracerProvider != nil {
		s.tracer = s.opts.TracerProvider.Tracer(tracerName)
	}
	s.sealer = newSealer(s.opts.RequestStateTTL)
	if s.opts.Route != nil {
		s.proxy = newForwarder(s.opts.ActorTimeout, s.opts.Logger, s.opts.ForwardTLS)
	}
	s.armSweep() // after the session table is made: the sweep reads it
	r := httprouter.New()
	r.HandleMethodNotAllowed = true
	r.RedirectTrailingSlash = false
	r.RedirectFixedPath = false
	r.HandleOPTIONS = false
	r.POST(s.opts.Path, s.handlePost)
	r.GET(s.opts.Path, s.handleGet)
	r.DELETE(s.opts.Path, s.handleDelete)
	// Every answer is JSON, unknown paths too: clients that probe OAuth
	// discovery paths on a 401 parse the body.
	r.NotFound = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.failFor(w, failPath, nil, "not found: the MCP endpoint is "+s.opts.Path)
	})
	r.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		s.fail(w, failMethod)
	})
	r.PanicHandler = func(w http.ResponseWriter, req *http.Request, v any) {
		if v == http.ErrAbortHandler {
			panic(v) // a forwarded answer cut short: net/http aborts the response
		}
		s.opts.Logger.Error("panic serving MCP request", "method", req.Method, "panic", v)
		s.fail(w, failPanic)
	}
	s.router = r
	return s
}

// ServeHTTP serves the endpoint.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w, bodyUnread: r.ContentLength != 0, revision: s.opts.Revision}
	if s.tracer != nil {
		var end func()
		r, end = s.traceHTTP(r, sw)
		defer end()
	}
	// Deferred: a forwarded answer cut short aborts the handler with
	// http.ErrAbortHandler (ReverseProxy), and it is counted too.
	defer func() { s.opts.Observer.Request(eraLabel(r), methodLabel(r.Method), sw.answered(), time.Since(start)) }()
	s.router.ServeHTTP(sw, r)
}

// Close ends every session (their streams close, their calls are
// cancelled) and waits for their actors to stop. New initializes fail.
// Every request being forwarded ends (and none is forwarded any more), and
// the forwarding transports' idle connections close.
func (s *Server) Close() {
	s.closing.Do(func() {
		s.listeners.closeAll()
		s.closed.Store(true) // before cancelAll: a call registered after it sees closed
		s.flights.cancelAll(errClosing)
		s.flights.stop()
		for _, e := range s.sessions.CloseAll() {
			s.endSession(e.PID())
		}
		s.live.Close()
		s.workers.Close() // after the sessions stopped: later turns get goroutines of their own
		s.unhookGen()
		if s.proxy != nil {
			s.proxy.close()
		}
		s.sweepMu.Lock()
		s.sweepStopped = true
		if s.sweepTimer != nil {
			s.sweepTimer.Stop()
		}
		s.sweepMu.Unlock()
	})
}

// sessionThroughput is how many messages a session's mailbox takes per
// turn: protoactor's default dispatcher's.
const sessionThroughput = 300

// endSession ends a session for the endpoint's shutdown and waits until its
// actor stopped. The Delete is answered once the session ended, or not
// within ActorTimeout: either way the actor is stopped next.
func (s *Server) endSession(pid *actor.PID) {
	_ = s.root.RequestFuture(pid, &session.Delete{Reason: session.ReasonShutdown}, s.opts.ActorTimeout).Wait()
	_ = s.root.StopFuture(pid).Wait()
}

// Closed reports whether Close has run: the sessions ended, the liveness
// monitor and the idle sweep stopped. For testing.
func (s *Server) Closed() bool {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	return s.sweepStopped
}

// sweepEvery is how often the idle sweep runs: a quarter of the idle
// timeout, so a session ends at most that late, between 5 ms and a minute.
func (s *Server) sweepEvery() time.Duration {
	return min(max(s.opts.IdleTimeout/4, 5*time.Millisecond), time.Minute)
}

// armSweep schedules the next idle sweep, unless idle eviction is off or
// the endpoint closed.
func (s *Server) armSweep() {
	if s.opts.IdleTimeout <= 0 {
		return
	}
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	if s.sweepStopped {
		return
	}
	s.sweepTimer = time.AfterFunc(s.sweepEvery(), s.sweep)
}

// sweep sends IdleCheck to every session that looks idle. One timer for
// the endpoint instead of one per session; the actor makes the decision.
func (s *Server) sweep() {
	now := s.opts.Now()
	for _, e := range s.sessions.Idle(now, s.opts.IdleTimeout) {
		s.root.Send(e.PID(), &session.IdleCheck{})
	}
	s.armSweep()
}

// CloseStreams starts a graceful shutdown: new sessions are refused (503)
// and every standalone stream ends — a GET forwarded to its home node too
// — while calls in flight go on, so that http.Server.Shutdown can wait for
// them. Close ends the sessions, and every forwarded request, after.
func (s *Server) CloseStreams() {
	if s.proxy != nil {
		s.proxy.cancel(true) // the GET streams forwarded to their home node
	}
	s.listeners.closeAll() // each answers its listen request, then ends
	for _, e := range s.sessions.CloseAll() {
		s.root.Send(e.PID(), &session.CloseStream{})
	}
}

// Sessions returns the number of live sessions.
func (s *Server) Sessions() int { return s.sessions.Count() }

// ModernCallsInFlight returns the number of 2026-07-28 requests being
// answered (listen streams not included: ListenStreams counts those).
func (s *Server) ModernCallsInFlight() int { return s.flights.count() }

// SessionInfos lists the live sessions, ordered by id.
func (s *Server) SessionInfos() []session.Summary { return s.sessions.Summaries() }

// guard is SPEC §5 step 1: Origin and Host, by the guard the admin
// listener shares.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	if s.originHost.Check(r) != nil {
		s.fail(w, failForbidden)
		return false
	}
	return true
}

// authenticate is SPEC §5 step 2. The token comes from the Authorization
// header only; a token in the query string is never read.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) (caller, bool) {
	h := r.Header.Get("Authorization")
	if h == "" {
		s.opts.Observer.AuthFailure("missing")
		s.failAuth(w, failNoToken, false)
		return caller{}, false
	}
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		s.opts.Observer.AuthFailure("malformed_header")
		s.failAuth(w, failBadToken, false)
		return caller{}, false
	}
	gen := s.credGen.Load() // before the read: a revocation after it moves it
	p, err := s.backend.Authenticate(strings.TrimSpace(tok))
	if err != nil {
		reason := "invalid"
		var ar AuthReasoner
		if errors.As(err, &ar) {
			reason = ar.AuthReason()
		}
		s.opts.Observer.AuthFailure(reason)
		s.failAuth(w, failBadToken, token.Provider(strings.TrimSpace(tok)))
		return caller{}, false
	}
	return caller{Principal: p, credGen: gen}, true
}

// recheck is SPEC §5 step 0: what admit checked on the headers, checked
// again at dispatch, once the body is in. A node that stopped serving
// since gets 503, a token revoked, removed or expired since 401, a session
// that ended since 404, exactly as if the request had arrived now; nothing
// is dispatched. On false the answer
// is written.
func (s *Server) recheck(w http.ResponseWriter, p caller, e *session.Entry) bool {
	if !s.available() {
		s.fail(w, failUnavailable) // first: a fenced node's replica cannot tell
		return false
	}
	if reason := s.deadSince(p); reason != "" {
		s.opts.Observer.AuthFailure(reason)
		s.failAuth(w, failBadToken, p.Provider())
		return false
	}
	if e != nil && !s.sessions.Live(e) {
		s.fail(w, failUnknownSession)
		return false
	}
	return true
}

// credentialsChanged is the store's commit hook: credGen moves first, then
// the 2026-07-28 calls in flight on a credential that died are cancelled
// (the order flights relies on).
func (s *Server) credentialsChanged(rows []*memdb.Credential) {
	s.credGen.Add(1)
	s.flights.changed(rows, func(id string) bool {
		live, _ := credential.Live(s.store.Read(), id, s.opts.Now())
		return !live
	})
}

// deadSince returns why p's credential no longer authenticates ("unknown":
// removed, "revoked", "expired"), or "" while it does. The token is not
// hashed again: when no credential changed since p was authenticated and
// its expiry has not come, nothing can have killed it; otherwise the
// ledger judges its row, read by id (credential.Dead, one lock-free store
// read).
func (s *Server) deadSince(p caller) string {
	now := s.opts.Now()
	if s.credGen.Load() == p.credGen && (p.Expires.IsZero() || now.Before(p.Expires)) {
		return ""
	}
	return credential.Dead(s.store.Read(), p.CredentialID, now)
}

// accepts reports whether the Accept header admits every media type in
// want (exact or */*, type/*).
func accepts(r *http.Request, want ...string) bool {
	have := r.Header.Values("Accept")
	for _, w := range want {
		if !acceptsType(have, w) {
			return false
		}
	}
	return true
}

// acceptsType reports whether the Accept values have take media type want
// ("type/subtype"): named, or as type/* or */*, case-insensitively,
// parameters aside. It allocates nothing.
func acceptsType(have []string, want string) bool {
	typ, _, _ := strings.Cut(want, "/")
	for _, v := range have {
		for v != "" {
			var part string
			part, v, _ = strings.Cut(v, ",")
			mt, _, _ := strings.Cut(part, ";")
			mt = strings.TrimSpace(mt)
			if strings.EqualFold(mt, want) || mt == "*/*" ||
				len(mt) == len(typ)+2 && strings.EqualFold(mt[:len(typ)], typ) && mt[len(typ):] == "/*" {
				return true
			}
		}
	}
	return false
}

func isJSONContentType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), "application/json")
}

// ask sends msg to a session actor and waits for its answer.
func (s *Server) ask(pid *actor.PID, msg any) (any, error) {
	return s.root.RequestFuture(pid, msg, s.opts.ActorTimeout).Result()
}

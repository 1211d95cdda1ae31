package mcpruntime

import (
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/transport"
)

// MCPOptions configure the MCP endpoint (SPEC §5). Zero values mean the
// defaults given on each field. The runtime's clock is used.
type MCPOptions struct {
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
	// headers were admitted; a body still incomplete then gets 408 and its
	// connection is closed, never served. It overrides
	// http.Server.ReadTimeout for POST bodies. Zero: 30 s; negative: no
	// deadline. The headers' deadline is the http.Server's: set its
	// ReadHeaderTimeout (cmd/runtime: 10 s).
	BodyTimeout time.Duration
	// MaxRequestsPerNamespace bounds the POST requests of one namespace in
	// flight at once, from admission to the answer; the next gets 429 +
	// Retry-After. GET streams and DELETEs are not counted. Zero: 256.
	MaxRequestsPerNamespace int
	// MaxRequests bounds the POST requests in flight in all; the next gets
	// 503 + Retry-After. Zero: 4096.
	MaxRequests int
	// MaxBodyBytesInFlight bounds the bytes of POST bodies held at once (a
	// declared Content-Length reserved before reading, a chunked body as it
	// grows); a body that does not fit gets 503 + Retry-After. Zero: 64 MiB;
	// raised to MaxBodyBytes if lower.
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
	// AskTimeout bounds how long a request waits for the client's answers
	// to one round of the runtime's requests to it — a handler's
	// InputRequired asked over a 2025 session's stream (elicitation/create,
	// sampling/createMessage, roots/list): past it the unanswered ones are
	// cancelled (notifications/cancelled to the client) and the request
	// fails (a tools/call with an isError result). Zero: 60 s.
	AskTimeout time.Duration
	// RetryAfter is the Retry-After of 429 and 503 answers. Zero: 1 s.
	RetryAfter time.Duration
	// ActorTimeout bounds each request to an MCP session actor. Zero: 5 s.
	ActorTimeout time.Duration
	// ServerName and ServerVersion go into the initialize result. Zero:
	// "mcpruntime", "0.1.0".
	ServerName    string
	ServerVersion string
	// Logger. Nil: the runtime's.
	Logger *slog.Logger
	// Observer is told about requests, authentication failures, MCP
	// sessions and the bounds' refusals, for metrics. Nil: nobody.
	Observer Observer
	// ListPageSize is the number of entries of one page of tools/list,
	// resources/list, resources/templates/list and prompts/list; the rest
	// follows with nextCursor. Zero: DefaultListPageSize (100).
	ListPageSize int
	// ReplayEvents bounds the SSE events one MCP session keeps so that its
	// client can resume a stream it lost (GET with Last-Event-ID; 2025-11-25
	// resumable streams), and the notifications waiting for its standalone
	// stream (list changes, resource updates): past it the oldest goes.
	// Zero: 256.
	ReplayEvents int
	// ReplayBytes bounds the bytes of those events the same way. Zero: 1 MiB.
	ReplayBytes int
	// MaxSubscriptions bounds the resources one MCP session may subscribe
	// (resources/subscribe); past it a subscribe is refused. Zero: 256.
	MaxSubscriptions int
	// MaxModernRequestsPerNamespace bounds the 2026-07-28 requests of one
	// namespace in flight at once (listen streams not counted): the era has
	// no sessions for the session caps to bound. The next gets 429 +
	// Retry-After. Zero: 64.
	MaxModernRequestsPerNamespace int
	// MaxListenStreamsPerNamespace bounds the open subscriptions/listen
	// streams of one namespace (429 + Retry-After past it). Zero: 8.
	MaxListenStreamsPerNamespace int
	// MaxListenStreams bounds the open listen streams in all (503 +
	// Retry-After past it). Zero: 10 000.
	MaxListenStreams int
	// RequestStateTTL is how long the requestState of a 2026-07-28
	// input_required result stays good for its retry. Zero: 5 min.
	RequestStateTTL time.Duration
}

// Observer receives the MCP endpoint's events (the metrics package
// implements it). Methods are called from request goroutines and MCP
// session actors: they must be quick and safe for concurrent use.
type Observer interface {
	// Request is called once per request with its protocol era ("modern":
	// its MCP-Protocol-Version header is 2026-07-28; "session" otherwise),
	// the HTTP method ("GET", "POST", "DELETE", or "other" for any other),
	// the status answered and how long it took (for a stream: until it
	// ended).
	Request(era, method string, status int, d time.Duration)
	// AuthFailure is called for every 401, with a reason: "missing",
	// "malformed_header", or an AuthError's Reason ("invalid" for other
	// errors).
	AuthFailure(reason string)
	// SessionOpened and SessionClosed bracket every MCP session; the close
	// reason is "delete", "idle", "cap", "revoke" or "shutdown".
	SessionOpened()
	SessionClosed(reason string)
	// Refused is called for every request a bound refused (429 or 503),
	// naming the bound: "requests_per_namespace", "requests", "body_bytes",
	// "sessions_per_namespace", "sessions", "modern_requests_per_namespace",
	// "listen_per_namespace", "listen", or "unavailable" (a node of several
	// that does not serve, SPEC §5d.2).
	Refused(bound string)
	// Forward is called once for every MCP request sent on to its home node
	// (several nodes), with its outcome: "proxied" (the home node
	// answered), "home_gone" (the home node is gone or unknown),
	// "proxy_error" (it could not be reached, or failed before answering).
	Forward(outcome string)
}

// MCPSessionInfo describes one live MCP session, for operators. It carries
// no token and no credential secret.
type MCPSessionInfo struct {
	ID         string    `json:"id"`
	Owner      string    `json:"owner"` // namespace
	Created    time.Time `json:"created,omitzero"`
	LastActive time.Time `json:"lastActive,omitzero"`
	Busy       bool      `json:"busy"` // a call in flight or a stream open
}

// MCPEndpoint is the MCP Streamable HTTP endpoint of a runtime, an
// http.Handler. Create it with Runtime.MCPHandler.
type MCPEndpoint struct {
	srv *transport.Server
	// oauth serves the OAuth routes (/.well-known/…, /oauth/…) when
	// Config.OAuth serves this endpoint's path; nil otherwise.
	oauth http.Handler
}

// ServeHTTP serves the endpoint and, when Config.OAuth serves its path,
// the OAuth routes beside it: every path under /.well-known/ and /oauth/
// (SPEC §5c). Mounted at "/", it is the whole MCP listener.
func (e *MCPEndpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.oauth != nil && (strings.HasPrefix(r.URL.Path, "/.well-known/") || strings.HasPrefix(r.URL.Path, "/oauth/")) {
		e.oauth.ServeHTTP(w, r)
		return
	}
	e.srv.ServeHTTP(w, r)
}

// Close ends every MCP session (their streams close, their calls are
// cancelled) and waits for their actors to stop; initialize is refused
// from then on. The runtime's Close calls it too.
func (e *MCPEndpoint) Close() { e.srv.Close() }

// CloseStreams starts a graceful shutdown: new MCP sessions are refused
// (503) and every standalone stream ends, while calls in flight go on, so
// that http.Server.Shutdown can wait for them. Close ends the sessions
// after.
func (e *MCPEndpoint) CloseStreams() { e.srv.CloseStreams() }

// Sessions returns the number of live MCP sessions.
func (e *MCPEndpoint) Sessions() int { return e.srv.Sessions() }

// ListenStreams returns the number of open 2026-07-28 listen streams
// (subscriptions/listen).
func (e *MCPEndpoint) ListenStreams() int { return e.srv.ListenStreams() }

// ModernCallsInFlight returns the number of 2026-07-28 requests being
// answered (listen streams not included).
func (e *MCPEndpoint) ModernCallsInFlight() int { return e.srv.ModernCallsInFlight() }

// SessionInfos lists the live MCP sessions, ordered by id.
func (e *MCPEndpoint) SessionInfos() []MCPSessionInfo {
	infos := e.srv.SessionInfos()
	out := make([]MCPSessionInfo, len(infos))
	for i, s := range infos {
		out[i] = MCPSessionInfo{ID: s.ID, Owner: s.Owner, Created: s.Created, LastActive: s.LastActive, Busy: s.Busy}
	}
	return out
}

// MCPHandler returns the MCP Streamable HTTP endpoint (SPEC §5) serving the
// runtime's tools, to mount on an http.Server. When Config.OAuth serves
// its path, its 401s lead clients to the OAuth metadata, it accepts the
// tokens bound to its resource, and it serves the OAuth routes (SPEC §5c):
// mount it at "/" (or route /.well-known/ and /oauth/ to it, or to
// Runtime.OAuthHandler). Close ends its sessions. The
// runtime's Close closes it too. The endpoint bounds how long a POST body
// may take (MCPOptions.BodyTimeout); how long headers may take is the
// http.Server's: set its ReadHeaderTimeout (cmd/runtime: 10 s).
func (r *Runtime) MCPHandler(opts MCPOptions) (*MCPEndpoint, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	if opts.Logger == nil {
		opts.Logger = r.cfg.Logger
	}
	o := transport.Options{
		Path:                          opts.Path,
		AllowedOrigins:                opts.AllowedOrigins,
		AllowAnyOrigin:                opts.AllowAnyOrigin,
		AllowedHosts:                  opts.AllowedHosts,
		DisableHostCheck:              opts.DisableHostCheck,
		MaxBodyBytes:                  opts.MaxBodyBytes,
		BodyTimeout:                   opts.BodyTimeout,
		MaxRequestsPerNamespace:       opts.MaxRequestsPerNamespace,
		MaxRequests:                   opts.MaxRequests,
		MaxBodyBytesInFlight:          opts.MaxBodyBytesInFlight,
		IdleTimeout:                   opts.IdleTimeout,
		MaxSessionsPerNamespace:       opts.MaxSessionsPerNamespace,
		MaxSessions:                   opts.MaxSessions,
		KeepAlive:                     opts.KeepAlive,
		ReplayEvents:                  opts.ReplayEvents,
		ReplayBytes:                   opts.ReplayBytes,
		MaxSubscriptions:              opts.MaxSubscriptions,
		MaxModernRequestsPerNamespace: opts.MaxModernRequestsPerNamespace,
		MaxListenStreamsPerNamespace:  opts.MaxListenStreamsPerNamespace,
		MaxListenStreams:              opts.MaxListenStreams,
		RequestStateTTL:               opts.RequestStateTTL,
		AskTimeout:                    opts.AskTimeout,
		RetryAfter:                    opts.RetryAfter,
		ActorTimeout:                  opts.ActorTimeout,
		ServerName:                    opts.ServerName,
		ServerVersion:                 opts.ServerVersion,
		Now:                           r.cfg.Now,
		Logger:                        opts.Logger,
	}
	if r.cluster != nil {
		path := o.Path
		if path == "" {
			path = "/mcp"
		}
		o.Available = r.serving
		o.Route = func(p Principal) (*url.URL, error) {
			home, err := r.route(p)
			if home == nil || err != nil {
				return home, err
			}
			u := *home
			u.Path, u.RawPath = path, "" // the home's internal listener serves the same path
			return &u, nil
		}
		o.ForwardHeader = http.Header{membership.NodeAuthHeader: {r.cluster.Secret()}}
	}
	if opts.Observer != nil {
		o.Observer = opts.Observer
	}
	var resource string
	o.ResourceMetadata, o.ChallengeScope, resource = r.challenge(opts.Path)
	b := newBackend(r, opts)
	b.resource = resource
	ep := &MCPEndpoint{srv: transport.New(b, r.store, r.system, o)}
	if resource != "" {
		ep.oauth = r.OAuthHandler()
	}
	if testHookEndpointBuilt != nil {
		testHookEndpointBuilt(ep)
	}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		// Close ran since checkOpen and did not see ep: close it here, or
		// its liveness monitor and idle sweep outlive the runtime.
		ep.Close()
		return nil, ErrClosed
	}
	r.servers = append(r.servers, ep)
	r.mu.Unlock()
	return ep, nil
}

// testHookEndpointBuilt, when set, runs in MCPHandler once the endpoint is
// built and before it is registered, where a Close may come in between.
// For testing.
var testHookEndpointBuilt func(*MCPEndpoint)

// mcpSessions is the number of live MCP sessions of the runtime's
// endpoints: their Tables' counts, the one count of them.
func (r *Runtime) mcpSessions() int {
	r.mu.Lock()
	eps := r.servers
	r.mu.Unlock()
	n := 0
	for _, ep := range eps {
		n += ep.Sessions()
	}
	return n
}

// modernCounts sums the endpoints' listen streams and 2026-07-28 calls in
// flight.
func (r *Runtime) modernCounts() (listens, calls int) {
	r.mu.Lock()
	eps := r.servers
	r.mu.Unlock()
	for _, ep := range eps {
		listens += ep.ListenStreams()
		calls += ep.ModernCallsInFlight()
	}
	return listens, calls
}

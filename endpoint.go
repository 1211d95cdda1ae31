package mcpruntime

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/agenthost/mcpruntime/actors/session"
	"github.com/agenthost/mcpruntime/internal/membership"
	"github.com/agenthost/mcpruntime/transport"
)

// MCPOptions configure the MCP endpoint (SPEC §5): transport.Options, the
// one declaration of the endpoint's knobs, where each field is documented
// (go doc transport.Options). Zero values mean the defaults given there;
// Logger nil means the runtime's Config.Logger. The clock, the node's
// routing and the OAuth challenge come from the runtime's Config, never
// from here.
type MCPOptions = transport.Options

// Observer receives the MCP endpoint's events, for metrics (the metrics
// package implements it): transport.Observer, where each method and its
// concurrency rule are documented (go doc transport.Observer).
type Observer = transport.Observer

// MCPSessionInfo describes one live MCP session, for operators: its ID,
// its Owner namespace, when it was Created and LastActive, and whether it
// is Busy (a call in flight or a stream open). It carries no token and no
// credential secret. It is actors/session's Summary, built once by the
// endpoint's session table; JSON names: id, owner, created, lastActive,
// busy.
type MCPSessionInfo = session.Summary

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
func (e *MCPEndpoint) SessionInfos() []MCPSessionInfo { return e.srv.SessionInfos() }

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
	host := transport.Host{Now: r.cfg.Now, OnSession: r.mcpSessionEvent}
	if r.cluster != nil {
		path := opts.Path
		if path == "" {
			path = "/mcp"
		}
		host.Available = r.serving
		host.Route = func(p Principal, req transport.RouteRequest) (*url.URL, error) {
			home, here, err := r.route(p, req)
			if here && opts.Observer != nil {
				opts.Observer.Forward("read_here")
			}
			if home == nil || err != nil {
				return home, err
			}
			u := *home
			u.Path, u.RawPath = path, "" // the home's internal listener serves the same path
			return &u, nil
		}
		host.Forwarded = r.forwarded
		host.Revision = func() int64 { return r.cluster.Status().Applied }
		host.ForwardHeader = http.Header{membership.NodeAuthHeader: {r.cluster.Secret()}}
		host.ForwardTLS = r.cluster.ClientTLS()
	}
	var resource string
	host.ResourceMetadata, host.ChallengeScope, resource = r.challenge(opts.Path)
	b := newBackend(r, opts)
	b.resource = resource
	ep := &MCPEndpoint{srv: transport.New(b, r.store, r.system, opts, host)}
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

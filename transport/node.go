package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"
)

// One node of several (docs/cluster.md): the endpoint sends each
// authenticated request to its principal's home node (Host.Route),
// which serves it through ServeForwarded and repeats every check itself.
// Whether the node serves at all (Host.Available) is the gate every
// request passes first (front, handlers.go).

// forwardedKey marks the context of a request that came in through
// ServeForwarded: it is never routed again.
type forwardedKey struct{}

// ServeForwarded serves a request another node forwarded here, its home
// node: ServeHTTP, but Route is not asked (every other check is made
// again). Mount it on the node-to-node listener only: the mark is in the
// request's context, not in anything a client sends.
func (s *Server) ServeForwarded(w http.ResponseWriter, r *http.Request) {
	s.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), forwardedKey{}, true)))
}

// forward sends r to its principal's home node, unless Route says it is
// this one or r came from another node; false: serve it here.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, p caller) bool {
	if s.proxy == nil || r.Context().Value(forwardedKey{}) != nil {
		return false
	}
	req := routeRequest(r)
	home, err := s.opts.Route(p.Principal, req)
	switch {
	case err != nil:
		s.opts.Observer.Forward("home_gone")
		s.homeGone(w, r)
		return true
	case home == nil:
		return false
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	fc := &forwardCall{get: r.Method == http.MethodGet, cancel: cancel}
	if !s.proxy.begin(fc) {
		s.opts.Observer.Forward("proxy_error")
		s.fail(w, failUnavailable) // the endpoint closed
		return true
	}
	defer s.proxy.end(fc)
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The home node's endpoint exactly (its path, not joined to the
			// client's); the client's Host — already so, as SetURL would not
			// keep it — and every end-to-end header as sent: Authorization,
			// Mcp-Session-Id, MCP-Protocol-Version, Origin, Last-Event-ID.
			// X-Forwarded-* are the proxy's own, never the client's.
			out := pr.Out.URL
			out.Scheme, out.Host, out.Path, out.RawPath = home.Scheme, home.Host, home.Path, home.RawPath
			pr.Out.Host = pr.In.Host
			pr.SetXForwarded()
			for k, v := range s.opts.ForwardHeader {
				pr.Out.Header[k] = v
			}
		},
		Transport:     s.proxy.transport(r.Method),
		ErrorLog:      s.proxy.log,
		FlushInterval: -1, // SSE: every write goes out at once
		ModifyResponse: func(res *http.Response) error {
			s.opts.Observer.Forward("proxied")
			if !res.Close {
				bodyRead(w) // the home node read the body: the client's connection may stay
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			s.opts.Observer.Forward("proxy_error")
			if errors.Is(context.Cause(r.Context()), errClosing) {
				s.fail(w, failUnavailable) // this node closes, not the home node
				return
			}
			// A transport's error names the connection, never the URL (an
			// http.Client's url.Error would): the client's query string is
			// not logged.
			s.opts.Logger.Warn("forward to the home node failed", "home", home.Host, "err", err)
			s.homeGone(w, r)
		},
	}
	rp.ServeHTTP(w, r.WithContext(ctx))
	if s.opts.Forwarded != nil {
		s.opts.Forwarded(p.Principal, req)
	}
	return true
}

// routeRequest is what Route is told of r: a 2026-07-28 request's method
// and name headers, and the revision it asks for.
func routeRequest(r *http.Request) RouteRequest {
	var req RouteRequest
	if r.Method == http.MethodPost && modernHeader(r) {
		req.Method = strings.TrimSpace(r.Header.Get(headerMethod))
		req.Name = strings.TrimSpace(r.Header.Get(headerName))
	}
	if v := r.Header.Get(HeaderRevision); v != "" {
		if rev, err := strconv.ParseInt(v, 10, 64); err == nil && rev > 0 {
			req.Revision = rev
		}
	}
	return req
}

// homeGone answers a request whose home node is gone: the unknown
// session's 404 (the same bytes) when it names a session, so that the
// client initializes again (MCP 2025: a new session on 404), else 503 +
// Retry-After.
func (s *Server) homeGone(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get(headerSession) != "" {
		s.fail(w, failUnknownSession)
		return
	}
	s.fail(w, failHomeGone)
}

// Forwarding's connection bounds. A call's answer may take as long as the
// call (a 2025 POST answers its headers with its result), so POSTs have no
// response-header timeout; a GET's stream answers its headers at once and
// a DELETE within ActorTimeout, so theirs is bounded.
const (
	forwardDialTimeout    = 3 * time.Second
	forwardIdlePerHost    = 64
	forwardIdleTimeout    = 90 * time.Second
	forwardHeaderTimeoutN = 2 // times ActorTimeout, at least forwardHeaderMin
	forwardHeaderMin      = 10 * time.Second
)

// forwarder owns the transports of forwarded requests and knows the ones
// in flight, so that the endpoint's CloseStreams ends the GET streams it
// forwards and its Close all of them: an http.Server's Shutdown does not
// wait on them.
type forwarder struct {
	calls  *http.Transport // POST: no response-header timeout
	prompt *http.Transport // GET, DELETE: headers within a bound
	log    *log.Logger     // ReverseProxy's own messages (a body copy that failed), into the endpoint's Logger

	mu       sync.Mutex // guards the fields below
	inFlight map[*forwardCall]struct{}
	closed   bool // close ran: nothing is forwarded any more
}

// forwardCall is one request being forwarded.
type forwardCall struct {
	get    bool // a GET: a stream, ended by CloseStreams
	cancel context.CancelCauseFunc
}

// begin registers fc; false: the endpoint closed.
func (f *forwarder) begin(fc *forwardCall) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return false
	}
	if f.inFlight == nil {
		f.inFlight = map[*forwardCall]struct{}{}
	}
	f.inFlight[fc] = struct{}{}
	return true
}

func (f *forwarder) end(fc *forwardCall) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.inFlight, fc)
}

// cancel cancels the forwarded GETs, or every forwarded request, with
// errClosing.
func (f *forwarder) cancel(getsOnly bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for fc := range f.inFlight {
		if fc.get || !getsOnly {
			fc.cancel(errClosing)
		}
	}
}

// count is how many requests are being forwarded.
func (f *forwarder) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.inFlight)
}

// newForwarder makes the forwarder; tlsConfig is its TLS to an https://
// home (nil: Go's defaults).
func newForwarder(actorTimeout time.Duration, logger *slog.Logger, tlsConfig *tls.Config) *forwarder {
	mk := func(headerTimeout time.Duration) *http.Transport {
		return &http.Transport{
			Proxy:                 nil, // node to node: never an environment proxy
			TLSClientConfig:       tlsConfig,
			DialContext:           (&net.Dialer{Timeout: forwardDialTimeout, KeepAlive: 30 * time.Second}).DialContext,
			MaxIdleConnsPerHost:   forwardIdlePerHost,
			IdleConnTimeout:       forwardIdleTimeout,
			ResponseHeaderTimeout: headerTimeout,
			ExpectContinueTimeout: time.Second,
		}
	}
	return &forwarder{
		log:    slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		calls:  mk(0),
		prompt: mk(max(forwardHeaderTimeoutN*actorTimeout, forwardHeaderMin)),
	}
}

func (f *forwarder) transport(method string) http.RoundTripper {
	if method == http.MethodPost {
		return f.calls
	}
	return f.prompt
}

// close ends every forwarded request and refuses new ones, then closes
// the idle connections.
func (f *forwarder) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	f.cancel(false)
	f.calls.CloseIdleConnections()
	f.prompt.CloseIdleConnections()
}

// Forwarding returns how many requests the endpoint is forwarding to their
// home node now.
func (s *Server) Forwarding() int {
	if s.proxy == nil {
		return 0
	}
	return s.proxy.count()
}

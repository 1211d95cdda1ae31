package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/julienschmidt/httprouter"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// Options configure the admin API.
type Options struct {
	// Token is the admin bearer token. Required: with an empty Token every
	// request is refused with 401.
	Token string
	// MCP is the MCP endpoint whose sessions GET /admin/v1/sessions lists.
	// Nil: the list comes from the store alone.
	MCP *mcpruntime.MCPEndpoint
	// Logger. Nil: slog.Default().
	Logger *slog.Logger
	// MaxEventStreams bounds the event streams (GET /admin/v1/events) open
	// at once; one more is refused with 503. Zero: DefaultMaxEventStreams.
	MaxEventStreams int
}

// Server is the admin API, an http.Handler serving /admin/v1/….
type Server struct {
	rt   *mcpruntime.Runtime
	opts Options
	mux  http.Handler
	// streams holds a token per open event stream.
	streams chan struct{}
	// backup holds the token of the one backup that may run at a time.
	backup chan struct{}

	// tokenSum is the SHA-256 of Options.Token; requests are compared
	// against it, never against the token itself. Nil when Token is empty.
	tokenSum []byte
}

// MaxBodyBytes bounds a request body; a larger one gets 413.
const MaxBodyBytes = 1 << 20

// New returns the admin API of rt.
func New(rt *mcpruntime.Runtime, opts Options) *Server {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxEventStreams <= 0 {
		opts.MaxEventStreams = DefaultMaxEventStreams
	}
	s := &Server{rt: rt, opts: opts, streams: make(chan struct{}, opts.MaxEventStreams), backup: make(chan struct{}, 1)}
	if opts.Token != "" {
		sum := sha256.Sum256([]byte(opts.Token))
		s.tokenSum = sum[:]
	} else {
		opts.Logger.Warn("admin API has no token: every request will be refused")
	}
	s.mux = s.routes()
	return s
}

// ServeHTTP serves the admin API. A path with an empty or dot segment
// ("//", "/./", "/../") names no route: it is answered 404 as it is, never
// cleaned or redirected, and before the token is looked at.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !cleanPath(r.URL.Path) {
		s.writeError(w, r, errNotFound)
		return
	}
	s.mux.ServeHTTP(w, r)
}

// cleanPath reports whether path is absolute and has no empty, "." or ".."
// segment (a trailing slash is an empty last segment). Such a path is what
// a router that cleans paths would have rewritten; the admin listener
// answers it 404 instead.
func cleanPath(path string) bool {
	if !strings.HasPrefix(path, "/") {
		return false
	}
	for seg := range strings.SplitSeq(path[1:], "/") {
		if seg == "" || seg == "." || seg == ".." {
			return path == "/"
		}
	}
	return true
}

// routes builds the router. Every route is registered through handle, so
// it needs the admin token, answers JSON and logs uniformly. What the
// router answers by itself (an unknown path 404, a wrong method 405,
// OPTIONS 204) needs no token: it tells only what the route table in the
// package doc tells.
func (s *Server) routes() http.Handler {
	rt := httprouter.New()
	// Unknown paths are 404 JSON, not redirects: a client of a JSON API
	// gains nothing from a 301 to a neighbouring path.
	rt.RedirectTrailingSlash = false
	rt.RedirectFixedPath = false
	rt.HandleMethodNotAllowed = true // 405 with Allow (set by httprouter)
	rt.HandleOPTIONS = true          // OPTIONS: 204 with Allow
	rt.GlobalOPTIONS = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNoContent)
	})
	rt.NotFound = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errNotFound)
	})
	rt.MethodNotAllowed = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errMethod)
	})
	rt.PanicHandler = func(w http.ResponseWriter, r *http.Request, v any) {
		s.opts.Logger.Error("admin API handler panicked", "method", r.Method, "path", r.URL.Path, "panic", v)
		s.writeError(w, r, errInternal)
	}

	const v1 = "/admin/v1"
	s.handle(rt, http.MethodPost, v1+"/instances", s.createInstance)
	s.handle(rt, http.MethodGet, v1+"/threads", s.listThreads)
	s.handle(rt, http.MethodPost, v1+"/threads", s.createThread)
	s.handle(rt, http.MethodGet, v1+"/threads/:id", s.getThread)
	s.handle(rt, http.MethodDelete, v1+"/threads/:id", s.deleteThread)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/provider-sessions", s.openProviderSession)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/switch", s.switchProvider)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/rotate", s.rotate)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/runs", s.startRun)
	rt.Handle(http.MethodGet, v1+"/events", s.events)
	rt.Handle(http.MethodGet, v1+"/backup", s.backupState)
	s.handle(rt, http.MethodDelete, v1+"/threads/:id/runs/current", s.endRun)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/detach", s.detach)
	s.handle(rt, http.MethodPost, v1+"/threads/:id/archive", s.archive)
	s.handle(rt, http.MethodDelete, v1+"/provider-sessions/:id", s.releaseProviderSession)
	s.handle(rt, http.MethodGet, v1+"/clients", s.listClients)
	s.handle(rt, http.MethodPost, v1+"/clients", s.issueClient)
	s.handle(rt, http.MethodGet, v1+"/clients/:id", s.getClient)
	s.handle(rt, http.MethodPost, v1+"/clients/:id/refresh", s.refreshClient)
	s.handle(rt, http.MethodDelete, v1+"/clients/:id", s.revokeClient)
	s.handle(rt, http.MethodGet, v1+"/sessions", s.listSessions)
	s.handle(rt, http.MethodPost, v1+"/oauth/pairing-codes", s.newPairingCode)
	return rt
}

// handlerFunc serves one route. It returns the status and the value to
// encode as JSON (nil: no body), or an error that writeError maps.
type handlerFunc func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) (int, any, error)

func (s *Server) handle(rt *httprouter.Router, method, pattern string, h handlerFunc) {
	rt.Handle(method, pattern, func(w http.ResponseWriter, r *http.Request, ps httprouter.Params) {
		start := time.Now()
		if !s.authenticate(w, r) {
			s.opts.Logger.Debug("admin request", "method", method, "route", pattern,
				"status", http.StatusUnauthorized, "duration", time.Since(start))
			return
		}
		status, body, err := h(w, r, ps)
		if err != nil {
			status = s.writeError(w, r, err)
		} else {
			writeJSON(w, status, body)
		}
		// The route pattern, not the path, and never a header: nothing
		// secret reaches the log.
		s.opts.Logger.Debug("admin request", "method", method, "route", pattern,
			"status", status, "duration", time.Since(start))
	})
}

// authenticate reports whether r bears the admin token, and answers 401 if
// not. The presented token is hashed and the digests compared in constant
// time, so neither the token's length nor its prefix leaks through timing.
func (s *Server) authenticate(w http.ResponseWriter, r *http.Request) bool {
	tok, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="admin"`)
		s.writeError(w, r, errUnauthorized)
		return false
	}
	sum := sha256.Sum256([]byte(tok))
	if s.tokenSum == nil || subtle.ConstantTimeCompare(sum[:], s.tokenSum) != 1 {
		w.Header().Set("WWW-Authenticate", `Bearer realm="admin", error="invalid_token"`)
		s.writeError(w, r, errUnauthorized)
		return false
	}
	return true
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
// The scheme is case-insensitive (RFC 9110 §11.1).
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != ""
}

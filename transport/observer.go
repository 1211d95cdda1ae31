package transport

import (
	"net/http"
	"time"
)

// Observer receives the endpoint's events, for metrics (the metrics
// package implements it; the module root's Observer is this type). Methods
// are called from request goroutines and MCP session actors: they must be
// quick and safe for concurrent use.
type Observer interface {
	// Request is called once per request with its protocol era ("modern":
	// its MCP-Protocol-Version header is 2026-07-28; "session" otherwise),
	// the HTTP method ("GET", "POST", "DELETE", or "other" for any other),
	// the status answered and how long it took (for a stream: until it
	// ended).
	Request(era, method string, status int, d time.Duration)
	// AuthFailure is called for every 401, with a reason: "missing",
	// "malformed_header", or the backend's error's (AuthReasoner; the
	// module root's: an AuthError's Reason), "invalid" for an error that
	// gives none.
	AuthFailure(reason string)
	// SessionOpened and SessionClosed bracket every MCP session; the close
	// reason is one of the session package's Reason constants: "delete",
	// "idle", "cap", "revoke" or "shutdown".
	SessionOpened()
	SessionClosed(reason string)
	// Refused is called for every request a bound refused (429, 503),
	// naming it: "requests_per_namespace", "requests", "body_bytes",
	// "sessions_per_namespace", "sessions", "modern_requests_per_namespace",
	// "listen_per_namespace", "listen", "rate_per_namespace" (each message of
	// a batch counted), or "unavailable" (a node of several that does not
	// serve: Host.Available; SPEC §5d.2).
	Refused(bound string)
	// Forward is called once for every request Host.Route sent away
	// from this node, with its outcome: "proxied" (the home node answered;
	// its answer went to the client), "home_gone" (Route said the home node
	// is gone or unknown), "proxy_error" (the home node could not be
	// reached, or failed before its answer started); and, from the
	// runtime's Route, "read_here" for a request of a principal whose home
	// is another node that this node answered itself (a read, SPEC §5d.6).
	Forward(outcome string)
}

// AuthReasoner is implemented by a backend's authentication errors that
// can say why (e.g. "revoked", "expired"); others count as "invalid".
type AuthReasoner interface{ AuthReason() string }

type nopObserver struct{}

func (nopObserver) Request(string, string, int, time.Duration) {}
func (nopObserver) AuthFailure(string)                         {}
func (nopObserver) SessionOpened()                             {}
func (nopObserver) SessionClosed(string)                       {}
func (nopObserver) Refused(string)                             {}
func (nopObserver) Forward(string)                             {}

// eraLabel is the protocol era an Observer is told of a request: "modern"
// when its MCP-Protocol-Version header names 2026-07-28, "session" for any
// other (a 2025 version, none, or one not served).
func eraLabel(r *http.Request) string {
	if modernHeader(r) {
		return "modern"
	}
	return "session"
}

// methodLabel is the HTTP method an Observer is told: one of the endpoint's
// methods, or "other", so that a client cannot make up label values.
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodPost, http.MethodDelete:
		return m
	}
	return "other"
}

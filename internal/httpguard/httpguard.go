// Package httpguard is the DNS-rebinding guard of SPEC §5 step 1, shared by
// the listeners that serve a browser-reachable loopback port: a request
// whose Origin is present and not allowed, or whose Host is not allowed, is
// refused before anything else looks at it.
//
// Loopback is always allowed: the Host names localhost, 127.0.0.0/8 and
// [::1] (any port), and Origins http(s)://localhost, 127.0.0.0/8 or [::1]
// (any port, no path). Anything else must be listed. A page served from
// evil.example that re-binds its name to 127.0.0.1 sends Host: evil.example
// (and Origin: http://evil.example), so it is refused.
//
// The package answers nothing itself: each listener writes its own 403 in
// its own format.
package httpguard

import (
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// Refusals returned by Guard.Check.
var (
	// ErrOrigin: an Origin header is present and neither loopback nor in
	// Guard.AllowedOrigins.
	ErrOrigin = errors.New("origin not allowed")
	// ErrHost: the Host header is neither loopback nor in Guard.AllowedHosts.
	ErrHost = errors.New("host not allowed")
)

// Guard checks Origin and Host. The zero value allows loopback only.
type Guard struct {
	// AllowedHosts are Host names (without port) accepted besides loopback
	// ones. Nil: none.
	AllowedHosts []string
	// AllowedOrigins are Origin values accepted besides loopback ones,
	// compared as sent ("https://app.example:8443"). Nil: none.
	AllowedOrigins []string
	// AllowAnyOrigin turns the Origin check off. Not for production.
	AllowAnyOrigin bool
	// DisableHostCheck turns the Host check off (a listener behind a proxy
	// that checks it).
	DisableHostCheck bool
}

// Check returns nil for a request the guard lets through, else ErrOrigin
// or ErrHost.
func (g *Guard) Check(r *http.Request) error {
	if origin := r.Header.Get("Origin"); origin != "" && !g.AllowAnyOrigin && !g.OriginAllowed(origin) {
		return ErrOrigin
	}
	if !g.DisableHostCheck && !g.HostAllowed(r.Host) {
		return ErrHost
	}
	return nil
}

// OriginAllowed reports whether an Origin header value is loopback or
// listed.
func (g *Guard) OriginAllowed(origin string) bool {
	if slices.Contains(g.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" {
		return false
	}
	return Loopback(u.Hostname())
}

// HostAllowed reports whether a Host header value (host or host:port) is
// loopback or listed.
func (g *Guard) HostAllowed(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return Loopback(host) || slices.Contains(g.AllowedHosts, host)
}

// Loopback reports whether host (no port, no brackets) is localhost or a
// loopback IP address.
func Loopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

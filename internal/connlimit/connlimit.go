// Package connlimit bounds the connections a net.Listener hands out, in all
// and per source address (SPEC §7.1): the standalone server's MCP and admin
// listeners, so that idle connections nobody sends a byte on cannot take
// the process's file descriptors.
//
// A connection past a bound is closed at once on accept, unanswered (no
// byte written; on TCP with SO_LINGER 0, so it is reset and leaves no
// TIME_WAIT behind), and counted by the bound that refused it. Accept
// never blocks on a bound: it refuses and takes the next connection, so a
// flood from one source never delays another source's accept.
//
// A source is the remote IP address; an IPv6 address counts by its /64
// (one host's usual share), an IPv4-mapped IPv6 address as the IPv4
// address. Loopback sources are sources like any other: 127.0.0.1 and
// 127.0.0.2 are two. An address that is not an IP (a Unix socket) is one
// source for all.
//
// Each admitted connection's slot is released when it is closed, once,
// however often Close is called.
package connlimit

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
)

// Limits are a listener's bounds. A zero field means no bound.
type Limits struct {
	// Total is the most connections open at once in all.
	Total int
	// PerSource is the most connections open at once from one source.
	PerSource int
}

// Stats is a listener's state and what it refused since it was made.
type Stats struct {
	// Open is the connections admitted and not yet closed.
	Open int
	// Sources is the sources with a connection open.
	Sources int
	// RefusedTotal is the connections closed at once because Total was
	// reached; RefusedSource, because their source's PerSource was.
	RefusedTotal, RefusedSource uint64
}

// Listener is a net.Listener whose Accept hands out connections within
// its Limits. Its methods may be called concurrently.
type Listener struct {
	net.Listener
	limits Limits

	refusedTotal, refusedSource atomic.Uint64

	// mu guards the fields below. Invariant: open is the sum of bySource,
	// which holds no zero count.
	mu       sync.Mutex
	open     int
	bySource map[netip.Addr]int
}

// New wraps inner in the bounds of limits.
func New(inner net.Listener, limits Limits) *Listener {
	return &Listener{Listener: inner, limits: limits, bySource: map[netip.Addr]int{}}
}

// Limits are the listener's bounds.
func (l *Listener) Limits() Limits { return l.limits }

// Stats reports the listener's open connections and refusals.
func (l *Listener) Stats() Stats {
	l.mu.Lock()
	open, sources := l.open, len(l.bySource)
	l.mu.Unlock()
	return Stats{Open: open, Sources: sources, RefusedTotal: l.refusedTotal.Load(), RefusedSource: l.refusedSource.Load()}
}

// Accept returns the next connection within the bounds; those past them
// are closed at once and counted, and it goes on to the next. Its errors
// are the inner listener's.
func (l *Listener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src := Source(c.RemoteAddr())
		if l.admit(src) {
			return &conn{Conn: c, l: l, src: src}, nil
		}
		refuse(c)
	}
}

// admit takes a slot for a connection from src, or counts its refusal.
func (l *Listener) admit(src netip.Addr) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.limits.Total > 0 && l.open >= l.limits.Total {
		l.refusedTotal.Add(1)
		return false
	}
	if l.limits.PerSource > 0 && l.bySource[src] >= l.limits.PerSource {
		l.refusedSource.Add(1)
		return false
	}
	l.open++
	l.bySource[src]++
	return true
}

// release gives back the slot of a closed connection from src.
func (l *Listener) release(src netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if n := l.bySource[src] - 1; n > 0 {
		l.bySource[src] = n
	} else {
		delete(l.bySource, src)
	}
}

// refuse closes a connection past a bound, resetting it where it can.
func refuse(c net.Conn) {
	if tc, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// Source is the source a remote address counts against: its IP address,
// an IPv6 one cut to its /64, an IPv4-mapped one unmapped; the zero Addr
// for an address that is not an IP.
func Source(a net.Addr) netip.Addr {
	var ip netip.Addr
	switch a := a.(type) {
	case *net.TCPAddr:
		ip, _ = netip.AddrFromSlice(a.IP)
	case nil:
		return netip.Addr{}
	default:
		if ap, err := netip.ParseAddrPort(a.String()); err == nil {
			ip = ap.Addr()
		}
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// conn is an admitted connection: its Close releases its slot once.
type conn struct {
	net.Conn
	l    *Listener
	src  netip.Addr
	once sync.Once
}

func (c *conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.src) })
	return err
}

// CloseWrite half-closes the connection where the inner one can (a TCP
// connection): net/http calls it before closing a connection whose
// request body it did not read, so that its answer arrives before a reset.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

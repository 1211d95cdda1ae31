package connlimit

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// errDrained is what fakeListener's Accept returns once its queue is empty.
var errDrained = errors.New("drained")

// fakeListener hands out the connections in its queue, and errDrained
// while the queue is empty.
type fakeListener struct {
	queue chan net.Conn
}

func newFake(size int, conns ...net.Conn) *fakeListener {
	l := &fakeListener{queue: make(chan net.Conn, max(size, len(conns)))}
	for _, c := range conns {
		l.queue <- c
	}
	return l
}

func (l *fakeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.queue:
		return c, nil
	default:
		return nil, errDrained
	}
}
func (l *fakeListener) Close() error   { return nil }
func (l *fakeListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 7331} }

// fakeConn is a connection from remote; closes counts its Close calls.
type fakeConn struct {
	net.Conn // nil: only the methods below are called
	remote   net.Addr
	closes   atomic.Int32
}

func from(addr string) *fakeConn {
	return &fakeConn{remote: net.TCPAddrFromAddrPort(netip.MustParseAddrPort(addr))}
}
func (c *fakeConn) RemoteAddr() net.Addr { return c.remote }
func (c *fakeConn) Close() error         { c.closes.Add(1); return nil }

// acceptAll accepts until the inner listener is drained.
func acceptAll(t *testing.T, l *Listener) []net.Conn {
	t.Helper()
	var got []net.Conn
	for {
		c, err := l.Accept()
		if errors.Is(err, errDrained) {
			return got
		}
		if err != nil {
			t.Fatalf("Accept: %v", err)
		}
		got = append(got, c)
	}
}

// admitted reports which of conns came out of Accept (by index) and
// checks that every other one was closed, once.
func admitted(t *testing.T, conns []*fakeConn, got []net.Conn) []int {
	t.Helper()
	out := map[net.Conn]bool{}
	for _, c := range got {
		out[c.(*conn).Conn] = true
	}
	var idx []int
	for i, c := range conns {
		switch {
		case out[c]:
			idx = append(idx, i)
			if n := c.closes.Load(); n != 0 {
				t.Errorf("admitted connection %d (%s) closed %d times", i, c.remote, n)
			}
		case c.closes.Load() != 1:
			t.Errorf("refused connection %d (%s) closed %d times, want once", i, c.remote, c.closes.Load())
		}
	}
	return idx
}

// TestLimits: Accept hands out connections within the total and the
// per-source bound and closes the rest at once, counting each by the
// bound that refused it; a source is an IPv4 address, an IPv6 /64, a
// mapped IPv4 address as itself; loopback addresses are sources like
// any other.
func TestLimits(t *testing.T) {
	tests := []struct {
		name   string
		limits Limits
		from   []string
		want   []int // the indexes admitted
		stats  Stats
	}{
		{
			name:   "total",
			limits: Limits{Total: 3},
			from:   []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1", "10.0.0.5:1"},
			want:   []int{0, 1, 2},
			stats:  Stats{Open: 3, Sources: 3, RefusedTotal: 2},
		},
		{
			name:   "per source",
			limits: Limits{Total: 100, PerSource: 2},
			from:   []string{"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3", "10.0.0.2:1", "10.0.0.1:4", "10.0.0.2:2"},
			want:   []int{0, 1, 3, 5},
			stats:  Stats{Open: 4, Sources: 2, RefusedSource: 2},
		},
		{
			name:   "loopback addresses are sources",
			limits: Limits{Total: 100, PerSource: 1},
			from:   []string{"127.0.0.1:1", "127.0.0.1:2", "127.0.0.2:1", "[::1]:1", "[::1]:2"},
			want:   []int{0, 2, 3},
			stats:  Stats{Open: 3, Sources: 3, RefusedSource: 2},
		},
		{
			name:   "IPv6 by /64, mapped IPv4 as IPv4",
			limits: Limits{Total: 100, PerSource: 1},
			from:   []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1", "[2001:db8:1:3::1]:1", "10.0.0.1:1", "[::ffff:10.0.0.1]:1", "[fe80::1%eth0]:1", "[fe80::2%eth1]:1"},
			want:   []int{0, 2, 3, 5},
			stats:  Stats{Open: 4, Sources: 4, RefusedSource: 3},
		},
		{
			name:   "total before per source",
			limits: Limits{Total: 2, PerSource: 1},
			from:   []string{"10.0.0.1:1", "10.0.0.2:1", "10.0.0.1:2", "10.0.0.3:1"},
			want:   []int{0, 1},
			stats:  Stats{Open: 2, Sources: 2, RefusedTotal: 2},
		},
		{
			name:  "no bounds",
			from:  []string{"10.0.0.1:1", "10.0.0.1:2", "10.0.0.1:3"},
			want:  []int{0, 1, 2},
			stats: Stats{Open: 3, Sources: 1},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			conns := make([]*fakeConn, len(test.from))
			inner := make([]net.Conn, len(test.from))
			for i, a := range test.from {
				conns[i] = from(a)
				inner[i] = conns[i]
			}
			l := New(newFake(0, inner...), test.limits)
			got := admitted(t, conns, acceptAll(t, l))
			if diff := cmp.Diff(test.want, got); diff != "" {
				t.Errorf("admitted (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(test.stats, l.Stats()); diff != "" {
				t.Errorf("Stats (-want +got):\n%s", diff)
			}
		})
	}
}

// TestReleaseOnClose: closing an admitted connection frees its slot, in
// all and for its source, once however often it is closed; a source
// whose connections are all closed is forgotten.
func TestReleaseOnClose(t *testing.T) {
	a1, a2, a3, b1, a4 := from("10.0.0.1:1"), from("10.0.0.1:2"), from("10.0.0.1:3"), from("10.0.0.2:1"), from("10.0.0.1:4")
	fake := newFake(1)
	l := New(fake, Limits{Total: 3, PerSource: 2})
	// accept offers c and reports whether Accept handed it out (a refused
	// one is closed and Accept finds the queue empty).
	accept := func(c *fakeConn) (net.Conn, bool) {
		t.Helper()
		fake.queue <- c
		got, err := l.Accept()
		if errors.Is(err, errDrained) {
			if n := c.closes.Load(); n != 1 {
				t.Fatalf("refused %s closed %d times, want once", c.remote, n)
			}
			return nil, false
		}
		if err != nil {
			t.Fatal(err)
		}
		return got, true
	}

	c1, ok1 := accept(a1)
	c2, ok2 := accept(a2)
	if !ok1 || !ok2 {
		t.Fatalf("first two from one source refused: %v %v", ok1, ok2)
	}
	if _, ok := accept(a3); ok {
		t.Fatal("third from one source admitted past PerSource 2")
	}
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c1.Close() // a second Close releases nothing more
	_ = c1.Close()
	if got := l.Stats(); got.Open != 1 || got.Sources != 1 {
		t.Fatalf("after one Close thrice: Stats %+v, want Open 1, Sources 1", got)
	}
	c4, ok := accept(a4)
	if !ok {
		t.Fatal("a source's connection refused after one of its two was closed")
	}
	c5, ok := accept(b1)
	if !ok {
		t.Fatal("another source refused with the total not reached")
	}
	// Total 3 now holds a2, a4, b1: one more from a new source is refused
	// by the total.
	if _, ok := accept(from("10.0.0.3:1")); ok {
		t.Fatal("admitted past Total 3")
	}
	for _, c := range []net.Conn{c2, c4, c5, c2, c4} {
		_ = c.Close()
	}
	if got := l.Stats(); got.Open != 0 || got.Sources != 0 {
		t.Fatalf("after every Close: Stats %+v, want nothing open and no source kept", got)
	}
	if a1.closes.Load() != 3 {
		t.Errorf("inner Close called %d times, want each call passed on (3)", a1.closes.Load())
	}
}

// TestConcurrentAcceptClose: accepts and closes racing (and closes
// doubled) never hold more than the bounds, and leave nothing counted
// once every connection is closed. Run with -race.
func TestConcurrentAcceptClose(t *testing.T) {
	const n, total, perSource = 2000, 8, 3
	sources := []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "127.0.0.1"}
	fake := newFake(n)
	for i := range n {
		fake.queue <- from(sources[i%len(sources)] + ":1")
	}
	l := New(fake, Limits{Total: total, PerSource: perSource})
	var wg sync.WaitGroup
	var admittedN atomic.Int64
	var over atomic.Int64
	for range 4 {
		wg.Go(func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				admittedN.Add(1)
				if s := l.Stats(); s.Open > total {
					over.Add(1)
				}
				wg.Go(func() {
					_ = c.Close()
					_ = c.Close()
				})
			}
		})
	}
	wg.Wait()
	s := l.Stats()
	if over.Load() != 0 {
		t.Errorf("Open exceeded Total %d %d times", total, over.Load())
	}
	if s.Open != 0 || s.Sources != 0 {
		t.Errorf("after every Close: Stats %+v, want nothing open", s)
	}
	if got := uint64(admittedN.Load()) + s.RefusedTotal + s.RefusedSource; got != n {
		t.Errorf("admitted %d + refused %d + %d = %d, want every one of %d", admittedN.Load(), s.RefusedTotal, s.RefusedSource, got, n)
	}
}

// TestTCPRefusedClosedAtOnce: on a real loopback listener, a connection
// past the bound is closed by the server with no byte written, while an
// admitted one stays open and carries data both ways; closing the
// admitted one frees its slot.
func TestTCPRefusedClosedAtOnce(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := New(inner, Limits{Total: 10, PerSource: 1})
	defer l.Close()
	served := make(chan net.Conn, 4)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			served <- c
		}
	}()
	dial := func() net.Conn {
		t.Helper()
		c, err := net.DialTimeout("tcp", inner.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // detects a hang only
		return c
	}
	first := dial()
	defer first.Close()
	srvSide := <-served
	if err := closedAtOnce(inner.Addr().String()); err != nil {
		t.Fatalf("second connection from one source: %v", err)
	}
	if _, err := first.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(srvSide, b); err != nil || b[0] != 'x' {
		t.Fatalf("admitted connection: read %q, %v", b, err)
	}
	if got := l.Stats(); got.Open != 1 || got.RefusedSource != 1 {
		t.Errorf("Stats %+v, want Open 1, RefusedSource 1", got)
	}
	_ = srvSide.Close()
	third := dial()
	defer third.Close()
	select {
	case c := <-served:
		_ = c.Close()
	case <-time.After(30 * time.Second): // detects a hang only
		t.Fatal("a connection after the first was closed was not admitted")
	}
	_ = l.Close()
	<-done
}

// closedAtOnce dials addr and returns nil if the server closes the
// connection without writing a byte: the dial itself reset, or the first
// read at its end. A read that times out means it was held open.
func closedAtOnce(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		if isTimeout(err) {
			return err
		}
		return nil // reset before the dial returned
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // detects a hang only
	n, err := c.Read(make([]byte, 1))
	switch {
	case n != 0:
		return errors.New("the server wrote a byte")
	case err == nil || isTimeout(err):
		return fmt.Errorf("held open: read %v", err)
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func TestSource(t *testing.T) {
	tests := []struct {
		name string
		addr net.Addr
		want string
	}{
		{name: "IPv4", addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 1}, want: "192.0.2.7"},
		{name: "IPv4 as 16 bytes", addr: &net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, want: "192.0.2.7"},
		{name: "IPv6 cut to /64", addr: &net.TCPAddr{IP: net.ParseIP("2001:db8:a:b:c:d:e:f"), Port: 1}, want: "2001:db8:a:b::"},
		{name: "IPv6 zone dropped", addr: &net.TCPAddr{IP: net.ParseIP("fe80::1"), Zone: "eth0"}, want: "fe80::"},
		{name: "loopback v6", addr: &net.TCPAddr{IP: net.IPv6loopback}, want: "::"},
		{name: "UDP-shaped string", addr: &net.UDPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 9}, want: "10.1.2.3"},
		{name: "Unix socket", addr: &net.UnixAddr{Name: "/tmp/s", Net: "unix"}, want: "invalid IP"},
		{name: "nil", addr: nil, want: "invalid IP"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			if got := Source(test.addr).String(); got != test.want {
				t.Errorf("Source(%v) = %s, want %s", test.addr, got, test.want)
			}
		})
	}
}

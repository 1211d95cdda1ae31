package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/internal/connlimit"
)

// dialFrom dials addr from the loopback address src (127.0.0.0/8 is all
// loopback on Linux: each address is a source of its own).
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	return d.Dial("tcp", addr)
}

// holdFrom opens n idle connections (not a byte sent) from src to addr and
// closes them at the end of the test.
func holdFrom(t *testing.T, src, addr string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		c, err := dialFrom(src, addr)
		if err != nil {
			t.Fatalf("dial %s from %s: %v", addr, src, err)
		}
		t.Cleanup(func() { c.Close() })
		conns[i] = c
	}
	return conns
}

// closedAtOnceFrom dials addr from src and returns nil if the server
// closes the connection without writing a byte: the dial reset, or the
// first read at its end. A connection held open fails the read deadline
// (an hour of header timeout keeps an admitted one open meanwhile).
func closedAtOnceFrom(src, addr string) error {
	c, err := dialFrom(src, addr)
	if err != nil {
		if errors.Is(err, syscall.ECONNRESET) {
			return nil // reset before the dial returned
		}
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second)) // detects a hang only
	n, err := c.Read(make([]byte, 1))
	switch {
	case n != 0:
		return errors.New("the server wrote a byte")
	case err == nil:
		return errors.New("read nothing and no error")
	case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
		return nil
	}
	return fmt.Errorf("held open: read %w", err)
}

// keepAlive is one HTTP/1.1 connection that requests go over in turn.
type keepAlive struct {
	t    *testing.T
	addr string
	c    net.Conn
	r    *bufio.Reader
}

func openKeepAlive(t *testing.T, src, addr string) *keepAlive {
	t.Helper()
	c, err := dialFrom(src, addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return &keepAlive{t: t, addr: addr, c: c, r: bufio.NewReader(c)}
}

// get sends GET path and returns the status and body.
func (k *keepAlive) get(path string) (int, string) {
	k.t.Helper()
	_ = k.c.SetDeadline(time.Now().Add(30 * time.Second)) // detects a hang only
	if _, err := io.WriteString(k.c, "GET "+path+" HTTP/1.1\r\nHost: "+k.addr+"\r\n\r\n"); err != nil {
		k.t.Fatalf("GET %s: %v", path, err)
	}
	resp, err := http.ReadResponse(k.r, nil)
	if err != nil {
		k.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.Close {
		k.t.Fatalf("GET %s: the server closed a kept-alive connection", path)
	}
	return resp.StatusCode, string(b)
}

// connMetrics are the connection caps' series of a /metrics scrape.
func connMetrics(t *testing.T, scrape string) map[string]int {
	t.Helper()
	got := map[string]int{}
	re := regexp.MustCompile(`(?m)^(mcpruntime_connections_\w+\{[^}]*\}) (\S+)$`)
	for _, m := range re.FindAllStringSubmatch(scrape, -1) {
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatalf("metric %s %q: %v", m[1], m[2], err)
		}
		got[m[1]] = int(v)
	}
	return got
}

// TestServeConnectionCaps reproduces issue 24's row 4 at a small scale:
// idle connections (no byte sent) past the MCP listener's per-source cap,
// then past its total cap, are closed at once on accept, unanswered,
// while another source's request is answered, a connection already
// admitted keeps working, and the admin listener, in its own share,
// answers a new connection; past the admin listener's per-source cap its
// excess is closed at once too. Each refusal is counted by listener and
// cap, and closing the flood's connections frees their slots.
func TestServeConnectionCaps(t *testing.T) {
	dir := t.TempDir()
	mcpAddr, adminAddr, logs, stop := startServe(t, map[string]string{}, "--admin-token-file", filepath.Join(dir, "admin-token"), "--no-demo",
		"--header-timeout", "1h", // an admitted idle connection stays open for the whole test
		"--max-connections", "12", "--max-connections-per-source", "4",
		"--admin-max-connections", "6", "--admin-max-connections-per-source", "3")
	if !strings.Contains(logs.String(), "descriptor limit") {
		t.Errorf("no log line of the descriptor limit:\n%s", logs)
	}

	// Per source: 127.0.0.2 holds its 4; its next ones are closed at once.
	flood := holdFrom(t, "127.0.0.2", mcpAddr, 4)
	held := append([]net.Conn(nil), flood...)
	for i := range 3 {
		if err := closedAtOnceFrom("127.0.0.2", mcpAddr); err != nil {
			t.Fatalf("connection %d from 127.0.0.2 past its 4: %v", 5+i, err)
		}
	}
	// Another source is answered meanwhile, on a connection it keeps.
	normal := openKeepAlive(t, "127.0.0.1", mcpAddr)
	if status, body := normal.get("/.well-known/oauth-authorization-server"); status != http.StatusOK {
		t.Fatalf("a normal request during the flood: %d %s", status, body)
	}

	// In all: 4 + 1 + 4 + 3 = 12 open; the next, from a fresh source, is
	// closed at once.
	held = append(held, holdFrom(t, "127.0.0.3", mcpAddr, 4)...)
	held = append(held, holdFrom(t, "127.0.0.4", mcpAddr, 3)...)
	if err := closedAtOnceFrom("127.0.0.5", mcpAddr); err != nil {
		t.Fatalf("connection past the 12 in all: %v", err)
	}
	if status, body := normal.get("/.well-known/oauth-authorization-server"); status != http.StatusOK {
		t.Fatalf("an admitted connection while the listener is full: %d %s", status, body)
	}

	// The admin listener has its own share: a new connection is answered
	// while the MCP listener is full; past its per-source cap, closed.
	if status, _, body := rawGet(t, adminAddr, "GET", "/healthz", nil); status != http.StatusOK {
		t.Fatalf("admin /healthz while the MCP listener is full: %d %s", status, body)
	}
	held = append(held, holdFrom(t, "127.0.0.2", adminAddr, 3)...)
	if err := closedAtOnceFrom("127.0.0.2", adminAddr); err != nil {
		t.Fatalf("admin connection from 127.0.0.2 past its 3: %v", err)
	}
	operator := openKeepAlive(t, "127.0.0.6", adminAddr)
	status, scrape := operator.get("/metrics")
	if status != http.StatusOK {
		t.Fatalf("admin /metrics: %d", status)
	}
	got := connMetrics(t, scrape)
	want := map[string]int{
		`mcpruntime_connections_open{listener="mcp"}`:                            12,
		`mcpruntime_connections_refused_total{listener="mcp",reason="source"}`:   3,
		`mcpruntime_connections_refused_total{listener="mcp",reason="total"}`:    1,
		`mcpruntime_connections_refused_total{listener="admin",reason="source"}`: 1,
		`mcpruntime_connections_refused_total{listener="admin",reason="total"}`:  0,
		`mcpruntime_connections_open{listener="admin"}`:                          got[`mcpruntime_connections_open{listener="admin"}`],
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("connection metrics (-want +got):\n%s", diff)
	}
	if n := got[`mcpruntime_connections_open{listener="admin"}`]; n < 4 || n > 6 {
		t.Errorf("admin connections open %d, want the 3 held and the operator's, at most 6", n)
	}

	// Closing the flood frees its slots: the server sees each close and
	// the gauge comes down; then a fresh source is answered again.
	for _, c := range flood {
		c.Close()
	}
	for {
		_, scrape := operator.get("/metrics")
		if connMetrics(t, scrape)[`mcpruntime_connections_open{listener="mcp"}`] <= 8 {
			break
		}
		time.Sleep(10 * time.Millisecond) // a poll of the gauge; the deadline of get detects a hang
	}
	fresh := openKeepAlive(t, "127.0.0.5", mcpAddr)
	if status, body := fresh.get("/.well-known/oauth-authorization-server"); status != http.StatusOK {
		t.Fatalf("a new connection after the flood closed: %d %s", status, body)
	}
	// Close everything before stopping, so that shutdown does not wait on
	// connections that never sent a request.
	for _, k := range []*keepAlive{normal, fresh, operator} {
		held = append(held, k.c)
	}
	for _, c := range held {
		c.Close()
	}
	if code := stop(); code != 0 {
		t.Errorf("serve exited %d", code)
	}
}

// TestConnCapsFitDescriptors: the connection caps not set are lowered to
// fit the descriptor limit less a reserve (a quarter, at least 256), the
// admin listener keeping its own share; set ones are kept (and warned
// about); with no limit known the settings stand.
func TestConnCapsFitDescriptors(t *testing.T) {
	defaults := serveCmd{MaxConnections: 16384, MaxConnectionsPerSource: 1024, AdminMaxConnections: 64, AdminMaxConnectionsPerSource: 16}
	l := func(total, perSource int) connlimit.Limits {
		return connlimit.Limits{Total: total, PerSource: perSource}
	}
	tests := []struct {
		name  string
		s     serveCmd
		given []string
		fds   uint64
		want  connCaps
		warn  bool
	}{
		{name: "large limit: the defaults", s: defaults, fds: 1 << 20, want: connCaps{mcp: l(16384, 1024), admin: l(64, 16)}},
		{name: "unknown limit: the defaults", s: defaults, fds: 0, want: connCaps{mcp: l(16384, 1024), admin: l(64, 16)}},
		{name: "infinite limit: the defaults", s: defaults, fds: 1<<64 - 1, want: connCaps{mcp: l(16384, 1024), admin: l(64, 16)}},
		// 20 000 descriptors (issue 24, row 4): 5 000 reserved.
		{name: "20000", s: defaults, fds: 20000, want: connCaps{mcp: l(14936, 1024), admin: l(64, 16)}},
		// 1 024 (a common soft limit that cannot be raised): 256 reserved.
		{name: "1024", s: defaults, fds: 1024, want: connCaps{mcp: l(704, 704), admin: l(64, 16)}},
		{name: "300", s: defaults, fds: 300, want: connCaps{mcp: l(39, 39), admin: l(5, 5)}},
		{name: "below the reserve", s: defaults, fds: 100, want: connCaps{mcp: l(1, 1), admin: l(1, 1)}},
		{
			name: "set ones kept", s: serveCmd{MaxConnections: 50000, MaxConnectionsPerSource: 2000, AdminMaxConnections: 64, AdminMaxConnectionsPerSource: 16},
			given: []string{"max-connections", "max-connections-per-source"}, fds: 20000,
			want: connCaps{mcp: l(50000, 2000), admin: l(64, 16)}, warn: true,
		},
		{
			name: "per source follows a set total", s: serveCmd{MaxConnections: 100, MaxConnectionsPerSource: 1024, AdminMaxConnections: 64, AdminMaxConnectionsPerSource: 16},
			given: []string{"max-connections"}, fds: 20000, want: connCaps{mcp: l(100, 100), admin: l(64, 16)},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			given := map[string]bool{}
			for _, g := range test.given {
				given[g] = true
			}
			var logs syncBuffer
			got := test.s.connCaps(given, test.fds, slog.New(slog.NewTextHandler(&logs, nil)))
			if diff := cmp.Diff(test.want, got, cmp.AllowUnexported(connCaps{})); diff != "" {
				t.Errorf("connCaps(%d) (-want +got):\n%s", test.fds, diff)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != test.warn {
				t.Errorf("warned %v, want %v; logs:\n%s", warned, test.warn, &logs)
			}
		})
	}
}

// Command authproxy is the conformance harness's loopback reverse proxy
// (scripts/conformance.sh, `make conformance`). The official MCP conformance
// suite sends no credential, and the server under test refuses a request
// without one, so the suite talks to this proxy instead, which:
//
//   - sets "Authorization: Bearer <token>" on every request it forwards
//     (replacing one the client sent);
//   - streams each response through as the server writes it, one flush per
//     write, so an SSE event reaches the suite when the server sends it;
//   - passes everything else byte for byte: method, path and query, Host,
//     Origin and every other end-to-end header (it adds none: no
//     X-Forwarded-*, no User-Agent, no Accept-Encoding), the request and
//     response bodies, the status, and the response's Content-Encoding (it
//     never decompresses). Hop-by-hop headers (Connection and those it
//     names, Keep-Alive, TE, Trailer, Transfer-Encoding, Upgrade,
//     Proxy-Authenticate, Proxy-Authorization) belong to each connection
//     and are not forwarded (RFC 9110 §7.6.1);
//   - cancels the upstream request when the client goes away, so the
//     server sees the disconnect the suite makes.
//
// Usage:
//
//	AUTHPROXY_TOKEN=mcprt_… authproxy -target http://127.0.0.1:PORT/mcp [-listen 127.0.0.1:0] [-dump FILE]
//
// The token comes from the environment, never from a flag, so it is not in
// the process list. Both the listen address and the target must be loopback
// IP literals: the proxy never listens beyond this machine, and never sends
// the token anywhere else. Once listening it prints one JSON line on stdout,
// {"url":"http://127.0.0.1:PORT/PATH"}, PATH being the target's, then serves
// until SIGINT or SIGTERM.
//
// -dump FILE writes the traffic as JSON lines (see dumper), the
// Authorization header redacted: what the scenario map in
// conformance/SCENARIOS.md was read from.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"
)

// tokenEnv names the environment variable that holds the bearer token.
const tokenEnv = "AUTHPROXY_TOKEN"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole program: it parses args, serves until ctx ends and
// returns the exit status (2 for a bad invocation, 1 when serving failed).
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("authproxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "address to listen on: a loopback IP literal and a port (0: any free port)")
	target := fs.String("target", "", "URL of the MCP endpoint under test, http://LOOPBACK-IP:PORT/PATH (required)")
	dump := fs.String("dump", "", "write the traffic to this file as JSON lines, Authorization redacted")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	up, err := parseTarget(*target)
	if err == nil {
		err = checkLoopback(*listen)
	}
	token := getenv(tokenEnv)
	if err == nil && token == "" {
		err = fmt.Errorf("$%s is empty: it must hold the bearer token to add", tokenEnv)
	}
	if err == nil && strings.ContainsAny(token, " \t\r\n") {
		err = fmt.Errorf("$%s holds white space: it must be the bare token", tokenEnv)
	}
	if err != nil {
		fmt.Fprintf(stderr, "authproxy: %v\n", err)
		return 2
	}

	p := &proxy{
		upstream: up.Host,
		auth:     "Bearer " + token,
		// DisableCompression: no Accept-Encoding added, no response
		// decompressed. No Proxy: the target is loopback.
		transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64},
		logf:      func(format string, a ...any) { fmt.Fprintf(stderr, "authproxy: "+format+"\n", a...) },
	}
	if *dump != "" {
		f, err := os.OpenFile(*dump, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
		if err != nil {
			fmt.Fprintf(stderr, "authproxy: %v\n", err)
			return 1
		}
		defer f.Close()
		p.dump = &dumper{w: f, start: time.Now()}
	}

	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "authproxy: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	line, _ := json.Marshal(struct {
		URL string `json:"url"`
	}{"http://" + ln.Addr().String() + up.RequestURI()})
	fmt.Fprintf(stdout, "%s\n", line)

	code := 0
	select {
	case <-ctx.Done():
	case err := <-served:
		fmt.Fprintf(stderr, "authproxy: %v\n", err)
		code = 1
	}
	// Close, not Shutdown: an SSE stream the suite left open would hold a
	// graceful shutdown forever. Closing the connections cancels every
	// request's context, so each handler returns promptly; wait for them so
	// nothing writes the dump after it is closed.
	srv.Close()
	p.handlers.Wait()
	p.transport.CloseIdleConnections()
	return code
}

// parseTarget checks the upstream URL: http, a loopback IP literal and a
// port, no user info.
func parseTarget(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, errors.New("-target is required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, fmt.Errorf("-target: %w", err)
	}
	if u.Scheme != "http" || u.User != nil || u.Fragment != "" {
		return nil, fmt.Errorf("-target %q: want http://LOOPBACK-IP:PORT/PATH", raw)
	}
	if err := checkLoopback(u.Host); err != nil {
		return nil, fmt.Errorf("-target: %w", err)
	}
	return u, nil
}

// checkLoopback accepts host:port whose host is a loopback IP literal. A
// name (even "localhost") is refused: what it resolves to is not ours to
// trust.
func checkLoopback(hostport string) error {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("address %q: %w", hostport, err)
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() || port == "" {
		return fmt.Errorf("address %q: want a loopback IP literal and a port, such as 127.0.0.1:0", hostport)
	}
	return nil
}

// hopHeaders are the hop-by-hop headers of RFC 9110 §7.6.1 (and the
// obsolete ones net/http's own proxy also drops): each connection's own,
// never forwarded.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// removeHop deletes the hop-by-hop headers from h, including those its
// Connection header names.
func removeHop(h http.Header) {
	for _, v := range h.Values("Connection") {
		for _, name := range strings.Split(v, ",") {
			if name = strings.TrimSpace(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// proxy forwards every request to upstream with auth set.
type proxy struct {
	upstream  string // host:port
	auth      string // the Authorization value to set
	transport *http.Transport
	dump      *dumper // nil: no dump
	logf      func(format string, a ...any)
	handlers  sync.WaitGroup
}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.handlers.Add(1)
	defer p.handlers.Done()
	id := p.dump.next()
	rc := http.NewResponseController(w)
	// Full duplex: the request body stays readable after the response's
	// headers are written. Without it net/http consumes and closes the body
	// at WriteHeader, so a server that answers before the upstream
	// Transport's last read of the body (it reads once more to see EOF)
	// has that read fail, and the Transport closes the connection under
	// the streaming response.
	if err := rc.EnableFullDuplex(); err != nil {
		p.logf("full duplex: %v", err)
	}

	out := r.Clone(r.Context()) // keeps Host: the server sees the client's
	out.RequestURI = ""
	out.URL.Scheme = "http"
	out.URL.Host = p.upstream
	removeHop(out.Header)
	out.Header.Set("Authorization", p.auth)
	if _, ok := r.Header["User-Agent"]; !ok {
		out.Header.Set("User-Agent", "") // the Transport would add its own
	}
	if r.ContentLength == 0 {
		out.Body = nil // nothing to send; no chunked empty body
	} else if p.dump != nil {
		out.Body = &dumpReader{ReadCloser: r.Body, d: p.dump, id: id}
	}
	p.dump.request(id, out)

	res, err := p.transport.RoundTrip(out)
	if err != nil {
		p.dump.end(id, err, r.Context())
		if r.Context().Err() == nil {
			p.logf("%s %s: upstream: %v", r.Method, r.URL.Path, err)
			http.Error(w, "authproxy: upstream unreachable", http.StatusBadGateway)
		}
		return
	}
	defer res.Body.Close()
	removeHop(res.Header)
	for name, vs := range res.Header {
		w.Header()[name] = vs
	}
	p.dump.response(id, res)
	w.WriteHeader(res.StatusCode)
	_ = rc.Flush() // the status and headers now: an SSE client may wait for them
	buf := make([]byte, 32<<10)
	for {
		n, rerr := res.Body.Read(buf)
		if n > 0 {
			p.dump.chunk(id, "response-body", buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				p.dump.end(id, werr, r.Context()) // the client went away; the deferred Close tells the server
				return
			}
			if ferr := rc.Flush(); ferr != nil {
				p.dump.end(id, ferr, r.Context())
				return
			}
		}
		if rerr != nil {
			if rerr == io.EOF {
				rerr = nil
			}
			p.dump.end(id, rerr, r.Context())
			return
		}
	}
}

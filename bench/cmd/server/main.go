// Command server serves one benchmarked MCP implementation for cmd/load.
//
//	server -impl runtime|gosdk|mcpgo|floor [-addr 127.0.0.1:0] [-control 127.0.0.1:0] [-memprofilerate N]
//
// It serves the echo tool on http://ADDR/mcp behind bearer auth, and the
// control endpoint (tokens, revoke, stats, pprof; see servers.Control) on a
// separate listener, then prints one line:
//
//	listening 127.0.0.1:PORT control 127.0.0.1:PORT
//
// It stops on SIGINT or SIGTERM. Both listeners must be on loopback.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/servers"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "server:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		impl     = flag.String("impl", servers.Runtime, "implementation: runtime, gosdk, mcpgo or floor")
		addr     = flag.String("addr", "127.0.0.1:0", "MCP listen address (loopback)")
		control  = flag.String("control", "127.0.0.1:0", "control listen address (loopback)")
		maxSess  = flag.Int("max-sessions", 200_000, "runtime: global session cap (0: the runtime's default, 100000)")
		maxPerNS = flag.Int("max-sessions-per-namespace", 200_000, "runtime: per-token session cap (0: the runtime's default, 64)")
		memRate  = flag.Int("memprofilerate", 0, "runtime.MemProfileRate for /debug/pprof/heap (0: Go's default, one sample per 512 KiB; 1: every allocation, exact but slow)")
	)
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate // before the first allocation worth profiling
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slog.SetDefault(logger)

	srv, err := servers.New(*impl, servers.Options{
		MaxSessions:             *maxSess,
		MaxSessionsPerNamespace: *maxPerNS,
		Logger:                  logger,
	})
	if err != nil {
		return err
	}
	defer srv.Close()

	mcpLn, err := listenLoopback(*addr)
	if err != nil {
		return err
	}
	ctlLn, err := listenLoopback(*control)
	if err != nil {
		mcpLn.Close()
		return err
	}
	mcpSrv := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	ctlSrv := &http.Server{Handler: servers.Control(srv), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	go func() { errc <- mcpSrv.Serve(mcpLn) }()
	go func() { errc <- ctlSrv.Serve(ctlLn) }()
	fmt.Printf("listening %s control %s\n", mcpLn.Addr(), ctlLn.Addr())

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case s := <-sig:
		logger.Debug("stopping", "signal", s)
	case err := <-errc:
		return err
	}
	// Streams never end by themselves: close rather than drain.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = ctlSrv.Shutdown(ctx)
	return closeServer(mcpSrv)
}

// closeServer closes the listener and every connection at once.
func closeServer(s *http.Server) error {
	if err := s.Close(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// listenLoopback listens on addr, which must be a loopback IP and port.
func listenLoopback(addr string) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("address %q: the benchmark listens on a loopback IP only", addr)
	}
	return net.Listen("tcp", addr)
}

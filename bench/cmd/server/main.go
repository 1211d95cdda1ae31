// Command server serves one benchmarked MCP implementation for cmd/load.
//
//	server -impl runtime|gosdk|mcpgo|floor [-tool echo|runtime_capabilities] [-addr 127.0.0.1:0] [-control 127.0.0.1:0] [-memprofilerate N]
//	server -impl binary|binary-raised [-binary PATH] [-binary-arg FLAG]... [-control 127.0.0.1:0]
//
// It serves the tool (echo unless -tool says) on http://ADDR/mcp behind
// bearer auth, and the control endpoint (tokens, revoke, stats, pprof; see
// servers.Control) on a separate listener, then prints one line:
//
//	listening 127.0.0.1:PORT control 127.0.0.1:PORT
//
// binary and binary-raised are the shipped `runtime serve` (-binary, by
// default the runtime file beside this one) in a child process, which
// serves MCP itself on a loopback port it picks; this process serves the
// control endpoint for it (servers.ControlBinary) and ends it by its PID.
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
	"path/filepath"
	"runtime"
	"slices"
	"strings"
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
		impl     = flag.String("impl", servers.Runtime, "implementation: runtime (runtime-audit, runtime-events, runtime-observed), gosdk, mcpgo, floor, binary or binary-raised")
		addr     = flag.String("addr", "127.0.0.1:0", "MCP listen address (loopback)")
		control  = flag.String("control", "127.0.0.1:0", "control listen address (loopback)")
		maxSess  = flag.Int("max-sessions", 200_000, "runtime, binary-raised: global session cap (0: the runtime's default, 100000)")
		maxPerNS = flag.Int("max-sessions-per-namespace", 200_000, "runtime, binary-raised: per-token session cap (0: the runtime's default, 64)")
		memRate  = flag.Int("memprofilerate", 0, "runtime.MemProfileRate for /debug/pprof/heap (0: Go's default, one sample per 512 KiB; 1: every allocation, exact but slow)")
		tool     = flag.String("tool", "", "the tool served: echo (the default) or runtime_capabilities (the runtime: its built-ins only; the peers and the floor: a stand-in); the shipped binary serves its built-ins, never echo")
		binPath  = flag.String("binary", "", "binary, binary-raised: the runtime binary (default: runtime beside this program)")
		binArgs  stringList
	)
	flag.Var(&binArgs, "binary-arg", "binary, binary-raised: one more flag of runtime serve (repeat it; \"--memory\", \"--no-oauth\" …)")
	flag.Parse()
	if *memRate > 0 {
		runtime.MemProfileRate = *memRate // before the first allocation worth profiling
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slog.SetDefault(logger)

	if slices.Contains(servers.Shipped, *impl) {
		if *tool == servers.EchoTool {
			return errors.New("the shipped binary has no echo tool: its load calls runtime_capabilities (cmd/load -tool)")
		}
		return runBinary(servers.BinaryOptions{
			Path:                    *binPath,
			Raised:                  *impl == servers.BinaryRaised,
			MaxSessions:             *maxSess,
			MaxSessionsPerNamespace: *maxPerNS,
			Args:                    binArgs,
			Stderr:                  os.Stderr,
		}, *control, logger)
	}
	if *binPath != "" || len(binArgs) > 0 {
		return fmt.Errorf("-binary and -binary-arg are for %s only", strings.Join(servers.Shipped, " and "))
	}
	srv, err := servers.New(*impl, servers.Options{
		MaxSessions:             *maxSess,
		MaxSessionsPerNamespace: *maxPerNS,
		Tool:                    *tool,
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

// runBinary starts the shipped binary, serves its control endpoint on
// control, and ends the binary by its PID when a signal comes, or fails
// when the binary exits by itself.
func runBinary(opts servers.BinaryOptions, control string, logger *slog.Logger) error {
	if opts.Path == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("-binary: %w", err)
		}
		opts.Path = filepath.Join(filepath.Dir(exe), "runtime")
	}
	ctlLn, err := listenLoopback(control)
	if err != nil {
		return err
	}
	defer ctlLn.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	// A signal during the start ends the start (StartBinary closes the
	// child on its error).
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-sig:
			cancel()
		case <-ctx.Done():
		}
	}()
	b, err := servers.StartBinary(ctx, opts)
	if err != nil {
		return err
	}
	defer b.Close()
	ctlSrv := &http.Server{Handler: servers.ControlBinary(b), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- ctlSrv.Serve(ctlLn) }()
	fmt.Printf("listening %s control %s\n", b.MCPAddr(), ctlLn.Addr())
	select {
	case <-ctx.Done():
		logger.Debug("stopping")
	case <-b.Exited():
		return fmt.Errorf("%s (pid %d) exited by itself", opts.Path, b.PID())
	case err := <-errc:
		return err
	}
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer scancel()
	_ = ctlSrv.Shutdown(sctx)
	return b.Close()
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

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

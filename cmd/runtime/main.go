// Command runtime runs the session runtime on its embedded in-memory store.
//
// This is the stub of the standalone server: it starts the runtime with an
// in-process demo provider instance and serves /healthz on a loopback
// address until interrupted. The MCP endpoint arrives with the transport,
// the admin API and configuration with the standalone-server issue.
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
	"syscall"
	"time"

	"github.com/julienschmidt/httprouter"

	mcpruntime "github.com/agenthost/mcpruntime"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runtime:", err)
		if errors.Is(err, errUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

var errUsage = errors.New("usage")

func run(args []string) error {
	fs := flag.NewFlagSet("runtime", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7331", "address to serve on (loopback unless told otherwise)")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %w", errUsage, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	host, _, err := net.SplitHostPort(*listen)
	if err != nil {
		return fmt.Errorf("%w: -listen %q: %w", errUsage, *listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		logger.Warn("listening beyond loopback", "addr", *listen)
	}

	rt, err := mcpruntime.New(mcpruntime.Config{Endpoint: "http://" + *listen + "/mcp", Logger: logger})
	if err != nil {
		return err
	}
	defer rt.Close()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := rt.RegisterInstance(ctx, "demo", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		return err
	}

	router := httprouter.New()
	router.GET("/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	srv := &http.Server{Addr: *listen, Handler: router, ReadHeaderTimeout: 10 * time.Second}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	logger.Info("runtime serving", "addr", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	logger.Info("shutting down")
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

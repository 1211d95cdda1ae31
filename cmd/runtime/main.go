// Command runtime runs the session runtime on its embedded in-memory store.
//
// It serves the MCP endpoint (/mcp) and /healthz on a loopback address
// until interrupted. With -demo (the default) it also creates a thread
// "demo" with an in-process provider instance "demo", opens its provider
// session, starts a run, and writes that session's Authorization header
// value to a 0600 file whose path it logs (never the token itself), so a
// client can connect at once. The admin API and configuration file arrive
// with the standalone-server issue.
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
	demo := fs.Bool("demo", true, "create a demo thread and write its credential to a 0600 file")
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
	mcp, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		return err
	}
	if *demo {
		path, err := setupDemo(ctx, rt)
		if err != nil {
			return err
		}
		defer os.RemoveAll(filepath.Dir(path))
		logger.Info("demo credential written", "file", path, "thread", "demo", "instance", "demo")
	}

	router := httprouter.New()
	router.GET("/healthz", func(w http.ResponseWriter, _ *http.Request, _ httprouter.Params) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintln(w, `{"status":"ok"}`)
	})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp)
	mux.Handle("/", router)
	srv := &http.Server{Addr: *listen, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
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
	mcp.Close() // end streams first, or Shutdown would wait for them
	shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// setupDemo creates the demo thread and instance, opens the provider
// session, starts a run, and writes the Authorization value to a 0600 file.
func setupDemo(ctx context.Context, rt *mcpruntime.Runtime) (string, error) {
	if err := rt.RegisterInstance(ctx, "demo", mcpruntime.InstanceSpec{Driver: "inproc"}); err != nil {
		return "", err
	}
	if _, err := rt.CreateThread(ctx, "demo", mcpruntime.ThreadOptions{Instance: "demo"}); err != nil {
		return "", err
	}
	ps, err := rt.OpenProviderSession(ctx, "demo", "demo")
	if err != nil {
		return "", err
	}
	if _, err := rt.StartRun(ctx, "demo", "demo"); err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "mcpruntime-demo-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "authorization")
	if err := os.WriteFile(path, []byte(ps.Authorization+"\n"), 0o600); err != nil {
		return "", err
	}
	return path, nil
}

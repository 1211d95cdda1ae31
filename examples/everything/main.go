// Command everything embeds the runtime through its public API only and
// registers every fixture the official MCP conformance suite's server
// scenarios use (conformance/SCENARIOS.md §2), with the names, schemas and
// behaviours the suite expects, and two tools of a host's own (report, with
// an outputSchema, and deploy, an act tool). It is also the README's worked example of
// the typed API: a tool, a resource, a prompt, an elicitation.
//
//	everything -listen 127.0.0.1:PORT
//
// prints one JSON line on stdout,
// {"url":"http://127.0.0.1:PORT/mcp","token":"…","otherToken":"…"} — token
// may call every fixture, otherToken is another principal — and serves
// until SIGINT or SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/agenthost/mcpruntime"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "everything:", err)
		os.Exit(1)
	}
}

// announcement is the line printed once the server listens.
type announcement struct {
	URL        string `json:"url"`
	Token      string `json:"token"`
	OtherToken string `json:"otherToken"`
}

// run serves until ctx is done.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("everything", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "host:port to serve MCP on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: logger, ClientTokenTTL: mcpruntime.NoExpiry})
	if err != nil {
		return err
	}
	defer rt.Close()
	if err := register(rt); err != nil {
		return err
	}
	tok, err := rt.IssueClient(ctx, "conformance", "read-write")
	if err != nil {
		return err
	}
	other, err := rt.IssueClient(ctx, "another principal", "read-write")
	if err != nil {
		return err
	}
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{Logger: logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	go watchResource(ctx, rt)

	line, _ := json.Marshal(announcement{URL: "http://" + ln.Addr().String() + "/mcp", Token: tok.Token, OtherToken: other.Token})
	if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
		return err
	}
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	h.CloseStreams()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	h.Close()
	return nil
}

// register registers every fixture.
func register(rt *mcpruntime.Runtime) error {
	return errors.Join(registerTools(rt), registerInputTools(rt), registerHostTools(rt), registerResources(rt), registerPrompts(rt))
}

// watchResource says test://watched-resource changed every 3 s, as the
// reference server does (no check reads it).
func watchResource(ctx context.Context, rt *mcpruntime.Runtime) {
	tick := time.NewTicker(3 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			rt.ResourceUpdated(watchedURI)
		}
	}
}

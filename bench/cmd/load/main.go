// Command load drives one benchmark server (cmd/server) over plain MCP
// Streamable HTTP and prints one JSON result line (package result) and one
// human line.
//
//	load -addr HOST:PORT -control HOST:PORT -impl NAME -mode MODE [flags]
//
// Modes:
//
//	calls   -sessions N sessions (one token each) loop tools/call of -tool
//	        for -duration after -warmup: calls/s, p50/p99/p999, errors.
//	modern  calls, but each -sessions loop is a stateless 2026-07-28
//	        client (one token each): no initialize, no session id; _meta,
//	        Mcp-Method and Mcp-Name on every call.
//	        With -tokens T (calls and modern), session i uses token i mod T:
//	        -tokens 1 puts every session in one namespace.
//	churn   -sessions C loops of initialize → initialized → DELETE, one
//	        token each: sessions/s, p99 of a cycle, errors.
//	modern-churn
//	        -sessions C loops of a new short-lived 2026-07-28 client, one
//	        token each: a fresh connection, server/discover, one
//	        tools/call, the connection closed. Clients/s, p99, errors.
//	idle    open -sessions N sessions over -tokens tokens and hold them;
//	        live heap, RSS and goroutines per session from /bench/stats
//	        (no live heap from a server that cannot collect garbage on
//	        demand: the shipped binary).
//	revoke  -sessions T tokens, each with a session looping calls and an
//	        open GET stream; revoke them one by one. Stale accepts
//	        (successes sent after their token's revoke returned; must be 0)
//	        and the time from revoke-return to the stream closing.
//
// -tool names the tool every mode's tools/call calls: echo (the default)
// with a text it checks comes back, or any other tool, called with {} and
// checked only for a complete result without isError: the shipped binary
// has no echo, so its rows call one of its read built-ins
// (runtime_capabilities).
//
// Everything is bounded by -max-time; the target must be on loopback.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/agenthost/mcpruntime/bench/internal/mcpclient"
	"github.com/agenthost/mcpruntime/bench/internal/result"
)

// defaultIdleTokens is how many tokens idle spreads its sessions over
// unless -tokens says otherwise.
const defaultIdleTokens = 100

// config is the parsed command line.
type config struct {
	impl, mode     string
	tool           string
	addr, control  string
	round          int
	sessions       int
	tokens         int
	conns          int
	duration       time.Duration
	warmup         time.Duration
	timeout        time.Duration
	maxTime        time.Duration
	revokeInterval time.Duration
	revokeTail     time.Duration
	streamWait     time.Duration
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "load:", err)
		os.Exit(1)
	}
}

func run() error {
	cfg, err := parseFlags(os.Args[1:])
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.maxTime)
	defer cancel()
	res, err := runMode(ctx, cfg)
	if err != nil {
		return err
	}
	res.Impl, res.Mode, res.Round, res.Tool = cfg.impl, cfg.mode, cfg.round, cfg.tool
	line, err := json.Marshal(res)
	if err != nil {
		return err
	}
	fmt.Printf("%s\n%s\n", line, res)
	return nil
}

func parseFlags(args []string) (config, error) {
	var c config
	fs := flag.NewFlagSet("load", flag.ContinueOnError)
	fs.StringVar(&c.impl, "impl", "", "name of the server under test, for the result")
	fs.StringVar(&c.mode, "mode", result.ModeCalls, "calls, modern, churn, modern-churn, idle or revoke")
	fs.StringVar(&c.tool, "tool", result.EchoTool, "the tool tools/call calls: echo (its text checked), or another called with {} (a complete result without isError checked)")
	fs.StringVar(&c.addr, "addr", "", "MCP server address, HOST:PORT on loopback")
	fs.StringVar(&c.control, "control", "", "control address, HOST:PORT on loopback")
	fs.IntVar(&c.round, "round", 0, "round number, for the result")
	fs.IntVar(&c.sessions, "sessions", 16, "sessions (calls, idle), loops (churn) or tokens (revoke)")
	fs.IntVar(&c.tokens, "tokens", 0, "calls, modern, idle: tokens the sessions are spread over (0: calls and modern one per session, idle 100)")
	fs.IntVar(&c.conns, "conns", 64, "idle: concurrent initializes")
	fs.DurationVar(&c.duration, "duration", 5*time.Second, "calls, churn: measured window")
	fs.DurationVar(&c.warmup, "warmup", time.Second, "calls, churn, revoke: load before measuring")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "bound of each request")
	fs.DurationVar(&c.maxTime, "max-time", 3*time.Minute, "bound of the whole run")
	fs.DurationVar(&c.revokeInterval, "revoke-interval", 10*time.Millisecond, "revoke: pause between revokes")
	fs.DurationVar(&c.revokeTail, "revoke-tail", 200*time.Millisecond, "revoke: how long a token's calls go on after its revoke")
	fs.DurationVar(&c.streamWait, "stream-wait", 2*time.Second, "revoke: how long to wait for streams after the last revoke")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.sessions < 1 || c.tokens < 0 || c.conns < 1 {
		return c, errors.New("-sessions and -conns must be positive, -tokens not negative")
	}
	if c.tool == "" {
		return c, errors.New("-tool must name a tool")
	}
	if c.tokens == 0 {
		c.tokens = c.sessions
		if c.mode == result.ModeIdle {
			c.tokens = defaultIdleTokens
		}
	}
	c.tokens = min(c.tokens, c.sessions)
	for _, a := range []string{c.addr, c.control} {
		if err := checkLoopback(a); err != nil {
			return c, err
		}
	}
	return c, nil
}

// checkLoopback refuses any target but a loopback IP and port.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("address %q: the benchmark targets a loopback IP only", addr)
	}
	return nil
}

func runMode(ctx context.Context, cfg config) (result.Result, error) {
	switch cfg.mode {
	case result.ModeCalls, result.ModeModern:
		return runCalls(ctx, cfg)
	case result.ModeChurn:
		return runChurn(ctx, cfg)
	case result.ModeModernChurn:
		return runModernChurn(ctx, cfg)
	case result.ModeIdle:
		return runIdle(ctx, cfg)
	case result.ModeRevoke:
		return runRevoke(ctx, cfg)
	}
	return result.Result{}, fmt.Errorf("unknown mode %q", cfg.mode)
}

// call is one tools/call of cfg's tool on s: echo with text, checked, or
// the tool with {}, its result checked to be complete and not an error.
// No tool named is echo.
func (cfg config) call(ctx context.Context, s *mcpclient.Session, text string) error {
	if cfg.tool == "" || cfg.tool == result.EchoTool {
		return s.Echo(ctx, text)
	}
	return s.CallTool(ctx, cfg.tool)
}

// newClient returns an MCP client for cfg's server with room for conns
// connections.
func newClient(cfg config, conns int) *mcpclient.Client {
	return &mcpclient.Client{HTTP: mcpclient.NewHTTPClient(conns), URL: "http://" + cfg.addr + "/mcp"}
}

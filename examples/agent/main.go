// Command agent is a stand-in for a real coding agent (Codex, Claude Code,
// OpenCode): an MCP client, built on the official MCP Go SDK, that reads
// its MCP connection the way those agents do and calls the runtime's tools
// in a loop.
//
// Its MCP connection comes from, in order:
//
//   - -mcp-config FILE, or the file named by $MCPRUNTIME_MCP_CONFIG: a JSON
//     MCP config, {"mcpServers":{"<name>":{"type":"http","url":…,
//     "headers":{"Authorization":…}}}}, the server picked by -server (or
//     $MCPRUNTIME_SERVER_NAME, or the only one in the file);
//   - $MCPRUNTIME_URL and $MCPRUNTIME_AUTHORIZATION.
//
// The runtime's exec driver provides both. Each call is reported as one
// JSON line on stdout, {"n":1,"tool":"thread_read","ok":true,"status":200},
// which the exec driver logs with the provider session's id. When a call is
// refused with 401 the agent re-reads its config file (the runtime rewrites
// it after a credential rotation) and reconnects; it keeps trying, one call
// per interval, so a revoked agent keeps reporting 401 until it is stopped.
// SIGTERM or SIGINT end it with exit status 0.
//
//	go run ./examples/agent -mcp-config /tmp/mcp.json -interval 500ms -calls 10
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	configFile string
	server     string
	tool       string
	args       string
	post       string
	interval   time.Duration
	calls      int
}

func run(argv []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.configFile, "mcp-config", os.Getenv("MCPRUNTIME_MCP_CONFIG"), "JSON MCP config file (default $MCPRUNTIME_MCP_CONFIG)")
	fs.StringVar(&o.server, "server", os.Getenv("MCPRUNTIME_SERVER_NAME"), "server name in the MCP config file (default: the only one)")
	fs.StringVar(&o.tool, "tool", "thread_read", "tool to call")
	fs.StringVar(&o.args, "args", "{}", "the tool's arguments, a JSON object")
	fs.StringVar(&o.post, "post", "", "after each call, also post this text with thread_post (refused unless the agent's instance owns the thread's run)")
	fs.DurationVar(&o.interval, "interval", time.Second, "time between calls")
	fs.IntVar(&o.calls, "calls", 0, "stop after this many calls (0: until SIGTERM)")
	if err := fs.Parse(argv); err != nil {
		return 2
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(o.args), &args); err != nil {
		fmt.Fprintf(stderr, "agent: -args: %v\n", err)
		return 2
	}
	if o.interval <= 0 {
		fmt.Fprintln(stderr, "agent: -interval must be positive")
		return 2
	}
	conn, err := loadConnection(o)
	if err != nil {
		fmt.Fprintf(stderr, "agent: %v\n", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	a := &agent{opts: o, args: args, conn: conn, out: json.NewEncoder(stdout), errOut: stderr}
	a.loop(ctx)
	return 0
}

// connection is where and how to reach the MCP server.
type connection struct {
	URL           string
	Authorization string
}

// loadConnection reads the config file if there is one, else the
// environment.
func loadConnection(o options) (connection, error) {
	if o.configFile != "" {
		return readConfigFile(o.configFile, o.server)
	}
	c := connection{URL: os.Getenv("MCPRUNTIME_URL"), Authorization: os.Getenv("MCPRUNTIME_AUTHORIZATION")}
	if c.URL == "" || c.Authorization == "" {
		return c, errors.New("no MCP connection: give -mcp-config, or set MCPRUNTIME_URL and MCPRUNTIME_AUTHORIZATION")
	}
	return c, nil
}

func readConfigFile(path, server string) (connection, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return connection{}, err
	}
	var f struct {
		MCPServers map[string]struct {
			Type    string            `json:"type"`
			URL     string            `json:"url"`
			Headers map[string]string `json:"headers"`
		} `json:"mcpServers"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		return connection{}, fmt.Errorf("%s: %w", path, err)
	}
	if server == "" {
		if len(f.MCPServers) != 1 {
			names := make([]string, 0, len(f.MCPServers))
			for n := range f.MCPServers {
				names = append(names, n)
			}
			sort.Strings(names)
			return connection{}, fmt.Errorf("%s: %d servers %v: pick one with -server", path, len(names), names)
		}
		for n := range f.MCPServers {
			server = n
		}
	}
	s, ok := f.MCPServers[server]
	switch {
	case !ok:
		return connection{}, fmt.Errorf("%s: no server %q", path, server)
	case s.Type != "http":
		return connection{}, fmt.Errorf("%s: server %q has type %q, want \"http\"", path, server, s.Type)
	case s.URL == "":
		return connection{}, fmt.Errorf("%s: server %q has no url", path, server)
	}
	return connection{URL: s.URL, Authorization: s.Headers["Authorization"]}, nil
}

// report is one line of the agent's output.
type report struct {
	N      int    `json:"n"`
	Tool   string `json:"tool"`
	OK     bool   `json:"ok"`
	Status int    `json:"status,omitempty"` // the last HTTP status seen
	Error  string `json:"error,omitempty"`
	Result string `json:"result,omitempty"` // the tool's text, cut to 200 bytes
}

type agent struct {
	opts   options
	args   map[string]any
	conn   connection
	out    *json.Encoder
	errOut io.Writer

	session *mcp.ClientSession
	status  atomic.Int64 // last HTTP status seen by the transport
}

func (a *agent) loop(ctx context.Context) {
	defer a.disconnect()
	tick := time.NewTicker(a.opts.interval)
	defer tick.Stop()
	for n := 1; (a.opts.calls == 0 || n <= a.opts.calls) && ctx.Err() == nil; n++ {
		a.call(ctx, n, a.opts.tool, a.args)
		if a.opts.post != "" {
			a.call(ctx, n, "thread_post", map[string]any{"text": a.opts.post})
		}
		if n == a.opts.calls {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// call makes one tool call, connecting first if needed, and reports it.
func (a *agent) call(ctx context.Context, n int, tool string, args map[string]any) {
	r := report{N: n, Tool: tool}
	defer func() {
		if err := a.out.Encode(r); err != nil {
			fmt.Fprintf(a.errOut, "agent: write report: %v\n", err)
		}
	}()
	if a.session == nil {
		if err := a.connect(ctx); err != nil {
			r.Status, r.Error = int(a.status.Load()), "connect: "+err.Error()
			a.afterFailure(r.Status)
			return
		}
	}
	res, err := a.session.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	r.Status = int(a.status.Load())
	if err != nil {
		r.Error = err.Error()
		a.disconnect()
		a.afterFailure(r.Status)
		return
	}
	r.OK = !res.IsError
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			r.Result = cut(tc.Text, 200)
			break
		}
	}
}

// afterFailure re-reads the config file after a 401: a rotation rewrote it.
func (a *agent) afterFailure(status int) {
	if status != http.StatusUnauthorized || a.opts.configFile == "" {
		return
	}
	c, err := readConfigFile(a.opts.configFile, a.opts.server)
	if err != nil {
		fmt.Fprintf(a.errOut, "agent: re-read MCP config: %v\n", err)
		return
	}
	a.conn = c
}

func (a *agent) connect(ctx context.Context) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "mcpruntime-example-agent", Version: "1.0.0"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:             a.conn.URL,
		HTTPClient:           &http.Client{Transport: &authTransport{authorization: a.conn.Authorization, status: &a.status}},
		MaxRetries:           -1, // a refused request is reported, not retried
		DisableStandaloneSSE: true,
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := client.Connect(cctx, transport, nil)
	if err != nil {
		return err
	}
	a.session = s
	return nil
}

func (a *agent) disconnect() {
	if a.session != nil {
		a.session.Close() // DELETE; an error means the session is gone already
		a.session = nil
	}
}

// authTransport adds the Authorization header and remembers the status of
// the last response.
type authTransport struct {
	authorization string
	status        *atomic.Int64
}

func (t *authTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", t.authorization)
	resp, err := http.DefaultTransport.RoundTrip(req)
	if err == nil {
		t.status.Store(int64(resp.StatusCode))
	}
	return resp, err
}

func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

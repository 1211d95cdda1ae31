package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/admin"
)

// runtimeServer is the runtime serving echo as a read tool, or only its
// built-ins (runtime_capabilities among them), to client grants.
type runtimeServer struct {
	rt      *mcpruntime.Runtime
	handler http.Handler
	labels  atomic.Int64

	mu      sync.Mutex
	clients map[string]string // token → client grant id

	// follower is the admin event stream a runtime-events or
	// runtime-observed server serves to itself; nil otherwise.
	follower *follower
}

// events says how a runtime server's admin event stream is followed.
type events int

const (
	noEvents      events = iota
	eventsRead           // followed from the start, every event read (runtime-events)
	eventsStalled        // opened by a reader that never reads (runtime-stalled)
)

// newRuntime builds the runtime; audit turns its audit trail on
// (runtime-audit); ev follows the admin event stream from the start, as
// an operator watching it would, or stalls it.
func newRuntime(opts Options, audit bool, ev events) (*runtimeServer, error) {
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: opts.Logger, Audit: audit})
	if err != nil {
		return nil, fmt.Errorf("start runtime: %w", err)
	}
	s := &runtimeServer{rt: rt, clients: map[string]string{}}
	// With CapabilitiesTool the runtime serves its built-ins only, as the
	// shipped binary does: the tools runtime_capabilities lists are the
	// same.
	if opts.Tool == EchoTool {
		if err := rt.RegisterTool(mcpruntime.Tool{
			Tool:    mcp.Tool{Name: EchoTool, Description: echoDescription, InputSchema: json.RawMessage(echoSchema)},
			Access:  mcpruntime.AccessRead,
			Handler: runtimeEcho,
		}); err != nil {
			rt.Close()
			return nil, fmt.Errorf("register echo: %w", err)
		}
	}
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{
		MaxSessions:             opts.MaxSessions,
		MaxSessionsPerNamespace: opts.MaxSessionsPerNamespace,
	})
	if err != nil {
		rt.Close()
		return nil, fmt.Errorf("MCP handler: %w", err)
	}
	s.handler = h
	if ev != noEvents {
		s.follower = follow(rt, opts.Logger, ev == eventsStalled)
	}
	return s, nil
}

// runtimeEcho is the echo tool's handler. The runtime validated the
// arguments against echoSchema already.
func runtimeEcho(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
	var args echoArgs
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("echo arguments: %w", err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: args.Text}}}, nil
}

func (s *runtimeServer) Handler() http.Handler { return s.handler }

// IssueTokens issues one read-only client grant per token.
func (s *runtimeServer) IssueTokens(ctx context.Context, n int) ([]string, error) {
	out := make([]string, 0, n)
	for range n {
		label := fmt.Sprintf("bench-%d", s.labels.Add(1))
		ct, err := s.rt.IssueClient(ctx, label, "read-only")
		if err != nil {
			return out, fmt.Errorf("issue client grant %s: %w", label, err)
		}
		s.mu.Lock()
		s.clients[ct.Token] = ct.ClientID
		s.mu.Unlock()
		out = append(out, ct.Token)
	}
	return out, nil
}

// Revoke revokes the token's whole client grant.
func (s *runtimeServer) Revoke(ctx context.Context, tok string) error {
	s.mu.Lock()
	id, ok := s.clients[tok]
	delete(s.clients, tok)
	s.mu.Unlock()
	if !ok {
		return ErrUnknownToken
	}
	return s.rt.RevokeClient(ctx, id)
}

func (s *runtimeServer) Close() error {
	err := s.rt.Close() // ends the event stream
	if s.follower != nil {
		s.follower.stop()
	}
	return err
}

// follower reads the admin API's event stream (GET /admin/v1/events) in
// the server's process, through the admin handler itself, writing every
// event into a sink that counts and discards it: the server-side cost of
// an operator's event stream, without a client's. A stalled follower's
// sink takes nothing: its first write waits until the server closes, as a
// reader that never reads.
type follower struct {
	cancel context.CancelFunc
	done   chan struct{}
	stall  chan struct{} // closed by stop: a stalled sink's write returns
}

func follow(rt *mcpruntime.Runtime, logger *slog.Logger, stalled bool) *follower {
	const token = "bench-admin-token-0123456789abcdef"
	srv := admin.New(rt, admin.Options{Token: token, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	f := &follower{cancel: cancel, done: make(chan struct{}), stall: make(chan struct{})}
	out := &sink{header: http.Header{}}
	if stalled {
		out.stall = f.stall
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/admin/v1/events?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	go func() {
		defer close(f.done)
		srv.ServeHTTP(out, req)
	}()
	return f
}

func (f *follower) stop() {
	f.cancel()
	close(f.stall)
	<-f.done
}

// sink is a ResponseWriter that discards what it is given; with stall set,
// its writes of events wait until stall is closed.
type sink struct {
	header http.Header
	n      atomic.Int64
	stall  chan struct{}
}

func (s *sink) Header() http.Header              { return s.header }
func (s *sink) SetWriteDeadline(time.Time) error { return nil } // as a connection can
func (s *sink) WriteHeader(int)                  {}
func (s *sink) Flush()                           {}
func (s *sink) Write(p []byte) (int, error) {
	if s.stall != nil {
		<-s.stall
	}
	s.n.Add(int64(len(p)))
	return len(p), nil
}

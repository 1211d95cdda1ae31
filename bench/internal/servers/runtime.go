package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// runtimeServer is the runtime serving echo as a read tool to client
// grants.
type runtimeServer struct {
	rt      *mcpruntime.Runtime
	handler http.Handler
	labels  atomic.Int64

	mu      sync.Mutex
	clients map[string]string // token → client grant id
}

func newRuntime(opts Options) (*runtimeServer, error) {
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: opts.Logger})
	if err != nil {
		return nil, fmt.Errorf("start runtime: %w", err)
	}
	s := &runtimeServer{rt: rt, clients: map[string]string{}}
	if err := rt.RegisterTool(mcpruntime.Tool{
		Tool:    mcp.Tool{Name: "echo", Description: echoDescription, InputSchema: json.RawMessage(echoSchema)},
		Access:  mcpruntime.AccessRead,
		Handler: runtimeEcho,
	}); err != nil {
		rt.Close()
		return nil, fmt.Errorf("register echo: %w", err)
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

func (s *runtimeServer) Close() error { return s.rt.Close() }

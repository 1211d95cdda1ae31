package mcpruntime

import (
	"context"
	"encoding/json"

	"github.com/agenthost/mcpruntime/internal/mcphttp"
)

// MCPOptions configure the MCP endpoint; see mcphttp.Options for each
// field and its default. The runtime's clock and logger are used.
type MCPOptions = mcphttp.Options

// MCPHandler returns the MCP Streamable HTTP endpoint (SPEC §5) serving the
// runtime's tools, to mount on an http.Server. Close ends its sessions. The
// runtime's Close closes it too. The endpoint bounds how long a POST body
// may take (MCPOptions.BodyTimeout); how long headers may take is the
// http.Server's: set its ReadHeaderTimeout (cmd/runtime: 10 s).
func (r *Runtime) MCPHandler(opts MCPOptions) (*mcphttp.Server, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	opts.Now = r.cfg.Now
	if opts.Logger == nil {
		opts.Logger = r.cfg.Logger
	}
	srv := mcphttp.New(mcpBackend{r}, r.store, r.system, opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	r.servers = append(r.servers, srv)
	return srv, nil
}

// mcpBackend adapts the Runtime to the MCP endpoint: the principal and
// the tool result pass through as they are.
type mcpBackend struct{ r *Runtime }

func (b mcpBackend) Authenticate(tok string) (Principal, error) { return b.r.Authenticate(tok) }

func (b mcpBackend) Tools() []mcphttp.ToolDescriptor {
	tools := b.r.Tools()
	out := make([]mcphttp.ToolDescriptor, len(tools))
	for i, t := range tools {
		out[i] = mcphttp.ToolDescriptor{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}

func (b mcpBackend) CallTool(ctx context.Context, p Principal, name string, args json.RawMessage, progress mcphttp.ProgressFunc) (*ToolResult, error) {
	return b.r.CallTool(ctx, p, name, args, progress)
}

package mcpruntime

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/agenthost/mcpruntime/transport"
)

// MCPOptions configure the MCP endpoint; see transport.Options for each
// field and its default. The runtime's clock and logger are used.
type MCPOptions = transport.Options

// MCPHandler returns the MCP Streamable HTTP endpoint (SPEC §5) serving the
// runtime's tools, to mount on an http.Server. Close ends its sessions. The
// runtime's Close closes it too. The endpoint bounds how long a POST body
// may take (MCPOptions.BodyTimeout); how long headers may take is the
// http.Server's: set its ReadHeaderTimeout (cmd/runtime: 10 s).
func (r *Runtime) MCPHandler(opts MCPOptions) (*transport.Server, error) {
	if err := r.checkOpen(); err != nil {
		return nil, err
	}
	opts.Now = r.cfg.Now
	if opts.Logger == nil {
		opts.Logger = r.cfg.Logger
	}
	srv := transport.New(mcpBackend{r}, r.store, r.system, opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	r.servers = append(r.servers, srv)
	return srv, nil
}

// mcpBackend adapts the Runtime to the transport.
type mcpBackend struct{ r *Runtime }

func (b mcpBackend) Authenticate(tok string) (transport.Principal, error) {
	p, err := b.r.Authenticate(tok)
	if err != nil {
		return transport.Principal{}, err
	}
	return transport.Principal{Namespace: p.Namespace, CredentialID: p.CredentialID, Expires: p.Expires, Value: p}, nil
}

func (b mcpBackend) Tools(p transport.Principal) []transport.ToolDescriptor {
	tools := b.r.Tools()
	out := make([]transport.ToolDescriptor, len(tools))
	for i, t := range tools {
		out[i] = transport.ToolDescriptor{Name: t.Name, Description: t.Description, InputSchema: t.InputSchema}
	}
	return out
}

func (b mcpBackend) CallTool(ctx context.Context, p transport.Principal, name string, args json.RawMessage, progress func(float64, float64, string)) (*transport.CallResult, error) {
	caller, ok := p.Value.(Principal)
	if !ok {
		return nil, errors.New("transport principal without a runtime principal")
	}
	res, err := b.r.CallTool(ctx, caller, name, args, progress)
	if err != nil {
		return nil, err
	}
	return &transport.CallResult{Text: res.Text, Structured: res.StructuredContent, IsError: res.IsError}, nil
}

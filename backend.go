package mcpruntime

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/transport"
)

// mcpBackend adapts the Runtime to the MCP endpoint (transport's Backend,
// SPEC §5b): authentication, one method per feature, the capabilities,
// and CanRead for subscriptions. It speaks the runtime's domain only: the
// endpoint decodes the params and maps the runtime's errors
// (ErrUnknownTool, ErrResourceNotFound, …) to JSON-RPC.
type mcpBackend struct {
	r        *Runtime
	pageSize int
	resource string // the endpoint's OAuth resource; "" when OAuth does not serve it
}

func newBackend(r *Runtime, opts MCPOptions) *mcpBackend {
	b := &mcpBackend{r: r, pageSize: opts.ListPageSize}
	if b.pageSize <= 0 {
		b.pageSize = DefaultListPageSize
	}
	return b
}

var _ transport.Backend = (*mcpBackend)(nil)

func (b *mcpBackend) Authenticate(tok string) (Principal, error) {
	return b.r.authenticateFor(tok, b.resource)
}

// Capabilities: every feature is declared, since the built-ins use each
// (the transcripts are resources) and embedders add to them at any time.
func (b *mcpBackend) Capabilities() *mcp.ServerCapabilities { return serverCapabilities }

// serverCapabilities are the runtime's, one value for every endpoint, so
// that each encodes its initialize results once. Read-only.
var serverCapabilities = &mcp.ServerCapabilities{
	Tools:       &mcp.ToolCapabilities{ListChanged: true},
	Resources:   &mcp.ResourceCapabilities{Subscribe: true, ListChanged: true},
	Prompts:     &mcp.PromptCapabilities{ListChanged: true},
	Completions: &mcp.CompletionCapabilities{},
	Logging:     &mcp.LoggingCapabilities{},
}

func (b *mcpBackend) CanRead(p Principal, uri string) bool { return b.r.CanRead(p, uri) }

// exchange is what a handler has of the request besides its arguments.
func exchange(req *transport.Request) Exchange {
	return Exchange{req: req}
}

// CallTool serves tools/call: the hot path.
func (b *mcpBackend) CallTool(ctx context.Context, req *transport.Request, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	call := &ToolCall{Caller: req.Caller, Name: name, Arguments: args, Exchange: exchange(req)}
	if !b.r.cfg.Audit {
		return b.r.callTool(ctx, call)
	}
	started := b.r.cfg.Now()
	res, err := b.r.callTool(ctx, call)
	outcome, code := toolOutcome(res, err)
	rec := Record{Tool: name}
	if t, ok := b.r.tools.get(name); ok && t.AuditArguments {
		auditedArguments(&rec, args)
	}
	b.r.audit(&rec, RecordAuditTool, req.Caller, started, outcome, code)
	return res, err
}

// ReadResource serves resources/read.
func (b *mcpBackend) ReadResource(ctx context.Context, req *transport.Request, uri string) (*mcp.ReadResourceResult, error) {
	read := &ResourceRead{Caller: req.Caller, URI: uri, Exchange: exchange(req)}
	if !b.r.cfg.Audit {
		return b.r.readResource(ctx, read)
	}
	started := b.r.cfg.Now()
	res, err := b.r.readResource(ctx, read)
	outcome, code := OutcomeOK, ""
	if err != nil {
		outcome, code = errOutcome(err)
	}
	rec := Record{URI: uri}
	b.r.audit(&rec, RecordAuditResource, req.Caller, started, outcome, code)
	return res, err
}

// GetPrompt serves prompts/get.
func (b *mcpBackend) GetPrompt(ctx context.Context, req *transport.Request, name string, args map[string]string) (*mcp.GetPromptResult, error) {
	get := &PromptGet{Caller: req.Caller, Name: name, Arguments: args, Exchange: exchange(req)}
	if !b.r.cfg.Audit {
		return b.r.getPrompt(ctx, get)
	}
	started := b.r.cfg.Now()
	res, err := b.r.getPrompt(ctx, get)
	outcome, code := OutcomeOK, ""
	if err != nil {
		outcome, code = errOutcome(err)
	}
	rec := Record{Prompt: name}
	b.r.audit(&rec, RecordAuditPrompt, req.Caller, started, outcome, code)
	return res, err
}

// Complete serves completion/complete.
func (b *mcpBackend) Complete(ctx context.Context, req *transport.Request, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	return b.r.Complete(ctx, req.Caller, params)
}

// privateScope marks every list as one that may depend on who asks (the
// 2026-07-28 era's cache scope).
var privateScope = mcp.Cacheable{CacheScope: "private"}

// ListTools lists every tool: a tool's refusal is a result with a code
// (SPEC §4.3), not a secret, so the list is the same for everyone.
func (b *mcpBackend) ListTools(_ context.Context, _ *transport.Request, cursor string) (*mcp.ListToolsResult, error) {
	items, keys := b.r.tools.snapshot()
	tools, next, err := listPage("t", keys, cursor, b.pageSize, func(k string) (*mcp.Tool, bool) { return items[k].listed, true })
	if err != nil {
		return nil, fmt.Errorf("tools list: %w", err)
	}
	return &mcp.ListToolsResult{Tools: tools, NextCursor: next, Cacheable: privateScope}, nil
}

// ListResources lists the resources the caller may read.
func (b *mcpBackend) ListResources(_ context.Context, req *transport.Request, cursor string) (*mcp.ListResourcesResult, error) {
	items, keys := b.r.resources.snapshot()
	res, next, err := listPage("r", keys, cursor, b.pageSize, func(k string) (*mcp.Resource, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, req.Caller)
	})
	if err != nil {
		return nil, fmt.Errorf("resources list: %w", err)
	}
	return &mcp.ListResourcesResult{Resources: res, NextCursor: next, Cacheable: privateScope}, nil
}

// ListResourceTemplates lists the resource templates the caller may read.
func (b *mcpBackend) ListResourceTemplates(_ context.Context, req *transport.Request, cursor string) (*mcp.ListResourceTemplatesResult, error) {
	items, keys := b.r.templates.snapshot()
	res, next, err := listPage("rt", keys, cursor, b.pageSize, func(k string) (*mcp.ResourceTemplate, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, req.Caller)
	})
	if err != nil {
		return nil, fmt.Errorf("templates list: %w", err)
	}
	return &mcp.ListResourceTemplatesResult{ResourceTemplates: res, NextCursor: next, Cacheable: privateScope}, nil
}

// ListPrompts lists the prompts the caller may get.
func (b *mcpBackend) ListPrompts(_ context.Context, req *transport.Request, cursor string) (*mcp.ListPromptsResult, error) {
	items, keys := b.r.prompts.snapshot()
	res, next, err := listPage("p", keys, cursor, b.pageSize, func(k string) (*mcp.Prompt, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, req.Caller)
	})
	if err != nil {
		return nil, fmt.Errorf("prompts list: %w", err)
	}
	return &mcp.ListPromptsResult{Prompts: res, NextCursor: next, Cacheable: privateScope}, nil
}

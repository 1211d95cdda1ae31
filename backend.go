package mcpruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/transport"
)

// JSON-RPC error codes the backend answers with.
const (
	codeMethodNotFound    = -32601
	codeInvalidParams     = -32602
	codeInternal          = -32603
	codeResourceNotFound  = -32002 // 2025 sessions; -32602 in the 2026-07-28 era
	codeMissingCapability = -32021 // 2026-07-28: MissingRequiredClientCapability
	codeCancelled         = -32800 // never sent: the endpoint answers nothing for a cancelled request
)

// mcpBackend adapts the Runtime to the MCP endpoint (transport's Backend,
// SPEC §5b): authentication, one entry for the feature requests, the
// capabilities, and CanRead for subscriptions.
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

// Serve answers one feature request.
func (b *mcpBackend) Serve(ctx context.Context, req *transport.Request) transport.Response {
	x := Exchange{out: req.Out, caps: req.ClientCapabilities, inputs: req.InputResponses, state: req.State}
	switch req.Method {
	case "tools/call":
		return b.callTool(ctx, req, x)
	case "tools/list":
		return b.list(req, "tools", b.listTools)
	case "resources/list":
		return b.list(req, "resources", b.listResources)
	case "resources/templates/list":
		return b.list(req, "templates", b.listTemplates)
	case "prompts/list":
		return b.list(req, "prompts", b.listPrompts)
	case "resources/read":
		return b.readResource(ctx, req, x)
	case "prompts/get":
		return b.getPrompt(ctx, req, x)
	case "completion/complete":
		return b.complete(ctx, req)
	}
	return fail(codeMethodNotFound, fmt.Sprintf("method %q not found", req.Method), nil)
}

func fail(code int, message string, data any) transport.Response {
	return transport.Response{Err: &transport.RPCError{Code: code, Message: message, Data: data}}
}

func invalidParams(what string) transport.Response {
	return fail(codeInvalidParams, "invalid params: "+what, nil)
}

// cancelled is the answer of a request whose context ended: the endpoint
// sends nothing for it.
var cancelled = transport.Response{Err: &transport.RPCError{Code: codeCancelled, Message: "request cancelled"}}

// decodeParams reads a request's params into v; false: not an object of
// the shape v wants.
func decodeParams(params json.RawMessage, v any) bool {
	if len(params) == 0 {
		return true
	}
	return json.Unmarshal(params, v) == nil
}

// asked is the answer of a handler that returned input requests: asked of
// the client, unless the client did not declare what they need; then in a
// 2025 session errSession (a tools/call's isError result, else -32602),
// in the 2026-07-28 era -32021 with the capabilities it needs.
func asked(req *transport.Request, reqs mcp.InputRequestMap, state string, errSession func(error) transport.Response) transport.Response {
	if miss := missingCapabilities(reqs, req.ClientCapabilities); miss != nil {
		err := &capabilityError{missing: miss}
		if req.Era == transport.EraModern {
			return fail(codeMissingCapability, err.Error(), err.requiredCapabilities())
		}
		return errSession(err)
	}
	return transport.Response{InputRequests: cloneInputs(reqs), State: state}
}

func errorAsInvalidParams(err error) transport.Response {
	return fail(codeInvalidParams, err.Error(), nil)
}

// callTool serves tools/call: the hot path.
func (b *mcpBackend) callTool(ctx context.Context, req *transport.Request, x Exchange) transport.Response {
	var p struct {
		Name      string
		Arguments json.RawMessage
	}
	// Read without decoding the arguments: they are validated by the
	// tool's schema, and the handler decodes them.
	err := transport.EachMember(req.Params, func(name, value []byte) error {
		switch string(name) {
		case "name":
			return transport.StringValue(value, &p.Name)
		case "arguments":
			p.Arguments = value
		}
		return nil
	})
	if err != nil || p.Name == "" {
		return invalidParams("tools/call needs params.name")
	}
	call := &ToolCall{Caller: req.Caller, Name: p.Name, Arguments: p.Arguments, Exchange: x}
	res, err := b.r.callTool(ctx, call)
	switch {
	case ctx.Err() != nil:
		return cancelled
	case errors.Is(err, ErrUnknownTool):
		return fail(codeInvalidParams, fmt.Sprintf("unknown tool %q", p.Name), nil)
	case err != nil:
		return fail(codeInternal, "tool call failed", nil)
	case len(res.InputRequests) > 0:
		return asked(req, res.InputRequests, res.RequestState, func(err error) transport.Response {
			return transport.Response{Result: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}, IsError: true}}
		})
	}
	return transport.Response{Result: res}
}

// list serves one page of a list: the params' cursor, the page's result.
func (b *mcpBackend) list(req *transport.Request, kind string, page func(p Principal, cursor string) (any, error)) transport.Response {
	var p struct {
		Cursor string `json:"cursor"`
	}
	if !decodeParams(req.Params, &p) {
		return invalidParams("cursor must be a string")
	}
	res, err := page(req.Caller, p.Cursor)
	if err != nil {
		return fail(codeInvalidParams, "invalid cursor: not one a "+kind+" list returned", nil)
	}
	return transport.Response{Result: res}
}

// privateScope marks every list as one that may depend on who asks (the
// 2026-07-28 era's cache scope).
var privateScope = mcp.Cacheable{CacheScope: "private"}

// listTools lists every tool: a tool's refusal is a result with a code
// (SPEC §4.3), not a secret, so the list is the same for everyone.
func (b *mcpBackend) listTools(_ Principal, cursor string) (any, error) {
	items, keys := b.r.tools.snapshot()
	tools, next, err := listPage("t", keys, cursor, b.pageSize, func(k string) (*mcp.Tool, bool) { return items[k].listed, true })
	if err != nil {
		return nil, err
	}
	return &mcp.ListToolsResult{Tools: tools, NextCursor: next, Cacheable: privateScope}, nil
}

// listResources lists the resources p may read.
func (b *mcpBackend) listResources(p Principal, cursor string) (any, error) {
	items, keys := b.r.resources.snapshot()
	res, next, err := listPage("r", keys, cursor, b.pageSize, func(k string) (*mcp.Resource, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, p)
	})
	if err != nil {
		return nil, err
	}
	return &mcp.ListResourcesResult{Resources: res, NextCursor: next, Cacheable: privateScope}, nil
}

// listTemplates lists the resource templates p may read.
func (b *mcpBackend) listTemplates(p Principal, cursor string) (any, error) {
	items, keys := b.r.templates.snapshot()
	res, next, err := listPage("rt", keys, cursor, b.pageSize, func(k string) (*mcp.ResourceTemplate, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, p)
	})
	if err != nil {
		return nil, err
	}
	return &mcp.ListResourceTemplatesResult{ResourceTemplates: res, NextCursor: next, Cacheable: privateScope}, nil
}

// listPrompts lists the prompts p may get.
func (b *mcpBackend) listPrompts(p Principal, cursor string) (any, error) {
	items, keys := b.r.prompts.snapshot()
	res, next, err := listPage("p", keys, cursor, b.pageSize, func(k string) (*mcp.Prompt, bool) {
		return items[k].listed, admits(items[k].Access, items[k].Capability, p)
	})
	if err != nil {
		return nil, err
	}
	return &mcp.ListPromptsResult{Prompts: res, NextCursor: next, Cacheable: privateScope}, nil
}

// resourceNotFound is the answer for a URI nothing the caller may read is
// at: -32002 in a 2025 session, -32602 in the 2026-07-28 era; data.uri
// either way.
func resourceNotFound(era transport.Era, uri string) transport.Response {
	code := codeResourceNotFound
	if era == transport.EraModern {
		code = codeInvalidParams
	}
	return fail(code, "Resource not found", map[string]string{"uri": uri})
}

func (b *mcpBackend) readResource(ctx context.Context, req *transport.Request, x Exchange) transport.Response {
	var p struct {
		URI string `json:"uri"`
	}
	if !decodeParams(req.Params, &p) || p.URI == "" {
		return invalidParams("resources/read needs params.uri")
	}
	res, err := b.r.readResource(ctx, &ResourceRead{Caller: req.Caller, URI: p.URI, Exchange: x})
	switch {
	case ctx.Err() != nil:
		return cancelled
	case errors.Is(err, ErrResourceNotFound):
		return resourceNotFound(req.Era, p.URI)
	case err != nil:
		b.r.cfg.Logger.Error("resource read", "uri", p.URI, "err", err)
		return fail(codeInternal, "resource read failed", nil)
	case len(res.InputRequests) > 0:
		return asked(req, res.InputRequests, res.RequestState, errorAsInvalidParams)
	}
	return transport.Response{Result: res}
}

func (b *mcpBackend) getPrompt(ctx context.Context, req *transport.Request, x Exchange) transport.Response {
	var p struct {
		Name      string            `json:"name"`
		Arguments map[string]string `json:"arguments"`
	}
	if !decodeParams(req.Params, &p) || p.Name == "" {
		return invalidParams("prompts/get needs params.name and string arguments")
	}
	res, err := b.r.getPrompt(ctx, &PromptGet{Caller: req.Caller, Name: p.Name, Arguments: p.Arguments, Exchange: x})
	switch {
	case ctx.Err() != nil:
		return cancelled
	case errors.Is(err, ErrUnknownPrompt):
		return fail(codeInvalidParams, fmt.Sprintf("unknown prompt %q", p.Name), nil)
	case errors.Is(err, ErrInvalidArgument):
		return fail(codeInvalidParams, err.Error(), nil)
	case err != nil:
		b.r.cfg.Logger.Error("prompt get", "prompt", p.Name, "err", err)
		return fail(codeInternal, "prompt get failed", nil)
	case len(res.InputRequests) > 0:
		return asked(req, res.InputRequests, res.RequestState, errorAsInvalidParams)
	}
	return transport.Response{Result: res}
}

func (b *mcpBackend) complete(ctx context.Context, req *transport.Request) transport.Response {
	var p mcp.CompleteParams
	if !decodeParams(req.Params, &p) || p.Ref == nil {
		return invalidParams("completion/complete needs params.ref and params.argument")
	}
	res, err := b.r.Complete(ctx, req.Caller, &p)
	switch {
	case ctx.Err() != nil:
		return cancelled
	case errors.Is(err, ErrUnknownReference):
		return fail(codeInvalidParams, "unknown reference", nil)
	case errors.Is(err, ErrInvalidArgument):
		return fail(codeInvalidParams, err.Error(), nil)
	case err != nil:
		b.r.cfg.Logger.Error("completion", "err", err)
		return fail(codeInternal, "completion failed", nil)
	}
	return transport.Response{Result: res}
}

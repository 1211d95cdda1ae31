package mcpruntime

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Adapters from the official go-sdk's handler types, so that an existing
// go-sdk server's handlers register unchanged (SPEC §5b.23). The
// runtime's own handler types (ToolHandler, ResourceHandler,
// PromptHandler) stay the primary API: they have the Exchange.
//
// What a go-sdk handler gets: its request's Params as go-sdk builds them
// (name and raw arguments, a URI, a prompt's name and arguments) and
// Extra.TokenInfo describing the caller — UserID its namespace, Scopes
// its capabilities, Extra "kind" ("provider" or "client") with "thread"
// and "instance", or "client" and "access". Its Session is nil: a handler
// that asks the client through the session (Elicit, CreateMessage,
// ListRoots), logs or notifies progress through it must move that part to
// the Exchange, which Exchange(ctx) gives it. The handler's ctx is the
// call's.

// exchangeKey is the context key of the Exchange of an adapted handler.
type exchangeKey struct{}

// ExchangeOf returns the Exchange of the call a go-sdk handler adapted
// here serves (progress, logging, the client's answers), or nil outside
// one.
func ExchangeOf(ctx context.Context) *Exchange {
	x, _ := ctx.Value(exchangeKey{}).(*Exchange)
	return x
}

// AddSDKTool registers t with a go-sdk typed handler, as mcp.AddTool
// would: the input schema inferred from In and the output schema from Out
// unless t sets them, the arguments decoded into In, Out as the result's
// structuredContent (and its text when the result has no content), an
// error as an isError result. The access class is t's.
func AddSDKTool[In, Out any](r *Runtime, t Tool, h mcp.ToolHandlerFor[In, Out]) error {
	if h == nil {
		return fmt.Errorf("tool %s: no handler: %w", t.Name, ErrInvalidTool)
	}
	return AddTool(r, t, func(ctx context.Context, call *ToolCall, in In) (*mcp.CallToolResult, Out, error) {
		return h(context.WithValue(ctx, exchangeKey{}, &call.Exchange), sdkToolRequest(call), in)
	})
}

// SDKToolHandler adapts a go-sdk mcp.ToolHandler (raw arguments, no
// schema of its own: set Tool.InputSchema).
func SDKToolHandler(h mcp.ToolHandler) ToolHandler {
	return func(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
		return h(context.WithValue(ctx, exchangeKey{}, &call.Exchange), sdkToolRequest(call))
	}
}

// SDKResourceHandler adapts a go-sdk mcp.ResourceHandler, for a Resource
// or a ResourceTemplate. mcp.ResourceNotFoundError is ErrResourceNotFound.
func SDKResourceHandler(h mcp.ResourceHandler) ResourceHandler {
	return func(ctx context.Context, read *ResourceRead) (*mcp.ReadResourceResult, error) {
		res, err := h(context.WithValue(ctx, exchangeKey{}, &read.Exchange), &mcp.ReadResourceRequest{
			Params: &mcp.ReadResourceParams{URI: read.URI},
			Extra:  &mcp.RequestExtra{TokenInfo: tokenInfo(read.Caller)},
		})
		if rpc, ok := errors.AsType[*jsonrpc.Error](err); ok && rpc.Code == mcp.CodeResourceNotFound {
			return nil, ErrResourceNotFound
		}
		return res, err
	}
}

// SDKPromptHandler adapts a go-sdk mcp.PromptHandler.
func SDKPromptHandler(h mcp.PromptHandler) PromptHandler {
	return func(ctx context.Context, get *PromptGet) (*mcp.GetPromptResult, error) {
		return h(context.WithValue(ctx, exchangeKey{}, &get.Exchange), &mcp.GetPromptRequest{
			Params: &mcp.GetPromptParams{Name: get.Name, Arguments: get.Arguments},
			Extra:  &mcp.RequestExtra{TokenInfo: tokenInfo(get.Caller)},
		})
	}
}

func sdkToolRequest(call *ToolCall) *mcp.CallToolRequest {
	return &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: call.Name, Arguments: call.Arguments},
		Extra:  &mcp.RequestExtra{TokenInfo: tokenInfo(call.Caller)},
	}
}

// tokenInfo describes a caller as go-sdk's auth.TokenInfo does; no token
// or hash is in it.
func tokenInfo(p Principal) *auth.TokenInfo {
	extra := map[string]any{}
	if p.Provider() {
		extra["kind"], extra["thread"], extra["instance"] = "provider", p.Thread, p.Instance
	} else {
		extra["kind"], extra["client"], extra["access"] = "client", p.Client, p.Access
	}
	return &auth.TokenInfo{UserID: p.Namespace, Scopes: append([]string(nil), p.Capabilities...), Extra: extra}
}

package transport

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
)

// Era is the protocol era a request is served in.
type Era uint8

const (
	EraSession Era = iota + 1 // 2025-03-26 … 2025-11-25: an MCP session (Mcp-Session-Id)
	EraModern                 // 2026-07-28: stateless
)

// Request is what every feature call carries besides its own params: who
// calls, in which era and version, what the client declared, and the
// answers and state of the previous round when the backend asked the
// client. The feature methods are the Backend's: tools/list, tools/call,
// resources/list, resources/read, resources/templates/list, prompts/list,
// prompts/get, completion/complete. Everything else (initialize, ping,
// logging/setLevel, resources/subscribe|unsubscribe, notifications,
// responses to the runtime's own asks, server/discover,
// subscriptions/listen) is the endpoint's.
type Request struct {
	Caller          principal.Principal
	Era             Era
	ProtocolVersion string
	// ClientCapabilities: declared at initialize (EraSession) or on this
	// request (EraModern). Never nil.
	ClientCapabilities *mcp.ClientCapabilities
	// InputResponses are the client's answers to the InputRequests of the
	// previous round: only to what it asked, decoded by their method, an
	// accepted form's content validated against the requested schema
	// (EraSession: always; EraModern: when the retry carries its sealed
	// requestState). A modern call without a state may carry answers of
	// its own, decoded by shape only. Nil on a first round without them.
	InputResponses mcp.InputResponseMap
	// State is the RequestState the backend returned with its
	// InputRequests in the previous round ("" on the first); the endpoint
	// carries it (EraSession: in memory; EraModern: sealed in
	// requestState) and never shows it.
	State string
	// Out is this request's channel back to the client.
	Out Output
}

// Output sends what belongs to one request, on that request's own stream.
// Safe for concurrent use; every method is a no-op once the request ended.
type Output interface {
	// Progress sends notifications/progress if the request carried a
	// progress token; else nothing.
	Progress(progress, total float64, message string)
	// Log sends notifications/message if level passes the session's level
	// (logging/setLevel; EraSession) or the request's _meta logLevel
	// (EraModern); else nothing.
	Log(level mcp.LoggingLevel, logger string, data any)
	// CloseStream ends the request's SSE stream now without its response
	// (EraSession, 2025-11-25 resumable streams: the client resumes with
	// GET + Last-Event-ID and gets the rest there). The request goes on.
	CloseStream()
}

// ErrNotServed is what a feature method of a Backend that does not serve
// that feature returns: the endpoint answers -32601, method not found.
var ErrNotServed = errors.New("method not served")

// Backend is what the endpoint serves: one method per MCP feature, each
// run on the request's goroutine, each returning when ctx is done (a
// cancellation: the endpoint sends nothing for it). The endpoint decodes
// the params (dispatch.go); a feature method answers its result or a
// domain error, which the endpoint maps to its JSON-RPC error in one table
// (errors.go, backendErrors): internal/fault's ErrUnknownTool,
// ErrResourceNotFound, ErrUnknownPrompt, ErrUnknownReference,
// ErrInvalidArgument, ErrInvalidCursor, and ErrNotServed; anything else is -32603 with a
// fixed message, the error logged.
//
// A tools/call, resources/read or prompts/get that needs the client first
// (elicitation/create, sampling/createMessage, roots/list) answers a
// result whose InputRequests name what it needs, with a RequestState of
// its own, and nothing else. The endpoint checks the client declared each
// capability (else ErrCapabilityNotDeclared's answer: -32021 with
// data.requiredCapabilities in EraModern; in EraSession an isError result
// for tools/call, -32602 for the others); then in EraSession it asks the
// client on the request's stream and calls the method again with
// Request.InputResponses and Request.State (asks.go, SPEC §5b.18–22), and
// in EraModern it answers resultType "input_required" with the state
// sealed in requestState (SPEC §5a.6).
type Backend interface {
	// Authenticate returns the principal of a bearer token; an error
	// refuses it (401).
	Authenticate(token string) (principal.Principal, error)

	// ListTools, ListResources, ListResourceTemplates and ListPrompts
	// answer one page of their list: cursor is the params' ("" for the
	// first page); one the list did not return is ErrInvalidCursor.
	ListTools(ctx context.Context, req *Request, cursor string) (*mcp.ListToolsResult, error)
	ListResources(ctx context.Context, req *Request, cursor string) (*mcp.ListResourcesResult, error)
	ListResourceTemplates(ctx context.Context, req *Request, cursor string) (*mcp.ListResourceTemplatesResult, error)
	ListPrompts(ctx context.Context, req *Request, cursor string) (*mcp.ListPromptsResult, error)
	// CallTool calls the tool name with its arguments as sent (nil when
	// absent): the tool's schema validates them, not the endpoint.
	CallTool(ctx context.Context, req *Request, name string, arguments json.RawMessage) (*mcp.CallToolResult, error)
	// ReadResource reads the resource at uri.
	ReadResource(ctx context.Context, req *Request, uri string) (*mcp.ReadResourceResult, error)
	// GetPrompt gets the prompt name with its arguments.
	GetPrompt(ctx context.Context, req *Request, name string, arguments map[string]string) (*mcp.GetPromptResult, error)
	// Complete answers completion/complete; params.Ref is not nil.
	Complete(ctx context.Context, req *Request, params *mcp.CompleteParams) (*mcp.CompleteResult, error)

	// Capabilities are the server capabilities answered at initialize
	// (and by server/discover). The value returned is read-only: the
	// endpoint encodes its initialize results once per value (compared by
	// pointer), so return the same one while they stay the same.
	Capabilities() *mcp.ServerCapabilities
	// CanRead reports whether p may read the resource at uri now: the
	// endpoint asks before it accepts resources/subscribe (a refused or
	// unknown URI gets the same answer) and again before it delivers
	// notifications/resources/updated.
	CanRead(p principal.Principal, uri string) bool
}

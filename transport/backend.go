package transport

import (
	"context"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/principal"
)

// Era is the protocol era a request is served in.
type Era uint8

const (
	EraSession Era = iota + 1 // 2025-03-26 … 2025-11-25: an MCP session (Mcp-Session-Id)
	EraModern                 // 2026-07-28: stateless (issue 14)
)

// Request is one feature request handed to the backend: tools/list,
// tools/call, resources/list, resources/read, resources/templates/list,
// prompts/list, prompts/get, completion/complete. Everything else
// (initialize, ping, logging/setLevel, resources/subscribe|unsubscribe,
// notifications, responses to the runtime's own asks, server/discover,
// subscriptions/listen) is the endpoint's.
type Request struct {
	Method          string
	Params          json.RawMessage // the params object as sent ("{}" when absent); _meta included
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
	// State is what the backend returned as Response.State in the previous
	// round ("" on the first); the endpoint carries it (EraSession: in
	// memory; EraModern: sealed in requestState) and never shows it.
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

// Response is the backend's answer. Exactly one of Result, InputRequests,
// Err is set.
type Response struct {
	// Result is the complete result, marshalled as it is (an
	// *mcp.CallToolResult, *mcp.ListToolsResult, *mcp.ReadResourceResult, …).
	Result any
	// InputRequests: the request needs the client first (elicitation/create,
	// sampling/createMessage, roots/list). EraSession: the endpoint checks
	// the client declared each capability (else a tools/call answers an
	// isError result naming what is missing, other methods -32602), sends
	// the requests on the request's stream, waits for the answers and calls
	// Serve again with InputResponses and State (asks.go, SPEC §5b.18–22).
	// EraModern: answered as resultType "input_required" with a sealed
	// requestState (issue 14).
	InputRequests mcp.InputRequestMap
	State         string
	// Err is a JSON-RPC error: an unknown tool (-32602), an unknown or
	// refused resource (-32002 in 2025-11-25; issue 14 maps it), invalid
	// params, an invalid cursor (-32602).
	Err *RPCError
}

// RPCError is a JSON-RPC error the backend answers with.
type RPCError struct {
	Code    int
	Message string
	Data    any // marshalled as it is; nil: none
}

// Backend is what the endpoint serves.
type Backend interface {
	// Authenticate as today.
	Authenticate(token string) (principal.Principal, error)
	// Serve answers one feature request; it runs on the request's goroutine
	// and must return when ctx is done (a cancellation: the endpoint sends
	// nothing for it).
	Serve(ctx context.Context, req *Request) Response
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

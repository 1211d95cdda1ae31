package claude

import "encoding/json"

// The stream-json messages and control requests the driver uses (Claude
// Code 2.1.328; pinned by TestProtocolPinned against the schemas compiled
// into the binary). Every message is one JSON object per line, on Claude
// Code's stdin (the driver's) and stdout (Claude Code's).
const (
	// message types
	typeControlRequest  = "control_request"  // either way: a request, answered by a control_response
	typeControlResponse = "control_response" // either way
	typeControlCancel   = "control_cancel_request"
	typeUser            = "user"      // the driver's prompt; Claude Code's tool results
	typeAssistant       = "assistant" // the model's message: text, tool_use blocks
	typeSystem          = "system"    // init (a turn began), status, errors
	typeResult          = "result"    // the end of a turn

	// control requests the driver sends
	reqInitialize    = "initialize"
	reqMCPStatus     = "mcp_status"
	reqMCPSetServers = "mcp_set_servers"
	reqInterrupt     = "interrupt"

	// control requests Claude Code sends the driver
	reqCanUseTool = "can_use_tool"

	// control_response subtypes
	respSuccess = "success"
	respError   = "error"

	// system subtypes read
	sysInit             = "init"
	sysPermissionDenied = "permission_denied"
	sysAPIRetry         = "api_retry"

	// result subtypes
	resultSuccess = "success"

	// MCP server states in mcp_status and system/init
	mcpConnected = "connected"
	mcpPending   = "pending"
	mcpFailed    = "failed"
	mcpNeedsAuth = "needs-auth"
)

// envelope is the part of every message the driver dispatches on.
type envelope struct {
	Type      string          `json:"type"`
	Subtype   string          `json:"subtype,omitempty"`
	RequestID string          `json:"request_id,omitempty"`
	Request   json.RawMessage `json:"request,omitempty"`
	Response  json.RawMessage `json:"response,omitempty"`
}

// controlRequest is a control_request the driver sends.
type controlRequest struct {
	Type      string `json:"type"` // typeControlRequest
	RequestID string `json:"request_id"`
	Request   any    `json:"request"`
}

// controlResponse is the response member of a control_response.
type controlResponse struct {
	Subtype   string          `json:"subtype"`
	RequestID string          `json:"request_id"`
	Response  json.RawMessage `json:"response,omitempty"`
	Error     string          `json:"error,omitempty"`
}

// controlResponseMsg is a control_response the driver sends.
type controlResponseMsg struct {
	Type     string `json:"type"` // typeControlResponse
	Response struct {
		Subtype   string `json:"subtype"`
		RequestID string `json:"request_id"`
		Response  any    `json:"response,omitempty"`
		Error     string `json:"error,omitempty"`
	} `json:"response"`
}

// subtypeOnly is a control request with no parameters (initialize,
// mcp_status, interrupt).
type subtypeOnly struct {
	Subtype string `json:"subtype"`
}

// setServersRequest replaces the dynamically managed MCP servers: the
// runtime's server is the only one, so the set is it alone.
type setServersRequest struct {
	Subtype string                     `json:"subtype"` // reqMCPSetServers
	Servers map[string]mcpServerConfig `json:"servers"`
}

// mcpServerConfig is an http MCP server's configuration.
type mcpServerConfig struct {
	Type    string            `json:"type"` // "http"
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
}

// setServersResult is mcp_set_servers' answer.
type setServersResult struct {
	Added   []string          `json:"added"`
	Removed []string          `json:"removed"`
	Errors  map[string]string `json:"errors"`
}

// mcpStatusResult is mcp_status' answer. The config echoes the server's
// headers, the token included: it is never logged.
type mcpStatusResult struct {
	MCPServers []mcpServerStatus `json:"mcpServers"`
}

type mcpServerStatus struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Error  string `json:"error,omitempty"`
	Config *struct {
		Headers map[string]string `json:"headers"`
	} `json:"config,omitempty"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools,omitempty"`
}

// permissionDeny answers can_use_tool.
type permissionDeny struct {
	Behavior string `json:"behavior"` // "deny"
	Message  string `json:"message"`
}

// userMessage is a prompt. Its uuid lets an interrupt cancel it while
// it is still queued.
type userMessage struct {
	Type    string `json:"type"` // typeUser
	UUID    string `json:"uuid"`
	Message struct {
		Role    string        `json:"role"` // "user"
		Content []textContent `json:"content"`
	} `json:"message"`
}

type textContent struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// streamMessage is an assistant, user, system or result message, as far
// as the driver reads it.
type streamMessage struct {
	Type    string `json:"type"`
	Subtype string `json:"subtype,omitempty"`
	// assistant and user
	Message *struct {
		Content json.RawMessage `json:"content"` // a string or content blocks
	} `json:"message,omitempty"`
	ParentToolUseID *string `json:"parent_tool_use_id,omitempty"`
	// result
	IsError bool     `json:"is_error,omitempty"`
	Result  string   `json:"result,omitempty"`
	Errors  []string `json:"errors,omitempty"`
}

// block is a content block of an assistant or user message.
type block struct {
	Type      string          `json:"type"` // text, tool_use, tool_result, thinking, …
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`    // tool_use
	Name      string          `json:"name,omitempty"`  // tool_use
	Input     json.RawMessage `json:"input,omitempty"` // tool_use
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   json.RawMessage `json:"content,omitempty"` // tool_result: a string or blocks
	IsError   bool            `json:"is_error,omitempty"`
	ToolName  string          `json:"tool_name,omitempty"` // tool_reference
}

// systemMessage is a system message, as far as the driver reads it.
type systemMessage struct {
	Subtype    string            `json:"subtype"`
	MCPServers []mcpServerStatus `json:"mcp_servers,omitempty"` // init
	ToolName   string            `json:"tool_name,omitempty"`   // permission_denied
	Message    string            `json:"message,omitempty"`     // permission_denied
	Attempt    int               `json:"attempt,omitempty"`     // api_retry
	MaxRetries int               `json:"max_retries,omitempty"` // api_retry
	Error      json.RawMessage   `json:"error,omitempty"`       // api_retry
}

// interruptRequest stops the turn in progress and, with CancelQueued,
// cancels the uuid-stamped prompts Claude Code has not begun yet.
type interruptRequest struct {
	Subtype      string `json:"subtype"` // reqInterrupt
	CancelQueued bool   `json:"cancel_queued"`
}

// interruptResult is interrupt's answer: the prompts it cancelled before
// they began (their uuids), and those it could not reach.
type interruptResult struct {
	StillQueued json.RawMessage `json:"still_queued,omitempty"`
	Cancelled   json.RawMessage `json:"cancelled,omitempty"`
}

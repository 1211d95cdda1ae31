package codex

import (
	"encoding/json"
	"strings"
)

// The app-server methods the driver uses (Codex 0.169.0; pinned by
// TestProtocolPinned against the binary's own schema).
const (
	// client → server requests
	methodInitialize     = "initialize"
	methodThreadStart    = "thread/start"
	methodThreadResume   = "thread/resume"
	methodTurnStart      = "turn/start"
	methodTurnInterrupt  = "turn/interrupt"
	methodMCPStatusList  = "mcpServerStatus/list"
	methodInitializedNtf = "initialized" // client → server notification

	// server → client notifications
	ntfTurnStarted   = "turn/started"
	ntfTurnCompleted = "turn/completed"
	ntfItemStarted   = "item/started"
	ntfItemCompleted = "item/completed"
	ntfError         = "error"
	ntfMCPStartup    = "mcpServer/startupStatus/updated"

	// server → client requests the driver answers (declines or refuses)
	reqCommandApproval    = "item/commandExecution/requestApproval"
	reqFileChangeApproval = "item/fileChange/requestApproval"
	reqPermissions        = "item/permissions/requestApproval"
	reqElicitation        = "mcpServer/elicitation/request"
	reqUserInput          = "item/tool/requestUserInput"
	reqExecApprovalV1     = "execCommandApproval"
	reqPatchApprovalV1    = "applyPatchApproval"
)

// usedMethods lists every method above, by the schema file that declares
// it, for the pinning test.
var usedMethods = map[string][]string{
	"ClientRequest.json":      {methodInitialize, methodThreadStart, methodThreadResume, methodTurnStart, methodTurnInterrupt, methodMCPStatusList},
	"ClientNotification.json": {methodInitializedNtf},
	"ServerNotification.json": {ntfTurnStarted, ntfTurnCompleted, ntfItemStarted, ntfItemCompleted, ntfError, ntfMCPStartup},
	"ServerRequest.json":      {reqCommandApproval, reqFileChangeApproval, reqPermissions, reqElicitation, reqUserInput, reqExecApprovalV1, reqPatchApprovalV1},
}

type clientInfo struct {
	Name    string  `json:"name"`
	Title   *string `json:"title"`
	Version string  `json:"version"`
}

type initializeParams struct {
	ClientInfo   clientInfo `json:"clientInfo"`
	Capabilities any        `json:"capabilities"`
}

type threadStartParams struct {
	Cwd string `json:"cwd,omitempty"`
}

type threadResumeParams struct {
	ThreadID     string `json:"threadId"`
	ExcludeTurns bool   `json:"excludeTurns"`
}

type threadResult struct {
	Thread struct {
		ID string `json:"id"`
	} `json:"thread"`
}

type userInput struct {
	Type         string   `json:"type"` // "text"
	Text         string   `json:"text"`
	TextElements []string `json:"text_elements"`
}

type turnStartParams struct {
	ThreadID string      `json:"threadId"`
	Input    []userInput `json:"input"`
}

type turnInterruptParams struct {
	ThreadID string `json:"threadId"`
	TurnID   string `json:"turnId"`
}

type turnError struct {
	Message           string `json:"message"`
	AdditionalDetails string `json:"additionalDetails"`
}

type turn struct {
	ID     string     `json:"id"`
	Status string     `json:"status"` // completed, interrupted, failed, inProgress
	Error  *turnError `json:"error"`
}

type turnResult struct {
	Turn turn `json:"turn"`
}

// turnNotification is the params of turn/started and turn/completed.
type turnNotification struct {
	ThreadID string `json:"threadId"`
	Turn     turn   `json:"turn"`
}

type mcpStatusListParams struct {
	ThreadID   string `json:"threadId,omitempty"`
	ServerName string `json:"serverName,omitempty"`
	Detail     string `json:"detail,omitempty"` // "full", "toolsAndAuthOnly"
}

// Connection states of mcpServerStatus/list (runtimeStatus).
const (
	runtimeConnected    = "connected"
	runtimeStarting     = "starting"
	runtimeNotStarted   = "notStarted"
	runtimeAuthRequired = "authenticationRequired"
)

type mcpServerStatus struct {
	Name          string                     `json:"name"`
	RuntimeStatus *string                    `json:"runtimeStatus"`
	Tools         map[string]json.RawMessage `json:"tools"`
	ToolsError    *string                    `json:"toolsError"`
}

type mcpStatusListResult struct {
	Data []mcpServerStatus `json:"data"`
}

// mcpStartupNotification is mcpServer/startupStatus/updated.
type mcpStartupNotification struct {
	ThreadID      *string `json:"threadId"`
	Name          string  `json:"name"`
	Status        string  `json:"status"` // starting, ready, failed, cancelled
	Error         *string `json:"error"`
	FailureReason *string `json:"failureReason"` // reauthenticationRequired
}

// itemNotification is item/started and item/completed.
type itemNotification struct {
	ThreadID string     `json:"threadId"`
	TurnID   string     `json:"turnId"`
	Item     threadItem `json:"item"`
}

// threadItem holds the fields of the item kinds the driver reports.
type threadItem struct {
	Type string `json:"type"` // agentMessage, mcpToolCall, commandExecution, …
	ID   string `json:"id"`

	Text string `json:"text"` // agentMessage

	Server    string          `json:"server"` // mcpToolCall
	Tool      string          `json:"tool"`
	Status    string          `json:"status"` // inProgress, completed, failed (, declined: commandExecution)
	Arguments json.RawMessage `json:"arguments"`
	Result    *struct {
		Content           []json.RawMessage `json:"content"`
		StructuredContent json.RawMessage   `json:"structuredContent"`
	} `json:"result"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`

	Command          string  `json:"command"` // commandExecution
	AggregatedOutput *string `json:"aggregatedOutput"`
	ExitCode         *int    `json:"exitCode"`
}

// resultText is the text of an MCP tool result: its text content blocks,
// joined.
func (it *threadItem) resultText() string {
	if it.Result == nil {
		return ""
	}
	var parts []string
	for _, raw := range it.Result.Content {
		var c struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}
		if json.Unmarshal(raw, &c) == nil && c.Type == "text" {
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// errorNotification is the params of "error".
type errorNotification struct {
	Error     turnError `json:"error"`
	WillRetry bool      `json:"willRetry"`
	ThreadID  string    `json:"threadId"`
	TurnID    string    `json:"turnId"`
}

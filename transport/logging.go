package transport

import (
	"encoding/json"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/actors/session"
)

// logLevels are MCP's log levels (RFC 5424 severities), least severe
// first: a level's rank is its index plus one.
var logLevels = [...]mcp.LoggingLevel{"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}

// logRank is the rank of level, 0 for a level MCP does not define.
func logRank(level mcp.LoggingLevel) int32 {
	for i, l := range logLevels {
		if l == level {
			return int32(i + 1)
		}
	}
	return 0
}

// setLevel answers logging/setLevel: the session's level, validated, for
// every later Output.Log of its requests. A server that declares no logging
// capability does not have the method.
func (s *Server) setLevel(w http.ResponseWriter, e *session.Entry, msg *message) {
	if s.backend.Capabilities().Logging == nil {
		s.failFor(w, failMethodNotFound, msg.ID, `method "logging/setLevel" not found`)
		return
	}
	var params struct {
		Level mcp.LoggingLevel `json:"level"`
	}
	rank := int32(0)
	if len(msg.Params) > 0 && json.Unmarshal(msg.Params, &params) == nil {
		rank = logRank(params.Level)
	}
	if rank == 0 {
		s.failFor(w, failInvalidParams, msg.ID, "logging/setLevel needs params.level, one of debug, info, notice, warning, error, critical, alert, emergency")
		return
	}
	e.SetLogLevel(rank)
	writeResult(w, msg.ID, struct{}{})
}

// logParams are the params of notifications/message.
type logParams struct {
	Data   any              `json:"data"`
	Level  mcp.LoggingLevel `json:"level"`
	Logger string           `json:"logger,omitempty"`
}

// Log implements Output: notifications/message on the request's stream if
// level passes the session's level; nothing before the client set one.
func (c *callWriter) Log(level mcp.LoggingLevel, logger string, data any) {
	min := c.e.LogLevel()
	if rank := logRank(level); min == 0 || rank < min {
		return
	}
	c.event(&notification{JSONRPC: "2.0", Method: "notifications/message", Params: logParams{Data: data, Level: level, Logger: logger}})
}

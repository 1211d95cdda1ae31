package claude

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/agenthost/mcpruntime/actors/provider/driver"
)

// maxText bounds an event's Text, in bytes.
const maxText = 4096

// bound cuts s to maxText bytes, on a rune boundary, marking the cut.
func bound(s string) string {
	if len(s) <= maxText {
		return s
	}
	const mark = "…"
	cut := maxText - len(mark)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + mark
}

// received maps one stream-json message of Claude Code's to the
// session's events. It runs on the reading goroutine, so a session's
// events keep Claude Code's order. Messages are never logged whole: an
// mcp_status answer or a tool's result may hold a secret.
func (s *session) received(typ string, line []byte) {
	t := s.currentTurn()
	switch typ {
	case typeSystem:
		var m systemMessage
		if json.Unmarshal(line, &m) != nil {
			return
		}
		s.system(t, m)
	case typeAssistant, typeUser:
		var m streamMessage
		if json.Unmarshal(line, &m) != nil || m.Message == nil {
			return
		}
		for _, b := range blocks(m.Message.Content) {
			if e, ok := s.blockEvent(t, typ, b); ok {
				s.events.Event(e)
			}
		}
	case typeResult:
		var m streamMessage
		if json.Unmarshal(line, &m) != nil || t == nil {
			return
		}
		switch {
		case t.interrupted:
			s.endTurn(t, driver.TurnInterrupted, "")
		case m.IsError || m.Subtype != resultSuccess:
			text := strings.Join(m.Errors, "; ")
			if text == "" {
				text = m.Result
			}
			if text == "" {
				text = m.Subtype
			}
			s.endTurn(t, driver.TurnFailed, bound(text))
		default:
			s.endTurn(t, driver.TurnCompleted, "")
		}
	default:
		s.logger.Debug("claude message", "type", typ)
	}
}

// system maps a system message: init (a turn began; the MCP servers'
// states), a permission denial, a model API retry.
func (s *session) system(t *turnState, m systemMessage) {
	turn := ""
	if t != nil {
		turn = t.id
	}
	switch m.Subtype {
	case sysInit:
		for _, st := range m.MCPServers {
			if st.Name == s.d.cfg.ServerName {
				s.status(serverStatus(s.thread, st))
			}
		}
		if t != nil {
			s.mu.Lock()
			first := !t.started
			t.started = true
			s.mu.Unlock()
			if first {
				s.events.Event(driver.Event{Thread: s.thread, Turn: turn, Kind: driver.EventTurnStarted})
			}
		}
	case sysPermissionDenied:
		s.events.Event(driver.Event{Thread: s.thread, Turn: turn, Kind: driver.EventError, Tool: m.ToolName,
			Text: bound("permission denied: " + m.Message)})
	case sysAPIRetry:
		s.events.Event(driver.Event{Thread: s.thread, Turn: turn, Kind: driver.EventError,
			Text: bound(fmt.Sprintf("model API error %s (attempt %d of %d; Claude Code retries)", errorText(m.Error), m.Attempt, m.MaxRetries))})
	default:
		s.logger.Debug("claude system message", "subtype", m.Subtype)
	}
}

// serverStatus maps Claude Code's state of an MCP server to a
// driver.Status. Claude Code reports a 401 as failed ("Server rejected the
// configured Authorization header (HTTP 401)…"): that is needs_auth.
func serverStatus(thread string, st mcpServerStatus) driver.Status {
	out := driver.Status{Thread: thread}
	switch st.Status {
	case mcpConnected:
		out.State = driver.StatusConnected
	case mcpPending:
		out.State = driver.StatusPending
	case mcpNeedsAuth:
		out.State, out.Detail = driver.StatusNeedsAuth, bound(st.Error)
	default:
		out.State, out.Detail = driver.StatusFailed, bound(st.Error)
		if strings.Contains(st.Error, "HTTP 401") {
			out.State = driver.StatusNeedsAuth
		}
		if out.Detail == "" {
			out.Detail = st.Status
		}
	}
	return out
}

// blockEvent maps a content block: the model's text → message, its
// tool_use → tool_call, a tool_result in a user message → tool_result.
// Thinking and other blocks are not reported.
func (s *session) blockEvent(t *turnState, typ string, b block) (driver.Event, bool) {
	e := driver.Event{Thread: s.thread}
	if t != nil {
		e.Turn = t.id
	}
	switch {
	case typ == typeAssistant && b.Type == "text" && b.Text != "":
		e.Kind, e.Text = driver.EventMessage, bound(b.Text)
	case typ == typeAssistant && b.Type == "tool_use":
		e.Kind, e.Tool, e.Data = driver.EventToolCall, b.Name, jsonObject(b.Input)
		if t != nil {
			s.mu.Lock()
			t.tools[b.ID] = b.Name
			s.mu.Unlock()
		}
	case typ == typeUser && b.Type == "tool_result":
		e.Kind, e.Error, e.Text = driver.EventToolResult, b.IsError, bound(contentText(b.Content))
		if t != nil {
			s.mu.Lock()
			e.Tool = t.tools[b.ToolUseID]
			s.mu.Unlock()
		}
		// A call the endpoint refused the credential for: Claude Code's
		// state of the server may not change, this is the sign of a
		// revoked token.
		if e.Error && strings.HasPrefix(e.Tool, "mcp__"+s.d.cfg.ServerName+"__") && authFailure(e.Text) {
			s.status(driver.Status{Thread: s.thread, State: driver.StatusNeedsAuth, Detail: e.Text})
		}
	default:
		return e, false
	}
	return e, true
}

// authFailure reports whether a tool result's text is the endpoint's
// refusal of the credential, in Claude Code's words (2.1.328: `MCP server
// "<name>" rejected the Authorization header in its config (update it,
// then run /mcp to reconnect)`).
func authFailure(text string) bool {
	for _, w := range []string{"rejected the Authorization header", "HTTP 401", "Authentication required"} {
		if strings.Contains(text, w) {
			return true
		}
	}
	return false
}

// blocks decodes message content: content blocks, or a plain string as
// one text block.
func blocks(raw json.RawMessage) []block {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil
		}
		return []block{{Type: "text", Text: s}}
	}
	var bs []block
	if json.Unmarshal(raw, &bs) != nil {
		return nil
	}
	return bs
}

// contentText is the text of a tool result's content (a string, or text
// blocks joined by newlines; a ToolSearch result names the tools it
// loaded).
func contentText(raw json.RawMessage) string {
	var parts []string
	for _, b := range blocks(raw) {
		switch b.Type {
		case "text":
			parts = append(parts, b.Text)
		case "tool_reference":
			parts = append(parts, "loaded "+b.ToolName)
		}
	}
	return strings.Join(parts, "\n")
}

// errorText is a JSON error value as text: a string, or an object's
// message.
func errorText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var o struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	}
	if json.Unmarshal(raw, &o) == nil && (o.Message != "" || o.Type != "") {
		return strings.TrimSpace(o.Type + " " + o.Message)
	}
	return string(raw)
}

// jsonObject returns raw if it is a JSON object, else nil.
func jsonObject(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return nil
	}
	return raw
}

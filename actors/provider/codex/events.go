package codex

import (
	"bytes"
	"encoding/json"
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

// notified maps one app-server notification to the session's events. It
// runs on a's reading goroutine, so a session's events keep Codex's order.
func (s *session) notified(a *agent, method string, params json.RawMessage) {
	switch method {
	case ntfMCPStartup:
		var n mcpStartupNotification
		if json.Unmarshal(params, &n) != nil || n.Name != s.d.cfg.ServerName {
			return
		}
		select {
		case a.startup <- struct{}{}:
		default:
		}
		s.events.Status(startupStatus(s.thread, n))
	case ntfTurnStarted:
		var n turnNotification
		if json.Unmarshal(params, &n) != nil {
			return
		}
		if t := s.turnFor(n.Turn.ID); t != nil && t.id != "" {
			s.events.Event(driver.Event{Thread: s.thread, Turn: t.id, Kind: driver.EventTurnStarted})
		}
	case ntfTurnCompleted:
		var n turnNotification
		if json.Unmarshal(params, &n) != nil {
			return
		}
		t := s.turnFor(n.Turn.ID)
		if t == nil {
			return
		}
		outcome, errText := driver.TurnCompleted, ""
		switch n.Turn.Status {
		case "interrupted":
			outcome = driver.TurnInterrupted
		case "failed":
			outcome = driver.TurnFailed
		}
		if n.Turn.Error != nil {
			errText = bound(n.Turn.Error.Message)
		}
		s.endTurn(t, outcome, errText)
	case ntfItemStarted, ntfItemCompleted:
		var n itemNotification
		if json.Unmarshal(params, &n) != nil {
			return
		}
		if e, ok := itemEvent(method == ntfItemCompleted, n.Item); ok {
			e.Thread = s.thread
			if t := s.turnFor(n.TurnID); t != nil {
				e.Turn = t.id
			}
			s.events.Event(e)
			// A call the endpoint refused the credential for is Codex's only
			// sign of a revoked token: its MCP startup state stays ready.
			if e.Kind == driver.EventToolResult && e.Error && n.Item.Server == s.d.cfg.ServerName &&
				strings.Contains(e.Text, "Authentication required") {
				s.events.Status(driver.Status{Thread: s.thread, State: driver.StatusNeedsAuth, Detail: e.Text})
			}
		}
	case ntfError:
		var n errorNotification
		if json.Unmarshal(params, &n) != nil {
			return
		}
		text := n.Error.Message
		if n.WillRetry {
			text += " (Codex retries)"
		}
		e := driver.Event{Thread: s.thread, Kind: driver.EventError, Text: bound(text)}
		if t := s.turnFor(n.TurnID); t != nil {
			e.Turn = t.id
		}
		s.events.Event(e)
	default:
		s.logger.Debug("codex notification", "method", method)
	}
}

// startupStatus maps Codex's MCP startup state to a driver.Status.
func startupStatus(thread string, n mcpStartupNotification) driver.Status {
	st := driver.Status{Thread: thread}
	detail := ""
	if n.Error != nil {
		detail = bound(*n.Error)
	}
	switch n.Status {
	case "starting":
		st.State = driver.StatusPending
	case "ready":
		st.State = driver.StatusConnected
	default: // failed, cancelled
		st.State, st.Detail = driver.StatusFailed, detail
		if n.Status != "failed" && detail == "" {
			st.Detail = n.Status
		}
		// Codex says "not logged in" for a 401 of a bearer-token server
		// (the failure reason is set only for OAuth servers).
		if n.FailureReason != nil && *n.FailureReason == "reauthenticationRequired" ||
			strings.Contains(detail, "not logged in") || strings.Contains(detail, "Auth required") {
			st.State = driver.StatusNeedsAuth
		}
	}
	return st
}

// itemEvent maps a thread item Codex started or completed to an event: an
// agent message once complete, an MCP tool call and its result, a shell
// command and its output. Other items (the user's message, reasoning,
// file changes, …) are not reported.
func itemEvent(completed bool, it threadItem) (driver.Event, bool) {
	switch {
	case it.Type == "agentMessage" && completed:
		return driver.Event{Kind: driver.EventMessage, Text: bound(it.Text)}, true
	case it.Type == "mcpToolCall" && !completed:
		return driver.Event{Kind: driver.EventToolCall, Tool: mcpToolName(it), Data: jsonObject(it.Arguments)}, true
	case it.Type == "mcpToolCall":
		e := driver.Event{Kind: driver.EventToolResult, Tool: mcpToolName(it), Error: it.Status == "failed"}
		switch {
		case it.Error != nil:
			e.Text, e.Error = it.Error.Message, true
		case it.Result != nil:
			e.Text = it.resultText()
		}
		e.Text = bound(e.Text)
		return e, true
	case it.Type == "commandExecution" && !completed:
		data, _ := json.Marshal(map[string]string{"command": it.Command})
		return driver.Event{Kind: driver.EventToolCall, Tool: "shell", Data: data}, true
	case it.Type == "commandExecution":
		e := driver.Event{Kind: driver.EventToolResult, Tool: "shell", Error: it.Status != "completed" || it.ExitCode != nil && *it.ExitCode != 0}
		if it.AggregatedOutput != nil {
			e.Text = bound(*it.AggregatedOutput)
		}
		return e, true
	}
	return driver.Event{}, false
}

// mcpToolName is the name Codex gives an MCP tool in its config and
// approvals: mcp__<server>__<tool>.
func mcpToolName(it threadItem) string { return "mcp__" + it.Server + "__" + it.Tool }

// jsonObject returns raw if it is a JSON object, else nil.
func jsonObject(raw json.RawMessage) json.RawMessage {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' || !json.Valid(raw) {
		return nil
	}
	return raw
}

// requested answers a request of the app-server's. Nobody is there to
// approve or answer: approvals and elicitations are declined, the rest
// refused. (approval_policy "never" keeps approvals from being asked.)
func (s *session) requested(method string, params json.RawMessage) (any, *rpcError) {
	s.logger.Info("codex asked the driver; declined", "method", method)
	switch method {
	case reqCommandApproval, reqFileChangeApproval:
		return map[string]string{"decision": "decline"}, nil
	case reqElicitation:
		return map[string]any{"action": "decline", "content": nil, "_meta": nil}, nil
	case reqUserInput:
		return map[string]any{"answers": map[string]any{}}, nil
	}
	return nil, &rpcError{Code: -32601, Message: "the mcpruntime codex driver does not answer " + method}
}

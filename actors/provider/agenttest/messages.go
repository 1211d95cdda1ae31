package agenttest

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Anthropic Messages (POST /v1/messages), as Claude Code speaks it.

// messagesRequest is the part of a Messages request the model reads.
type messagesRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role    string          `json:"role"`    // "user", "assistant", and "system" (Claude Code's list of deferred tools)
		Content json.RawMessage `json:"content"` // a string or blocks
	} `json:"messages"`
	Tools []struct {
		Name string `json:"name"`
	} `json:"tools"`
}

// messagesBlock is a content block: text, tool_use or tool_result.
type messagesBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text"`
	ID        string          `json:"id"`   // tool_use
	Name      string          `json:"name"` // tool_use
	ToolUseID string          `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"` // tool_result: a string or blocks
}

// parseMessages reads a Messages request: the prompt is the last user
// text (reminders skipped), the result is a tool_result no answer and no
// prompt follows (a message of reminders alone may), the deferred tools
// are the names in the text that mentions ToolSearch.
func parseMessages(body []byte) (conversation, bool, error) {
	var req messagesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return conversation{}, false, err
	}
	c := conversation{model: req.Model}
	for _, t := range req.Tools {
		c.tools = append(c.tools, tool{name: t.Name})
	}
	names := map[string]string{} // tool_use id → tool name
	for i, msg := range req.Messages {
		var blocks []messagesBlock
		var s string
		if json.Unmarshal(msg.Content, &s) == nil {
			blocks = []messagesBlock{{Type: "text", Text: s}}
		} else if err := json.Unmarshal(msg.Content, &blocks); err != nil {
			return conversation{}, false, fmt.Errorf("message %d: %w", i, err)
		}
		var result *toolResult
		for _, b := range blocks {
			switch b.Type {
			case "text":
				if strings.Contains(b.Text, toolSearch) {
					c.deferred = append(c.deferred, identifiers(b.Text)...)
				}
			case "tool_use":
				names[b.ID] = b.Name
			case "tool_result":
				result = &toolResult{callID: b.ToolUseID, name: names[b.ToolUseID], text: joinText(b.Content)}
			}
		}
		switch msg.Role {
		case "assistant":
			c.result = nil // answered
		case "user":
			if result != nil {
				c.result = result
			} else if t := lastText(msg.Content); t != "" {
				c.prompt, c.result = t, nil
			}
		}
	}
	return c, req.Stream, nil
}

// identifiers are the words of s that could be tool names.
func identifiers(s string) []string {
	var out []string
	for _, w := range strings.FieldsFunc(s, func(r rune) bool {
		return !(r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9')
	}) {
		out = append(out, w)
	}
	return out
}

// messages writes a in the Messages format.
func (r *reply) messages(a answer) {
	id := "msg_" + randomID()
	usage := obj{"input_tokens": 1, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if r.stream {
		r.start()
		r.msgEvent("message_start", obj{"message": obj{"id": id, "type": "message", "role": "assistant", "model": r.modelName(),
			"content": []any{}, "stop_reason": nil, "stop_sequence": nil, "usage": usage}})
		r.msgEvent("ping", obj{})
	}
	if !r.hold() {
		return
	}
	block, stop := obj{"type": "text", "text": a.text}, "end_turn"
	if a.call != nil {
		var input any
		_ = json.Unmarshal([]byte(a.call.args), &input) // decide made args a JSON object
		block, stop = obj{"type": "tool_use", "id": "toolu_" + a.call.id, "name": a.call.name, "input": input}, "tool_use"
	}
	if !r.stream {
		r.json(obj{"id": id, "type": "message", "role": "assistant", "model": r.modelName(), "content": []any{block},
			"stop_reason": stop, "stop_sequence": nil, "usage": usage})
		return
	}
	if a.call != nil {
		r.msgEvent("content_block_start", obj{"index": 0, "content_block": obj{"type": "tool_use", "id": block["id"], "name": a.call.name, "input": obj{}}})
		r.msgEvent("content_block_delta", obj{"index": 0, "delta": obj{"type": "input_json_delta", "partial_json": a.call.args}})
	} else {
		r.msgEvent("content_block_start", obj{"index": 0, "content_block": obj{"type": "text", "text": ""}})
		r.msgEvent("content_block_delta", obj{"index": 0, "delta": obj{"type": "text_delta", "text": a.text}})
	}
	r.msgEvent("content_block_stop", obj{"index": 0})
	r.msgEvent("message_delta", obj{"delta": obj{"stop_reason": stop, "stop_sequence": nil}, "usage": obj{"output_tokens": 1}})
	r.msgEvent("message_stop", obj{})
}

// msgEvent writes a Messages event: its type both as the event name and
// in the data.
func (r *reply) msgEvent(typ string, data obj) {
	data["type"] = typ
	r.event(typ, data)
}

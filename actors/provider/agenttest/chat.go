package agenttest

import (
	"encoding/json"
	"strings"
)

// OpenAI Chat Completions (POST /v1/chat/completions), as OpenCode speaks
// it through @ai-sdk/openai-compatible.

// titlePrompt begins the system prompt of OpenCode's title-generation
// request.
const titlePrompt = "You are a title generator"

// chatRequest is the part of a Chat Completions request the model reads.
type chatRequest struct {
	Model    string `json:"model"`
	Stream   bool   `json:"stream"`
	Messages []struct {
		Role       string          `json:"role"`    // "system", "user", "assistant", "tool"
		Content    json.RawMessage `json:"content"` // a string, parts or null
		ToolCallID string          `json:"tool_call_id"`
		ToolCalls  []struct {
			ID       string `json:"id"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tool_calls"`
	} `json:"messages"`
	Tools []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tools"`
}

// parseChat reads a Chat Completions request: the prompt is the last user
// message, unquoted (opencode run sends "hello" with its double quotes),
// the result is a tool message no answer and no prompt follows.
func parseChat(body []byte) (conversation, bool, error) {
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return conversation{}, false, err
	}
	c := conversation{model: req.Model}
	for _, t := range req.Tools {
		c.tools = append(c.tools, tool{name: t.Function.Name})
	}
	names := map[string]string{} // tool call id → tool name
	for _, msg := range req.Messages {
		switch msg.Role {
		case "system":
			for _, p := range parts(msg.Content) {
				if strings.HasPrefix(strings.TrimSpace(p.Text), titlePrompt) {
					c.title = true
				}
			}
		case "user":
			if t := lastText(msg.Content); t != "" {
				c.prompt, c.result = unquote(t), nil
			}
		case "assistant":
			c.result = nil // answered
			for _, tc := range msg.ToolCalls {
				names[tc.ID] = tc.Function.Name
			}
		case "tool":
			c.result = &toolResult{callID: msg.ToolCallID, name: names[msg.ToolCallID], text: joinText(msg.Content)}
		}
	}
	return c, req.Stream, nil
}

// unquote undoes the quoting of a prompt in double quotes: opencode run
// sends its message as a JSON string literal ("call t {\"a\":1}"), so it is
// decoded as one; a quoted text that is not valid JSON loses its quotes.
func unquote(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var u string
	if json.Unmarshal([]byte(s), &u) == nil {
		return strings.TrimSpace(u)
	}
	return strings.TrimSpace(s[1 : len(s)-1])
}

// chat writes a in the Chat Completions format.
func (r *reply) chat(a answer) {
	id := "chatcmpl-" + randomID()
	created := now()
	chunk := func(choices []any) obj {
		return obj{"id": id, "object": "chat.completion.chunk", "created": created, "model": r.modelName(), "choices": choices}
	}
	if r.stream {
		r.start()
		r.event("", chunk([]any{obj{"index": 0, "delta": obj{"role": "assistant", "content": ""}, "finish_reason": nil}}))
	}
	if !r.hold() {
		return
	}
	usage := obj{"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
	finish := "stop"
	var calls []any
	if a.call != nil {
		finish = "tool_calls"
		calls = []any{obj{"index": 0, "id": "call_" + a.call.id, "type": "function", "function": obj{"name": a.call.name, "arguments": a.call.args}}}
	}
	if !r.stream {
		msg := obj{"role": "assistant", "content": a.text}
		if calls != nil {
			msg["content"] = nil
			msg["tool_calls"] = calls
		}
		r.json(obj{"id": id, "object": "chat.completion", "created": created, "model": r.modelName(),
			"choices": []any{obj{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	if calls != nil {
		r.event("", chunk([]any{obj{"index": 0, "delta": obj{"tool_calls": calls}, "finish_reason": nil}}))
	} else {
		r.event("", chunk([]any{obj{"index": 0, "delta": obj{"content": a.text}, "finish_reason": nil}}))
	}
	r.event("", chunk([]any{obj{"index": 0, "delta": obj{}, "finish_reason": finish}}))
	u := chunk([]any{})
	u["usage"] = usage
	r.event("", u)
	_, _ = r.w.Write([]byte("data: [DONE]\n\n"))
	r.flush()
}

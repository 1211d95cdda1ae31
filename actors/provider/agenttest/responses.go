package agenttest

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// OpenAI Responses (POST /v1/responses), as Codex speaks it.

// responsesRequest is the part of a Responses request the model reads.
type responsesRequest struct {
	Model  string          `json:"model"`
	Stream bool            `json:"stream"`
	Input  json.RawMessage `json:"input"` // a string, or a list of items
	Tools  []responsesTool `json:"tools"`
}

type responsesTool struct {
	Type  string          `json:"type"` // "function", "namespace", "web_search", …
	Name  string          `json:"name"`
	Tools []responsesTool `json:"tools"` // a namespace's functions
}

type responsesItem struct {
	Type      string          `json:"type"` // "message" (or empty, with a role), "function_call", "function_call_output", "reasoning", …
	Role      string          `json:"role"`
	Content   json.RawMessage `json:"content"` // a string or content parts
	CallID    string          `json:"call_id"`
	Name      string          `json:"name"`
	Namespace string          `json:"namespace"`
	Output    json.RawMessage `json:"output"` // a string or content parts
}

// parseResponses reads a Responses request: the prompt is the last user
// message (Codex sends its environment context as an earlier one), the
// result is a function_call_output no answer and no prompt follows.
func parseResponses(body []byte) (conversation, bool, error) {
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return conversation{}, false, err
	}
	c := conversation{model: req.Model}
	for _, t := range req.Tools {
		switch t.Type {
		case "namespace":
			for _, f := range t.Tools {
				c.tools = append(c.tools, tool{namespace: t.Name, name: f.Name})
			}
		case "function", "custom", "":
			if t.Name != "" {
				c.tools = append(c.tools, tool{name: t.Name})
			}
		}
	}
	var s string
	if json.Unmarshal(req.Input, &s) == nil {
		c.prompt = s
		return c, req.Stream, nil
	}
	var items []responsesItem
	if len(req.Input) > 0 {
		if err := json.Unmarshal(req.Input, &items); err != nil {
			return conversation{}, false, fmt.Errorf("input: %w", err)
		}
	}
	names := map[string]string{} // call id → the called tool's name
	for _, it := range items {
		switch {
		case it.Type == "function_call":
			names[it.CallID] = tool{namespace: it.Namespace, name: it.Name}.full()
		case it.Type == "function_call_output":
			c.result = &toolResult{callID: it.CallID, name: names[it.CallID], text: stripWallTime(joinText(it.Output))}
		case (it.Type == "message" || it.Type == "") && it.Role == "assistant":
			c.result = nil // answered
		case (it.Type == "message" || it.Type == "") && it.Role == "user":
			if t := lastText(it.Content); t != "" {
				c.prompt, c.result = t, nil
			}
		}
	}
	return c, req.Stream, nil
}

// stripWallTime drops the header Codex puts before a tool's output: an
// MCP tool's "Wall time: 0.0074 seconds\nOutput:\n", exec_command's
// "Chunk ID: …\nWall time: …\nProcess exited with code 0\nOriginal token
// count: 5\nOutput:\n". Text whose lines before "Output:" are not all such
// header lines is kept whole.
func stripWallTime(s string) string {
	head, rest, ok := strings.Cut(s, "\nOutput:\n")
	if !ok {
		return s
	}
	for line := range strings.SplitSeq(head, "\n") {
		if !slices.ContainsFunc(wallTimeHeaders, func(p string) bool { return strings.HasPrefix(line, p) }) {
			return s
		}
	}
	return rest
}

// wallTimeHeaders begin the lines of Codex's header before a tool's output.
var wallTimeHeaders = []string{"Wall time: ", "Chunk ID: ", "Process exited with code ", "Process running with session ID ",
	"Original token count: ", "Exit code: ", "Total output lines: "}

// responses writes a in the Responses format.
func (r *reply) responses(a answer) {
	id := "resp_" + randomID()
	resp := obj{"id": id, "object": "response", "created_at": now(), "model": r.modelName(), "status": "in_progress", "output": []any{}}
	if r.stream {
		r.start()
		r.respEvent("response.created", obj{"response": resp})
		r.respEvent("response.in_progress", obj{"response": resp})
	}
	if !r.hold() {
		return
	}
	var item obj
	if a.call != nil {
		item = obj{"type": "function_call", "id": "fc_" + a.call.id, "call_id": "call_" + a.call.id, "name": a.call.name, "arguments": a.call.args, "status": "completed"}
		if a.call.namespace != "" {
			item["namespace"] = a.call.namespace
		}
	} else {
		item = obj{"type": "message", "id": "msg_" + randomID(), "role": "assistant", "status": "completed",
			"content": []any{obj{"type": "output_text", "text": a.text, "annotations": []any{}}}}
	}
	usage := obj{"input_tokens": 1, "input_tokens_details": obj{"cached_tokens": 0}, "output_tokens": 1,
		"output_tokens_details": obj{"reasoning_tokens": 0}, "total_tokens": 2}
	done := obj{"id": id, "object": "response", "created_at": now(), "model": r.modelName(), "status": "completed",
		"output": []any{item}, "usage": usage}
	if !r.stream {
		r.json(done)
		return
	}
	added := clone(item)
	added["status"] = "in_progress"
	if a.call != nil {
		added["arguments"] = ""
		r.respEvent("response.output_item.added", obj{"output_index": 0, "item": added})
		r.respEvent("response.function_call_arguments.delta", obj{"item_id": item["id"], "output_index": 0, "delta": a.call.args})
		r.respEvent("response.function_call_arguments.done", obj{"item_id": item["id"], "output_index": 0, "arguments": a.call.args})
	} else {
		added["content"] = []any{}
		part := obj{"type": "output_text", "text": "", "annotations": []any{}}
		r.respEvent("response.output_item.added", obj{"output_index": 0, "item": added})
		r.respEvent("response.content_part.added", obj{"item_id": item["id"], "output_index": 0, "content_index": 0, "part": part})
		r.respEvent("response.output_text.delta", obj{"item_id": item["id"], "output_index": 0, "content_index": 0, "delta": a.text})
		r.respEvent("response.output_text.done", obj{"item_id": item["id"], "output_index": 0, "content_index": 0, "text": a.text})
		part = clone(part)
		part["text"] = a.text
		r.respEvent("response.content_part.done", obj{"item_id": item["id"], "output_index": 0, "content_index": 0, "part": part})
	}
	r.respEvent("response.output_item.done", obj{"output_index": 0, "item": item})
	r.respEvent("response.completed", obj{"response": done})
}

// respEvent writes a Responses event: its type both as the event name and
// in the data, with a sequence number.
func (r *reply) respEvent(typ string, data obj) {
	data["type"] = typ
	data["sequence_number"] = r.seq
	r.seq++
	r.event(typ, data)
}

func clone(o obj) obj {
	c := make(obj, len(o))
	for k, v := range o {
		c[k] = v
	}
	return c
}

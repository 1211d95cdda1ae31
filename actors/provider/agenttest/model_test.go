package agenttest_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
)

// out is what an answer said, in any format: a text, or a call.
type out struct {
	Text      string
	Namespace string // Responses only
	Name      string
	ID        string
	Args      map[string]any
	Stop      string // Messages' stop_reason, Chat's finish_reason
}

// --- OpenAI Responses (Codex) ---

// readResponses checks a Responses stream's shape and returns what it said.
func readResponses(t *testing.T, evs []sse) out {
	t.Helper()
	want := []string{"response.created", "response.in_progress", "response.output_item.added"}
	if got := names(evs); len(got) < 5 || !slices.Equal(got[:3], want) || got[len(got)-1] != "response.completed" || got[len(got)-2] != "response.output_item.done" {
		t.Fatalf("stream events %v, want %v … response.output_item.done, response.completed", got, want)
	}
	var o out
	for i, e := range evs {
		d := decode(t, e)
		if d["type"] != e.Event {
			t.Errorf("event %s has type %v", e.Event, d["type"])
		}
		if d["sequence_number"] != float64(i) {
			t.Errorf("event %d (%s) has sequence_number %v", i, e.Event, d["sequence_number"])
		}
		switch e.Event {
		case "response.output_text.delta":
			o.Text += d["delta"].(string)
		case "response.output_item.done":
			item := d["item"].(map[string]any)
			switch item["type"] {
			case "function_call":
				o.Name, _ = item["name"].(string)
				o.Namespace, _ = item["namespace"].(string)
				o.ID, _ = item["call_id"].(string)
				if err := json.Unmarshal([]byte(item["arguments"].(string)), &o.Args); err != nil {
					t.Errorf("arguments %v: %v", item["arguments"], err)
				}
			case "message":
				text := item["content"].([]any)[0].(map[string]any)["text"]
				if text != o.Text {
					t.Errorf("message item text %q, deltas %q", text, o.Text)
				}
			default:
				t.Errorf("item type %v", item["type"])
			}
		case "response.completed":
			resp := d["response"].(map[string]any)
			if resp["status"] != "completed" || resp["id"] == "" || resp["usage"] == nil {
				t.Errorf("response.completed response %v", resp)
			}
		}
	}
	return o
}

// codexTools is the tools list Codex sends: built-in functions and the
// MCP server's namespace.
var codexTools = []any{
	map[string]any{"type": "function", "name": "exec_command"},
	map[string]any{"type": "web_search"},
	map[string]any{"type": "namespace", "name": "mcp__rt", "description": "Tools in the mcp__rt namespace.", "tools": []any{
		map[string]any{"type": "function", "name": "thread_list"},
		map[string]any{"type": "function", "name": "thread_post"},
	}},
}

func userMsg(text string) map[string]any {
	return map[string]any{"type": "message", "role": "user", "content": []any{map[string]any{"type": "input_text", "text": text}}}
}

// TestResponsesText: the prompt is the last user message (the environment
// context before it is not), answered "ok: <prompt>" in a well-formed
// stream; the request is recorded.
func TestResponsesText(t *testing.T) {
	m := agenttest.NewModel(t)
	body := map[string]any{"model": "fake-model", "stream": true, "tools": codexTools, "input": []any{
		map[string]any{"type": "message", "role": "developer", "content": []any{map[string]any{"type": "input_text", "text": "base instructions"}}},
		userMsg("<environment_context>cwd</environment_context>"),
		userMsg("hello"),
	}}
	resp, evs, _ := post(t, context.Background(), m.URL+"/v1/responses", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	if got := readResponses(t, evs); got.Text != "ok: hello" || got.Name != "" {
		t.Errorf("answer %+v, want the text \"ok: hello\"", got)
	}
	reqs := m.Requests()
	if len(reqs) != 1 || reqs[0].Format != agenttest.FormatResponses || reqs[0].Path != "/v1/responses" || !json.Valid(reqs[0].Body) {
		t.Errorf("requests %+v, want one responses request", reqs)
	}
}

// TestResponsesToolLoop: "call thread_post {…}" calls the namespaced MCP
// tool; its function_call_output (Codex's "Wall time" header stripped) is
// recorded once and answered "saw: <result>".
func TestResponsesToolLoop(t *testing.T) {
	m := agenttest.NewModel(t)
	input := []any{userMsg("<environment_context/>"), userMsg(`call thread_post {"text":"hi"}`)}
	_, evs, _ := post(t, context.Background(), m.URL+"/v1/responses", map[string]any{"stream": true, "tools": codexTools, "input": input})
	c := readResponses(t, evs)
	if c.Namespace != "mcp__rt" || c.Name != "thread_post" || c.ID == "" || !cmp.Equal(c.Args, map[string]any{"text": "hi"}) {
		t.Fatalf("answer %+v, want a call of mcp__rt thread_post {text: hi}", c)
	}
	input = append(input,
		map[string]any{"type": "function_call", "namespace": "mcp__rt", "name": "thread_post", "call_id": c.ID, "arguments": `{"text":"hi"}`},
		map[string]any{"type": "function_call_output", "call_id": c.ID, "output": "Wall time: 0.0074 seconds\nOutput:\n{\"id\":\"m1\"}"})
	for range 2 { // a retried request is the same result
		_, evs, _ = post(t, context.Background(), m.URL+"/v1/responses", map[string]any{"stream": true, "tools": codexTools, "input": input})
		if got := readResponses(t, evs); got.Text != `saw: {"id":"m1"}` {
			t.Errorf("answer %+v, want the text saw: {\"id\":\"m1\"}", got)
		}
	}
	if diff := cmp.Diff([]string{`{"id":"m1"}`}, m.ToolResults()); diff != "" {
		t.Errorf("ToolResults (-want +got):\n%s", diff)
	}
	// The next turn reads its own prompt, not the earlier call.
	input = append(input, map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": `saw: {"id":"m1"}`}}}, userMsg("again"))
	_, evs, _ = post(t, context.Background(), m.URL+"/v1/responses", map[string]any{"stream": true, "tools": codexTools, "input": input})
	if got := readResponses(t, evs); got.Text != "ok: again" {
		t.Errorf("next turn's answer %+v, want ok: again", got)
	}
}

// --- Anthropic Messages (Claude Code) ---

// readMessages checks a Messages stream's shape and returns what it said.
func readMessages(t *testing.T, evs []sse) out {
	t.Helper()
	got := names(evs)
	if len(got) < 5 || got[0] != "message_start" || got[len(got)-1] != "message_stop" || got[len(got)-2] != "message_delta" {
		t.Fatalf("stream events %v, want message_start … message_delta, message_stop", got)
	}
	var o out
	var partial string
	open := false
	for _, e := range evs {
		d := decode(t, e)
		if d["type"] != e.Event {
			t.Errorf("event %s has type %v", e.Event, d["type"])
		}
		switch e.Event {
		case "content_block_start":
			if open {
				t.Error("content_block_start inside a block")
			}
			open = true
			b := d["content_block"].(map[string]any)
			if b["type"] == "tool_use" {
				o.Name, o.ID = b["name"].(string), b["id"].(string)
			}
		case "content_block_delta":
			delta := d["delta"].(map[string]any)
			switch delta["type"] {
			case "text_delta":
				o.Text += delta["text"].(string)
			case "input_json_delta":
				partial += delta["partial_json"].(string)
			}
		case "content_block_stop":
			open = false
		case "message_delta":
			o.Stop, _ = d["delta"].(map[string]any)["stop_reason"].(string)
		}
	}
	if o.Name != "" {
		if err := json.Unmarshal([]byte(partial), &o.Args); err != nil {
			t.Errorf("tool input %q: %v", partial, err)
		}
	}
	return o
}

// deferredNote is the system-role message in which Claude Code names its
// deferred MCP tools.
const deferredNote = "The following deferred tools are now available via ToolSearch. Their schemas are NOT loaded. " +
	"Use ToolSearch with query \"select:<name>[,<name>...]\" to load tool schemas before calling them:\n" +
	"mcp__rt__thread_list\nmcp__rt__thread_post\nmcp__rt__thread_read"

func claudeTools(extra ...string) []any {
	var out []any
	for _, n := range append([]string{"Agent", "Bash", "Read", "ToolSearch"}, extra...) {
		out = append(out, map[string]any{"name": n, "input_schema": map[string]any{"type": "object"}})
	}
	return out
}

func text(s string) map[string]any { return map[string]any{"type": "text", "text": s} }

// TestMessagesToolSearch: a deferred MCP tool is first loaded with
// ToolSearch "select:<full name>", then called once it is in tools; its
// tool_result (text blocks) is recorded and answered "saw: <result>".
// Claude Code's reminders in the user message are not the prompt.
func TestMessagesToolSearch(t *testing.T) {
	m := agenttest.NewModel(t)
	url := m.URL + "/v1/messages?beta=true"
	msgs := []any{
		map[string]any{"role": "system", "content": deferredNote},
		map[string]any{"role": "user", "content": []any{text("<system-reminder>be brief</system-reminder>"), text(`call thread_post {"text":"hi"}`)}},
	}
	_, evs, _ := post(t, context.Background(), url, map[string]any{"model": "claude-opus-5-5", "stream": true, "tools": claudeTools(), "messages": msgs})
	search := readMessages(t, evs)
	if search.Name != "ToolSearch" || search.Stop != "tool_use" || !cmp.Equal(search.Args, map[string]any{"query": "select:mcp__rt__thread_post", "max_results": float64(1)}) {
		t.Fatalf("first answer %+v, want ToolSearch select:mcp__rt__thread_post", search)
	}
	msgs = append(msgs,
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": search.ID, "name": "ToolSearch", "input": search.Args}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": search.ID,
			"content": []any{map[string]any{"type": "tool_reference", "tool_name": "mcp__rt__thread_post"}, text("Tool loaded.")}}}})
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools("mcp__rt__thread_post"), "messages": msgs})
	c := readMessages(t, evs)
	if c.Name != "mcp__rt__thread_post" || c.Stop != "tool_use" || !cmp.Equal(c.Args, map[string]any{"text": "hi"}) {
		t.Fatalf("second answer %+v, want a call of mcp__rt__thread_post", c)
	}
	if got := m.ToolResults(); len(got) != 0 {
		t.Errorf("ToolSearch's result recorded as a tool result: %q", got)
	}
	msgs = append(msgs,
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": c.Args}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": c.ID, "content": []any{text("posted m1")}}}})
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools("mcp__rt__thread_post"), "messages": msgs})
	if got := readMessages(t, evs); got.Text != "saw: posted m1" || got.Stop != "end_turn" {
		t.Errorf("third answer %+v, want the text \"saw: posted m1\", end_turn", got)
	}
	// A message of reminders alone after the result leaves it the last word.
	withReminder := append(slices.Clone(msgs), map[string]any{"role": "user", "content": []any{text("<system-reminder>todo list empty</system-reminder>")}})
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools("mcp__rt__thread_post"), "messages": withReminder})
	if got := readMessages(t, evs); got.Text != "saw: posted m1" {
		t.Errorf("answer after a reminder %+v, want the text \"saw: posted m1\"", got)
	}
	// A string content, flagged an error, is a result too.
	msgs[len(msgs)-1] = map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_x", "content": "parent_not_active: no run", "is_error": true}}}
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools("mcp__rt__thread_post"), "messages": msgs})
	if got := readMessages(t, evs); got.Text != "saw: parent_not_active: no run" {
		t.Errorf("answer %+v, want saw: parent_not_active: no run", got)
	}
	if diff := cmp.Diff([]string{"posted m1", "parent_not_active: no run"}, m.ToolResults()); diff != "" {
		t.Errorf("ToolResults (-want +got):\n%s", diff)
	}
}

// TestMessagesToolSearchFails: a tool ToolSearch did not load, or a tool
// nobody offers, is answered an error text, not a loop of searches.
func TestMessagesToolSearchFails(t *testing.T) {
	m := agenttest.NewModel(t)
	url := m.URL + "/v1/messages"
	msgs := []any{
		map[string]any{"role": "system", "content": deferredNote},
		map[string]any{"role": "user", "content": `call thread_post {}`},
		map[string]any{"role": "assistant", "content": []any{map[string]any{"type": "tool_use", "id": "toolu_1", "name": "ToolSearch", "input": map[string]any{}}}},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "tool_result", "tool_use_id": "toolu_1", "content": "No matching deferred tools found"}}},
	}
	_, evs, _ := post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools(), "messages": msgs})
	if got := readMessages(t, evs); !strings.HasPrefix(got.Text, "error: call thread_post: ToolSearch did not load it") || got.Stop != "end_turn" {
		t.Errorf("answer %+v, want an error text", got)
	}
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools(), "messages": msgs[:2:2]})
	_ = readMessages(t, evs) // ToolSearch, checked above
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": claudeTools(),
		"messages": []any{map[string]any{"role": "user", "content": "call nothing_here {}"}}})
	if got := readMessages(t, evs); !strings.HasPrefix(got.Text, `error: call nothing_here: no tool ends with "nothing_here"; tools: Agent, Bash, Read, ToolSearch`) {
		t.Errorf("answer %+v, want an error text listing the tools", got)
	}
	if got := m.ToolResults(); len(got) != 0 {
		t.Errorf("ToolResults = %q, want none", got)
	}
}

// --- OpenAI Chat Completions (OpenCode) ---

// readChat checks a Chat Completions stream's shape and returns what it
// said.
func readChat(t *testing.T, evs []sse) out {
	t.Helper()
	if len(evs) < 4 || evs[len(evs)-1].Data != "[DONE]" {
		t.Fatalf("stream %v, want chunks then [DONE]", evs)
	}
	var o out
	var args string
	sawUsage := false
	for _, e := range evs[:len(evs)-1] {
		if e.Event != "" {
			t.Errorf("named event %q in a chat stream", e.Event)
		}
		d := decode(t, e)
		if d["object"] != "chat.completion.chunk" {
			t.Errorf("chunk object %v", d["object"])
		}
		if d["usage"] != nil {
			sawUsage = true
		}
		for _, ch := range d["choices"].([]any) {
			ch := ch.(map[string]any)
			if f, ok := ch["finish_reason"].(string); ok {
				o.Stop = f
			}
			delta := ch["delta"].(map[string]any)
			if s, ok := delta["content"].(string); ok {
				o.Text += s
			}
			calls, _ := delta["tool_calls"].([]any)
			for _, tc := range calls {
				tc := tc.(map[string]any)
				if id, _ := tc["id"].(string); id != "" {
					o.ID = id
				}
				fn := tc["function"].(map[string]any)
				if n, _ := fn["name"].(string); n != "" {
					o.Name = n
				}
				a, _ := fn["arguments"].(string)
				args += a
			}
		}
	}
	if !sawUsage {
		t.Error("no usage chunk")
	}
	if o.Name != "" {
		if err := json.Unmarshal([]byte(args), &o.Args); err != nil {
			t.Errorf("arguments %q: %v", args, err)
		}
	}
	return o
}

func chatTools(names ...string) []any {
	var out []any
	for _, n := range names {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]any{"type": "object"}}})
	}
	return out
}

// TestChatToolLoop: OpenCode's quoted prompt "call thread_post {…}" calls
// rt_thread_post; the tool message is recorded and answered.
func TestChatToolLoop(t *testing.T) {
	m := agenttest.NewModel(t)
	url := m.URL + "/v1/chat/completions"
	tools := chatTools("bash", "rt_thread_list", "rt_thread_post")
	msgs := []any{
		map[string]any{"role": "system", "content": "You are opencode."},
		map[string]any{"role": "user", "content": []any{text(`"call thread_post {"text":"hi"}"`)}},
	}
	_, evs, _ := post(t, context.Background(), url, map[string]any{"model": "fake-model", "stream": true, "tools": tools, "messages": msgs})
	c := readChat(t, evs)
	if c.Name != "rt_thread_post" || c.Stop != "tool_calls" || c.ID == "" || !cmp.Equal(c.Args, map[string]any{"text": "hi"}) {
		t.Fatalf("answer %+v, want a call of rt_thread_post", c)
	}
	msgs = append(msgs,
		map[string]any{"role": "assistant", "content": "", "tool_calls": []any{map[string]any{"id": c.ID, "type": "function",
			"function": map[string]any{"name": c.Name, "arguments": `{"text":"hi"}`}}}},
		map[string]any{"role": "tool", "tool_call_id": c.ID, "content": "posted m1"})
	_, evs, _ = post(t, context.Background(), url, map[string]any{"stream": true, "tools": tools, "messages": msgs})
	if got := readChat(t, evs); got.Text != "saw: posted m1" || got.Stop != "stop" {
		t.Errorf("answer %+v, want the text \"saw: posted m1\", stop", got)
	}
	if diff := cmp.Diff([]string{"posted m1"}, m.ToolResults()); diff != "" {
		t.Errorf("ToolResults (-want +got):\n%s", diff)
	}
}

// TestChatTitle: OpenCode's title request gets the short title, and its
// prompt is not treated as a command.
func TestChatTitle(t *testing.T) {
	m := agenttest.NewModel(t)
	_, evs, _ := post(t, context.Background(), m.URL+"/v1/chat/completions", map[string]any{"stream": true, "messages": []any{
		map[string]any{"role": "system", "content": "You are a title generator. You output ONLY a thread title."},
		map[string]any{"role": "user", "content": "Generate a title for this conversation:\n"},
		map[string]any{"role": "user", "content": `"sleep 1h"`},
	}})
	if got := readChat(t, evs); got.Text != agenttest.Title || got.Stop != "stop" {
		t.Errorf("answer %+v, want the title %q", got, agenttest.Title)
	}
}

// --- every format ---

// format is one wire format: where to post, how to ask with a prompt, how
// to read a stream.
type format struct {
	name string
	path string
	ask  func(prompt string, stream bool) map[string]any
	read func(*testing.T, []sse) out
}

var formats = []format{
	{"responses", "/v1/responses", func(p string, s bool) map[string]any {
		return map[string]any{"stream": s, "input": []any{userMsg(p)}}
	}, readResponses},
	{"messages", "/v1/messages?beta=true", func(p string, s bool) map[string]any {
		return map[string]any{"stream": s, "messages": []any{map[string]any{"role": "user", "content": p}}}
	}, readMessages},
	{"chat", "/v1/chat/completions", func(p string, s bool) map[string]any {
		return map[string]any{"stream": s, "messages": []any{map[string]any{"role": "user", "content": p}}}
	}, readChat},
}

// TestSleep: "sleep <d>" holds the answer d, then "slept"; a cancelled
// request ends the hold at once, and a model closed under a held answer
// does not wait for it.
func TestSleep(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			m := agenttest.NewModel(t)
			start := time.Now()
			_, evs, _ := post(t, context.Background(), m.URL+f.path, f.ask("sleep 200ms", true))
			if got := f.read(t, evs); got.Text != "slept" {
				t.Errorf("answer %+v, want slept", got)
			}
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Errorf("answered after %v, want at least 200ms", d)
			}

			// The stream starts at once; the held answer waits.
			ctx, cancel := context.WithCancel(context.Background())
			raw, _ := json.Marshal(f.ask("sleep 30s", true))
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, m.URL+f.path, bytes.NewReader(raw))
			start = time.Now()
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if d := time.Since(start); d > 5*time.Second || resp.StatusCode != http.StatusOK {
				t.Errorf("headers after %v with status %d, want 200 at once", d, resp.StatusCode)
			}
			cancel()
			resp.Body.Close()

			// A request held when the model closes: the cleanup must not wait 30s.
			var wg sync.WaitGroup
			wg.Add(1)
			go func() {
				defer wg.Done()
				resp, err := http.Post(m.URL+f.path, "application/json", bytes.NewReader(raw))
				if err == nil {
					resp.Body.Close()
				}
			}()
			for len(m.Requests()) < 3 {
				time.Sleep(5 * time.Millisecond)
			}
			t.Cleanup(func() {
				start := time.Now()
				wg.Wait()
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("a held request outlived the model by %v", d)
				}
			}) // runs after the model's cleanup, which ends the hold
		})
	}
}

// TestNonStreaming: a request without "stream" gets one JSON answer.
func TestNonStreaming(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			m := agenttest.NewModel(t)
			resp, evs, body := post(t, context.Background(), m.URL+f.path, f.ask("hello", false))
			if resp.StatusCode != http.StatusOK || evs != nil || resp.Header.Get("Content-Type") != "application/json" {
				t.Fatalf("status %d, type %q, want a 200 JSON answer", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			var a struct {
				Output []struct {
					Content []struct{ Text string }
				}
				Content []struct{ Text string }
				Choices []struct {
					Message struct{ Content string }
				}
			}
			if err := json.Unmarshal(body, &a); err != nil {
				t.Fatalf("%v: %s", err, body)
			}
			var got string
			switch {
			case len(a.Output) == 1 && len(a.Output[0].Content) == 1:
				got = a.Output[0].Content[0].Text
			case len(a.Content) == 1:
				got = a.Content[0].Text
			case len(a.Choices) == 1:
				got = a.Choices[0].Message.Content
			}
			if got != "ok: hello" {
				t.Errorf("answer %s, want the text ok: hello", body)
			}
		})
	}
}

// TestRefusals: an unknown path is 404 and recorded, a body over 8 MiB is
// 413, a body that is not the format's JSON is 400.
func TestRefusals(t *testing.T) {
	m := agenttest.NewModel(t)
	tests := []struct {
		name, method, path string
		body               []byte
		want               int
	}{
		{"unknown path", http.MethodPost, "/v1/models", []byte(`{}`), http.StatusNotFound},
		{"wrong method", http.MethodGet, "/v1/responses", nil, http.StatusNotFound},
		{"too large", http.MethodPost, "/v1/messages", bytes.Repeat([]byte("x"), 8<<20+1), http.StatusRequestEntityTooLarge},
		{"not JSON", http.MethodPost, "/v1/chat/completions", []byte(`{"messages":`), http.StatusBadRequest},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			req, _ := http.NewRequest(test.method, m.URL+test.path, bytes.NewReader(test.body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != test.want {
				t.Errorf("%s %s = %d, want %d", test.method, test.path, resp.StatusCode, test.want)
			}
		})
	}
	reqs := m.Requests()
	if len(reqs) != len(tests) {
		t.Fatalf("%d requests recorded, want %d", len(reqs), len(tests))
	}
	if reqs[0].Format != "" || reqs[0].Path != "/v1/models" || string(reqs[0].Body) != "{}" {
		t.Errorf("unknown path recorded as %+v", reqs[0])
	}
	if reqs[2].Format != agenttest.FormatMessages || len(reqs[2].Body) != 8<<20 {
		t.Errorf("large request recorded as format %q with %d bytes, want messages with 8 MiB", reqs[2].Format, len(reqs[2].Body))
	}
}

// TestConcurrent: requests in parallel (under -race) each get their own
// answer, and every one is recorded.
func TestConcurrent(t *testing.T) {
	m := agenttest.NewModel(t)
	var wg sync.WaitGroup
	for i := range 30 {
		f := formats[i%len(formats)]
		wg.Go(func() {
			resp, evs, _ := post(t, context.Background(), m.URL+f.path, f.ask("n"+string(rune('a'+i)), true))
			if resp.StatusCode != http.StatusOK {
				t.Errorf("status %d", resp.StatusCode)
				return
			}
			if got := f.read(t, evs); got.Text != "ok: n"+string(rune('a'+i)) {
				t.Errorf("answer %+v", got)
			}
		})
		wg.Go(func() { _ = m.Requests(); _ = m.ToolResults() })
	}
	wg.Wait()
	if n := len(m.Requests()); n != 30 {
		t.Errorf("%d requests recorded, want 30", n)
	}
}

// TestChatPrompt: opencode run sends its message as a JSON string literal;
// the prompt is what it quotes.
func TestChatPrompt(t *testing.T) {
	tests := []struct{ name, content, want string }{
		{"plain", `hello`, "ok: hello"},
		{"quoted", `"hello"`, "ok: hello"},
		{"JSON literal", `"say \"hi\""`, `ok: say "hi"`},
		{"quotes not JSON", `"a "b" c"`, `ok: a "b" c`},
		{"one quote", `"`, `ok: "`},
	}
	m := agenttest.NewModel(t)
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			_, evs, _ := post(t, context.Background(), m.URL+"/v1/chat/completions", map[string]any{"stream": true,
				"messages": []any{map[string]any{"role": "user", "content": test.content}}})
			if got := readChat(t, evs); got.Text != test.want {
				t.Errorf("prompt %s answered %q, want %q", test.content, got.Text, test.want)
			}
		})
	}
	// A call whose arguments come JSON-escaped.
	literal, _ := json.Marshal(`call thread_post {"text":"hi"}`)
	_, evs, _ := post(t, context.Background(), m.URL+"/v1/chat/completions", map[string]any{"stream": true, "tools": chatTools("rt_thread_post"),
		"messages": []any{map[string]any{"role": "user", "content": string(literal)}}})
	if got := readChat(t, evs); got.Name != "rt_thread_post" || !cmp.Equal(got.Args, map[string]any{"text": "hi"}) {
		t.Errorf("prompt %s answered %+v, want a call of rt_thread_post {text: hi}", literal, got)
	}
}

// TestCodexOutputHeader: the header Codex puts before a tool's output is
// not part of the recorded result; text that only looks like one is kept.
func TestCodexOutputHeader(t *testing.T) {
	tests := []struct{ name, output, want string }{
		{"MCP tool", "Wall time: 0.0074 seconds\nOutput:\n{\"id\":\"m1\"}", `{"id":"m1"}`},
		{"exec_command", "Chunk ID: 62439f\nWall time: 0.0000 seconds\nProcess exited with code 0\nOriginal token count: 5\nOutput:\nthe note\n", "the note\n"},
		{"no header", "just text", "just text"},
		{"not a header", "Dear user\nOutput:\nx", "Dear user\nOutput:\nx"},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			m := agenttest.NewModel(t)
			_, evs, _ := post(t, context.Background(), m.URL+"/v1/responses", map[string]any{"stream": true, "tools": codexTools, "input": []any{
				userMsg("call thread_post {}"),
				map[string]any{"type": "function_call", "namespace": "mcp__rt", "name": "thread_post", "call_id": "call_1", "arguments": "{}"},
				map[string]any{"type": "function_call_output", "call_id": "call_1", "output": test.output},
			}})
			if got := readResponses(t, evs); got.Text != "saw: "+test.want {
				t.Errorf("answer %q, want %q", got.Text, "saw: "+test.want)
			}
			if diff := cmp.Diff([]string{test.want}, m.ToolResults()); diff != "" {
				t.Errorf("ToolResults (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSleepThenCall: "sleep <d> then call <tool> <json>" holds the call's
// answer d — here the answer for a tool no request offers, the error text.
func TestSleepThenCall(t *testing.T) {
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			m := agenttest.NewModel(t)
			start := time.Now()
			_, evs, _ := post(t, context.Background(), m.URL+f.path, f.ask(`sleep 200ms then call thread_post {"text":"x"}`, true))
			got := f.read(t, evs)
			if d := time.Since(start); d < 200*time.Millisecond {
				t.Errorf("answered after %v, want at least 200ms", d)
			}
			if got.Text == "slept" || got.Text == "" && got.Name == "" {
				t.Errorf("answer %+v, want the call's answer", got)
			}
		})
	}
}

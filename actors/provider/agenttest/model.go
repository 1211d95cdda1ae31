package agenttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// maxBody bounds a request body the model reads; a CLI's largest (Claude
// Code's first request: its system prompt and a dozen tool schemas) is
// well under 1 MiB.
const maxBody = 8 << 20

// The formats a [ModelRequest] names.
const (
	FormatResponses = "responses" // POST /v1/responses, OpenAI Responses (Codex)
	FormatMessages  = "messages"  // POST /v1/messages, Anthropic Messages (Claude Code)
	FormatChat      = "chat"      // POST /v1/chat/completions, OpenAI Chat Completions (OpenCode)
)

// Title is the answer to a title-generation request.
const Title = "Scripted conversation"

// ModelRequest is one request the model received.
type ModelRequest struct {
	Format string      // FormatResponses, FormatMessages, FormatChat, or "" for a path the model does not serve (answered 404)
	Path   string      // the request's URL path, query excluded
	Header http.Header // the request's headers
	Body   []byte      // the body as read (at most 8 MiB)
}

// Model is the scripted model: an HTTP server on loopback that answers
// the three model APIs (see the package documentation). It is safe for
// concurrent use.
type Model struct {
	// URL is the server's base URL, "http://127.0.0.1:PORT", without a
	// trailing slash or /v1.
	URL string

	done chan struct{} // closed when the model closes: held answers give up
	srv  *httptest.Server

	mu       sync.Mutex // guards the fields below
	requests []ModelRequest
	results  []string
	seen     map[string]bool // call ids whose result is in results
	calls    int             // ids handed out
}

// NewModel starts a scripted model on 127.0.0.1; it is closed when the
// test ends, held answers ("sleep") abandoned first.
func NewModel(t testing.TB) *Model {
	t.Helper()
	m := StartModel()
	t.Cleanup(m.Close)
	return m
}

// StartModel starts a scripted model on 127.0.0.1 outside a test (for
// examples/scriptedmodel, which serves it to `make demo`); the caller
// closes it.
func StartModel() *Model {
	m := &Model{done: make(chan struct{}), seen: map[string]bool{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	m.URL = m.srv.URL
	return m
}

// Close stops the model, held answers ("sleep") abandoned first. It is
// called once.
func (m *Model) Close() {
	close(m.done)
	m.srv.Close()
}

// ToolResults returns the text of every tool result the model saw, in
// order, each once (a request repeated with the same call's result is not
// counted again).
func (m *Model) ToolResults() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.results)
}

// Requests returns every request the model received, in order.
func (m *Model) Requests() []ModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := slices.Clone(m.requests)
	for i := range out {
		out[i].Header = out[i].Header.Clone()
		out[i].Body = slices.Clone(out[i].Body)
	}
	return out
}

// serve records the request and hands it to its format.
func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	format := ""
	if r.Method == http.MethodPost {
		switch r.URL.Path {
		case "/v1/responses":
			format = FormatResponses
		case "/v1/messages":
			format = FormatMessages
		case "/v1/chat/completions":
			format = FormatChat
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	m.mu.Lock()
	m.requests = append(m.requests, ModelRequest{Format: format, Path: r.URL.Path, Header: r.Header.Clone(), Body: body})
	m.mu.Unlock()
	if format == "" {
		http.NotFound(w, r)
		return
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			http.Error(w, "request body too large", http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, "read body: "+err.Error(), http.StatusBadRequest)
		return
	}
	var c conversation
	var stream bool
	switch format {
	case FormatResponses:
		c, stream, err = parseResponses(body)
	case FormatMessages:
		c, stream, err = parseMessages(body)
	case FormatChat:
		c, stream, err = parseChat(body)
	}
	if err != nil {
		http.Error(w, fmt.Sprintf("%s request: %v", format, err), http.StatusBadRequest)
		return
	}
	a := m.decide(c)
	out := &reply{w: w, stream: stream, model: c.model, hold: func() bool { return m.hold(r, a.sleep) }}
	switch format {
	case FormatResponses:
		out.responses(a)
	case FormatMessages:
		out.messages(a)
	case FormatChat:
		out.chat(a)
	}
}

// hold waits d, or until the request is cancelled or the model closed; it
// reports whether d passed.
func (m *Model) hold(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-r.Context().Done():
		return false
	case <-m.done:
		return false
	}
}

// conversation is what a request says, in any format.
type conversation struct {
	model  string
	prompt string      // the last user prompt
	result *toolResult // the result the conversation ends with, if it does
	tools  []tool      // the tools the request offers
	// deferred are the names of tools the agent offers to load on request
	// (Claude Code names them in a system message, loaded by ToolSearch).
	deferred []string
	title    bool // a title-generation request
}

// toolResult is the result of a call, as the agent sent it back.
type toolResult struct {
	callID string
	name   string // the called tool's name, from the call in the conversation
	text   string
}

// tool is a tool a request offers: its name, and for Codex's MCP tools the
// namespace it is called in.
type tool struct {
	namespace string
	name      string
}

// full is the name a prompt's tool name is matched against: Codex's
// namespace joined to the name (mcp__rt + thread_post → mcp__rt__thread_post,
// Claude Code's own spelling).
func (t tool) full() string {
	if t.namespace == "" || strings.HasSuffix(t.namespace, "_") {
		return t.namespace + t.name
	}
	return t.namespace + "__" + t.name
}

// toolSearch is Claude Code's tool that loads deferred tools.
const toolSearch = "ToolSearch"

// answer is what the model says: a text, or a call; sleep holds it first.
type answer struct {
	text  string
	call  *call
	sleep time.Duration
}

// call is a tool call the model makes.
type call struct {
	id        string
	namespace string
	name      string
	args      string // a JSON object
}

// decide is the script: the whole model.
func (m *Model) decide(c conversation) answer {
	if c.title {
		return answer{text: Title}
	}
	if r := c.result; r != nil && r.name != toolSearch {
		m.mu.Lock()
		if r.callID == "" || !m.seen[r.callID] {
			m.seen[r.callID] = true
			m.results = append(m.results, r.text)
		}
		m.mu.Unlock()
		return answer{text: "saw: " + r.text}
	}
	prompt := strings.TrimSpace(c.prompt)
	switch verb, rest, _ := strings.Cut(prompt, " "); verb {
	case "call":
		return m.callFor(c, strings.TrimSpace(rest))
	case "sleep":
		// "sleep <dur>", or "sleep <dur> then call <tool> <json>": the
		// call held that long, as a slow model's would be.
		dur, then, _ := strings.Cut(strings.TrimSpace(rest), " then ")
		d, err := time.ParseDuration(strings.TrimSpace(dur))
		if err != nil {
			return answer{text: "error: sleep: " + err.Error()}
		}
		if tool, ok := strings.CutPrefix(strings.TrimSpace(then), "call "); ok {
			a := m.callFor(c, strings.TrimSpace(tool))
			a.sleep = d
			return a
		}
		return answer{text: "slept", sleep: d}
	}
	return answer{text: "ok: " + prompt}
}

// callFor answers "call <tool> <json>": the call of the offered tool whose
// name ends with <tool>, else a ToolSearch that loads a deferred one, else
// an error text.
func (m *Model) callFor(c conversation, rest string) answer {
	name, args, _ := strings.Cut(rest, " ")
	args = strings.TrimSpace(args)
	if args == "" {
		args = "{}"
	}
	if name == "" {
		return answer{text: "error: call: no tool named"}
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(args), &obj); err != nil {
		return answer{text: fmt.Sprintf("error: call %s: arguments are not a JSON object: %v", name, err)}
	}
	compact, _ := json.Marshal(obj)
	if t, ok := match(c.tools, name); ok {
		return answer{call: &call{id: m.newID(), namespace: t.namespace, name: t.name, args: string(compact)}}
	}
	searched := c.result != nil && c.result.name == toolSearch
	if _, offered := match(c.tools, toolSearch); offered && !searched {
		if d, ok := deferredMatch(c.deferred, name); ok {
			q, _ := json.Marshal(map[string]any{"query": "select:" + d, "max_results": 1})
			return answer{call: &call{id: m.newID(), name: toolSearch, args: string(q)}}
		}
	}
	names := make([]string, 0, len(c.tools))
	for _, t := range c.tools {
		names = append(names, t.full())
	}
	if searched {
		return answer{text: fmt.Sprintf("error: call %s: ToolSearch did not load it; tools: %s", name, strings.Join(names, ", "))}
	}
	return answer{text: fmt.Sprintf("error: call %s: no tool ends with %q; tools: %s", name, name, strings.Join(names, ", "))}
}

// match finds the tool named name, else the first whose full name ends
// with name.
func match(tools []tool, name string) (tool, bool) {
	for _, t := range tools {
		if t.name == name && t.namespace == "" {
			return t, true
		}
	}
	for _, t := range tools {
		if strings.HasSuffix(t.full(), name) {
			return t, true
		}
	}
	return tool{}, false
}

// deferredMatch finds the deferred tool named name, else the first MCP
// tool (mcp__<server>__<tool>) whose name ends with name, else any name
// that does: the text the names come from holds other words too.
func deferredMatch(deferred []string, name string) (string, bool) {
	for _, pass := range []func(string) bool{
		func(d string) bool { return d == name },
		func(d string) bool { return strings.HasPrefix(d, "mcp__") && strings.HasSuffix(d, name) },
		func(d string) bool { return strings.HasSuffix(d, name) },
	} {
		for _, d := range deferred {
			if pass(d) {
				return d, true
			}
		}
	}
	return "", false
}

// newID returns a call id no other call of this model has.
func (m *Model) newID() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.calls++
	return fmt.Sprintf("%d", m.calls)
}

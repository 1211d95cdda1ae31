package opencode_test

// Temporary stand-in for agenttest's scripted model (Chat Completions
// only), until agenttest lands on main.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

type scriptedModel struct {
	URL     string
	mu      sync.Mutex
	results []string
	bodies  [][]byte
}

func newModel(t testing.TB) *scriptedModel {
	m := &scriptedModel{}
	srv := httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(srv.Close)
	m.URL = srv.URL
	return m
}

func (m *scriptedModel) ToolResults() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.results...)
}

func (m *scriptedModel) bodiesCopy() [][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([][]byte(nil), m.bodies...)
}

func binary(t testing.TB, name string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "e2e", "agents", "node_modules", ".bin", name)
}

func (m *scriptedModel) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var req struct {
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []struct {
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		} `json:"tools"`
	}
	json.Unmarshal(body, &req)
	m.mu.Lock()
	m.bodies = append(m.bodies, body)
	m.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	send := func(v any) {
		b, _ := json.Marshal(v)
		fmt.Fprintf(w, "data: %s\n\n", b)
		w.(http.Flusher).Flush()
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": "c1", "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": "scripted",
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}}
	}
	text := func(i int) string {
		var s string
		if json.Unmarshal(req.Messages[i].Content, &s) == nil {
			return s
		}
		var parts []struct{ Text string }
		json.Unmarshal(req.Messages[i].Content, &parts)
		for _, p := range parts {
			s += p.Text
		}
		return s
	}
	say := func(s string) {
		send(chunk(map[string]any{"role": "assistant", "content": s}, nil))
		send(chunk(map[string]any{}, "stop"))
		fmt.Fprintf(w, "data: [DONE]\n\n")
	}
	last := len(req.Messages) - 1
	if req.Messages[last].Role == "tool" {
		res := text(last)
		m.mu.Lock()
		m.results = append(m.results, res)
		m.mu.Unlock()
		say("saw: " + res)
		return
	}
	p := text(last)
	if len(req.Tools) == 0 {
		say("Scripted title")
		return
	}
	if rest, ok := strings.CutPrefix(p, "call "); ok {
		tool, args, _ := strings.Cut(rest, " ")
		for _, tl := range req.Tools {
			if strings.HasSuffix(tl.Function.Name, tool) {
				send(chunk(map[string]any{"role": "assistant", "tool_calls": []any{map[string]any{"index": 0, "id": fmt.Sprintf("call_%d", time.Now().UnixNano()), "type": "function",
					"function": map[string]any{"name": tl.Function.Name, "arguments": args}}}}, nil))
				send(chunk(map[string]any{}, "tool_calls"))
				fmt.Fprintf(w, "data: [DONE]\n\n")
				return
			}
		}
		say("no tool " + tool)
		return
	}
	if rest, ok := strings.CutPrefix(p, "sleep "); ok {
		d, _ := time.ParseDuration(rest)
		select {
		case <-r.Context().Done():
			return
		case <-time.After(d):
		}
		say("slept")
		return
	}
	say("ok: " + p)
}

// leaks is a stand-in for agenttest.Leaks.
func leaks(secret string, allowDirs []string, scanDirs []string, logs ...[]byte) []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline"); err == nil && bytes.Contains(b, []byte(secret)) {
			out = append(out, "/proc/"+e.Name()+"/cmdline")
		}
	}
	for _, d := range scanDirs {
		filepath.WalkDir(d, func(p string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return nil
			}
			if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(secret)) {
				out = append(out, p)
			}
			return nil
		})
	}
	for i, l := range logs {
		if bytes.Contains(l, []byte(secret)) {
			out = append(out, fmt.Sprintf("log %d", i))
		}
	}
	return out
}

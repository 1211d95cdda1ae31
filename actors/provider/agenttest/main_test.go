package agenttest_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind: a held
// answer must end when its request or its model does.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// deadline bounds every request and every CLI run.
const deadline = time.Minute

// sse is one server-sent event.
type sse struct {
	Event string
	Data  string
}

// post sends body to url and returns the response, its body read: the
// events of a stream, or the raw body.
func post(t *testing.T, ctx context.Context, url string, body any) (*http.Response, []sse, []byte) {
	t.Helper()
	raw, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer of POST %s: %v", url, err)
	}
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		return resp, nil, data
	}
	return resp, parseSSE(t, data), data
}

// parseSSE splits a stream into its events; every data line but
// Chat Completions' "[DONE]" must be JSON.
func parseSSE(t *testing.T, data []byte) []sse {
	t.Helper()
	var out []sse
	var cur sse
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != (sse{}) {
				out = append(out, cur)
			}
			cur = sse{}
		case strings.HasPrefix(line, "event: "):
			cur.Event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.Data = strings.TrimPrefix(line, "data: ")
			if cur.Data != "[DONE]" && !json.Valid([]byte(cur.Data)) {
				t.Errorf("event data is not JSON: %s", cur.Data)
			}
		default:
			t.Errorf("unexpected stream line %q", line)
		}
	}
	if cur != (sse{}) {
		t.Errorf("stream ends inside an event: %+v", cur)
	}
	return out
}

// decode decodes an event's data.
func decode(t *testing.T, e sse) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
		t.Fatalf("event %s: %v", e.Event, err)
	}
	return m
}

// names are the events' names.
func names(evs []sse) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Event)
	}
	return out
}

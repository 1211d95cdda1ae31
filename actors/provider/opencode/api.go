package opencode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// callTimeout bounds one API call the driver makes on its own (a status
// poll, a permission reply), outside any call of the runtime.
const callTimeout = 10 * time.Second

// maxEvent bounds one event of the server's event stream (a message part
// carries a tool's whole output).
const maxEvent = 16 << 20

// client calls one OpenCode server's HTTP API (its OpenAPI document is
// served at GET /doc). Every request carries the server's basic
// authentication; an error never holds a secret (hide).
type client struct {
	base     string // "http://127.0.0.1:<port>"
	password string
	tr       *http.Transport // the session's own: its connections end with it
	http     *http.Client
	hide     func(string) string // redacts the session's secrets from a text
}

func newClient(base, password string, hide func(string) string) *client {
	tr := &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	return &client{base: base, password: password, tr: tr, http: &http.Client{Transport: tr}, hide: hide}
}

// close drops the idle connections (their goroutines end).
func (c *client) close() { c.tr.CloseIdleConnections() }

func (c *client) request(ctx context.Context, method, path string, in any) (*http.Request, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(Username, c.password)
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	return req, nil
}

// do sends a JSON request and decodes a JSON answer into out (if not nil).
// An answer that is not a 2xx is an error carrying OpenCode's own text.
func (c *client) do(ctx context.Context, method, path string, in, out any) error {
	req, err := c.request(ctx, method, path, in)
	if err != nil {
		return fmt.Errorf("opencode: %s %s: %w", method, path, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("opencode: %s %s: %s", method, path, c.hide(err.Error()))
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("opencode: %s %s: %s: %s", method, path, resp.Status, c.hide(strings.TrimSpace(string(b))))
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("opencode: %s %s: decode the answer: %s", method, path, c.hide(err.Error()))
	}
	return nil
}

// event is one event of GET /event.
type event struct {
	Type       string          `json:"type"`
	Properties json.RawMessage `json:"properties"`
}

// subscribe reads GET /event until ctx is done or the stream ends, calling
// fn for each event in order. It returns why the stream ended.
func (c *client) subscribe(ctx context.Context, fn func(event)) error {
	req, err := c.request(ctx, http.MethodGet, "/event", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.http.Do(req)
	if err != nil {
		return errors.New(c.hide(err.Error()))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /event: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxEvent)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case len(line) == 0:
			if len(data) > 0 {
				var ev event
				if err := json.Unmarshal(data, &ev); err == nil {
					fn(ev)
				}
				data = data[:0]
			}
		case bytes.HasPrefix(line, []byte("data:")):
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, bytes.TrimPrefix(bytes.TrimPrefix(line, []byte("data:")), []byte(" "))...)
		}
	}
	if err := sc.Err(); err != nil {
		return errors.New(c.hide(err.Error()))
	}
	return io.EOF
}

// The API's shapes the driver reads and writes (OpenCode 1.18's OpenAPI
// document, GET /doc).

// mcpStatus is an entry of GET /mcp and of POST /mcp's answer.
type mcpStatus struct {
	Status string `json:"status"` // connected, disabled, failed, needs_auth, needs_client_registration
	Error  string `json:"error,omitempty"`
}

// mcpAdd is POST /mcp's body: a remote server, its header, no OAuth.
type mcpAdd struct {
	Name   string       `json:"name"`
	Config mcpRemoteCfg `json:"config"`
}

type mcpRemoteCfg struct {
	Type    string            `json:"type"` // "remote"
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers"`
	OAuth   bool              `json:"oauth"` // false: no OAuth discovery
	Enabled bool              `json:"enabled"`
}

// sessionCreate is POST /session's body.
type sessionCreate struct {
	Title      string           `json:"title,omitempty"`
	Permission []permissionRule `json:"permission,omitempty"`
}

type permissionRule struct {
	Permission string `json:"permission"`
	Pattern    string `json:"pattern"`
	Action     string `json:"action"` // allow, deny, ask
}

// headless are the session's permission rules: nobody is there to answer
// a question or to approve a plan (as "opencode run" does).
var headless = []permissionRule{
	{Permission: "question", Pattern: "*", Action: "deny"},
	{Permission: "plan_enter", Pattern: "*", Action: "deny"},
	{Permission: "plan_exit", Pattern: "*", Action: "deny"},
}

type sessionInfo struct {
	ID string `json:"id"`
}

// prompt is POST /session/{id}/prompt_async's body.
type prompt struct {
	Model *promptModel `json:"model,omitempty"`
	Parts []textPart   `json:"parts"`
}

type promptModel struct {
	ProviderID string `json:"providerID"`
	ModelID    string `json:"modelID"`
}

type textPart struct {
	Type string `json:"type"` // "text"
	Text string `json:"text"`
}

// sessionPath is the API path of an OpenCode session's resource.
func sessionPath(id, rest string) string { return "/session/" + url.PathEscape(id) + rest }

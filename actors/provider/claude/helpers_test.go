package claude_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/agenthost/mcpruntime/actors/provider/agenttest"
	"github.com/agenthost/mcpruntime/actors/provider/claude"
	"github.com/agenthost/mcpruntime/actors/provider/drivertest"
)

// deadline bounds every wait; a correct driver is never near it.
const deadline = 45 * time.Second

// apiKeyVar is the runtime's variable the instances take the model key
// from (Config.APIKeyEnv), and apiKey its value: a secret like the token.
const (
	apiKeyVar = "CLAUDE_TEST_MODEL_KEY"
	apiKey    = "model-key-8c1a2b"
)

// env is a runtime on loopback with claude instances whose model is the
// scripted one, its log captured, and the requests its MCP endpoint got
// logged by Authorization header.
type env struct {
	*drivertest.Env

	authMu sync.Mutex          // guards auths and log
	auths  map[string]int      // Authorization header → requests the endpoint got with it
	log    map[string][]string // Authorization header → each request's HTTP method, MCP method and status ("?" until answered), in order
}

// requestLog is what the endpoint got with authorization, in order.
func (e *env) requestLog(authorization string) []string {
	e.authMu.Lock()
	defer e.authMu.Unlock()
	return slices.Clone(e.log[authorization])
}

// statusWriter keeps a response's status.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// requestsWith is how many requests the endpoint got with authorization.
func (e *env) requestsWith(authorization string) int {
	e.authMu.Lock()
	defer e.authMu.Unlock()
	return e.auths[authorization]
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{auths: map[string]int{}, log: map[string][]string{}}
	e.Env = drivertest.New(t, drivertest.Options{
		Kind: claude.Kind, Factory: claude.Factory, Config: claudeConfig,
		Started: "claude started", Deadline: deadline,
		APIKeyVar: apiKeyVar, APIKey: apiKey,
		Handler: e.logRequests,
	})
	return e
}

// logRequests is h logging each request in auths and log.
func (e *env) logRequests(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		body, _ := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(body, &m)
		// Logged as the request comes (its status once it is answered), so
		// the log's order is the requests'.
		e.authMu.Lock()
		e.auths[auth]++
		i := len(e.log[auth])
		e.log[auth] = append(e.log[auth], r.Method+" "+m.Method+" ?")
		e.authMu.Unlock()
		sw := &statusWriter{ResponseWriter: w}
		h.ServeHTTP(sw, r)
		e.authMu.Lock()
		e.log[auth][i] = fmt.Sprintf("%s %s %d", r.Method, m.Method, sw.status)
		e.authMu.Unlock()
	})
}

// claudeConfig is a claude instance's configuration against the scripted
// model, its sessions' directories under configDir.
func claudeConfig(e *drivertest.Env, configDir string) map[string]any {
	return map[string]any{
		"command":    agenttest.Binary(e.T, "claude"),
		"inheritEnv": []string{"PATH"},
		"configDir":  configDir,
		"baseURL":    e.Model.URL,
		"apiKeyEnv":  apiKeyVar,
		"grace":      "3s",
	}
}

// waitGone waits until no process is left in group pgid.
func waitGone(t *testing.T, what string, pgid int) {
	t.Helper()
	drivertest.WaitGone(t, what, pgid, deadline)
}

// claudeBinary is the pinned Claude Code CLI.
func claudeBinary(t *testing.T) string { return agenttest.Binary(t, "claude") }

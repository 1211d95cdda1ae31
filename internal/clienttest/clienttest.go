// Package clienttest drives real MCP clients against the real binaries in
// their end-to-end tests (cmd/runtime, examples/everything): the official
// TypeScript SDK v2 client speaking 2026-07-28 (e2e/oauth-client/modern.mjs,
// RunModern), a recorder of what the official go-sdk client sends and gets
// on the wire (Recorder), the checks both eras' tests share about that wire
// (WantStateless), and a bare 2026-07-28 request for the test's own side of
// a conversation (PostModern). Imported by tests only.
package clienttest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Modern is the 2026-07-28 protocol version the clients are pinned to.
const Modern = "2026-07-28"

// Call is a tools/call's name and arguments.
type Call struct {
	Name      string         `json:"name"`
	Arguments map[string]any `json:"arguments"`
}

// Run is what modern.mjs is asked to do.
type Run struct {
	URL, Token string
	// Mode is "pinned" (versionNegotiation {pin: '2026-07-28'}) or "auto".
	Mode string
	// Call is the one tools/call of step "tools/call".
	Call Call
	// Listen is the subscriptions/listen filter of step "listen".
	Listen map[string]any
	// Trigger, called on the test's goroutine once the listen stream is
	// acknowledged, makes the change the client must then hear.
	Trigger func()
	// Ask, if set, is the tool of step "input", which asks the client.
	Ask *Call
}

// Exchange is one HTTP request and its answer, as a client saw them.
type Exchange struct {
	Method  string `json:"method"`
	RPC     string `json:"rpc"`
	Version string `json:"version"`
	Status  int    `json:"status"`
	// SessionID: the request or the answer had an Mcp-Session-Id.
	SessionID bool `json:"sessionId"`
	// RequestState: params.requestState was sent back.
	RequestState   bool     `json:"requestState"`
	InputResponses []string `json:"inputResponses"`
}

// Line is one line of modern.mjs's transcript.
type Line struct {
	Step            string    `json:"step"`
	Result          string    `json:"result"`
	Message         string    `json:"message"`
	HTTP            *Exchange `json:"http"`
	ProtocolVersion string    `json:"protocolVersion"`
	Era             string    `json:"era"`
	SessionID       bool      `json:"sessionId"`
	Tools           []string  `json:"tools"`
	Tool            *struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		StructuredContent map[string]any `json:"structuredContent"`
		IsError           bool           `json:"isError"`
	} `json:"tool"`
	HonoredFilter map[string]any `json:"honoredFilter"`
	Heard         *struct {
		Method string         `json:"method"`
		Params map[string]any `json:"params"`
	} `json:"heard"`
	Closed string         `json:"closed"`
	Asked  string         `json:"asked"`
	Params map[string]any `json:"params"`
}

// Transcript is modern.mjs's output.
type Transcript struct{ Lines []Line }

// Step returns the lines of step that are not HTTP exchanges.
func (tr *Transcript) Step(step string) []Line {
	var out []Line
	for _, l := range tr.Lines {
		if l.Step == step && l.HTTP == nil {
			out = append(out, l)
		}
	}
	return out
}

// One returns the only non-exchange line of step, failing t if there is
// not exactly one.
func (tr *Transcript) One(t *testing.T, step string) Line {
	t.Helper()
	ls := tr.Step(step)
	if len(ls) != 1 {
		t.Errorf("step %q: %d lines, want 1", step, len(ls))
		return Line{}
	}
	return ls[0]
}

// Exchanges returns the HTTP exchanges of step, or of every step for "".
func (tr *Transcript) Exchanges(step string) []Exchange {
	var out []Exchange
	for _, l := range tr.Lines {
		if l.HTTP != nil && (step == "" || l.Step == step) {
			out = append(out, *l.HTTP)
		}
	}
	return out
}

// ClientDir is the npm project of the TypeScript SDK clients, installed
// from its lockfile by scripts/test-deps.sh (make test runs it).
func ClientDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "e2e", "oauth-client")
}

// RunModern runs modern.mjs as r says and returns its transcript, failing
// t (never skipping) when the client is not installed or did not finish
// every step.
func RunModern(t *testing.T, r Run) *Transcript {
	t.Helper()
	dir := ClientDir()
	node := filepath.Join(dir, "node_modules", ".bin", "node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "client", "package.json")); err != nil {
		t.Fatalf("the TypeScript SDK v2 client is not installed (%v): run scripts/test-deps.sh, as make test does", err)
	}
	if _, err := os.Stat(node); err != nil {
		t.Fatalf("node is not installed (%v): run scripts/test-deps.sh, as make test does", err)
	}
	call, _ := json.Marshal(r.Call)
	listen, _ := json.Marshal(r.Listen)
	env := []string{"MCP_URL=" + r.URL, "MCP_TOKEN=" + r.Token, "MCP_MODE=" + r.Mode,
		"MCP_CALL=" + string(call), "MCP_LISTEN=" + string(listen), "PATH=" + os.Getenv("PATH")}
	if r.Ask != nil {
		ask, _ := json.Marshal(r.Ask)
		env = append(env, "MCP_ASK="+string(ask))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // detects a hang only
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "modern.mjs")
	cmd.Dir, cmd.Env = dir, env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() { // after a Fatal in Trigger too
		if !waited {
			cancel()
			cmd.Wait()
		}
	}()
	tr := &Transcript{}
	var raw strings.Builder
	triggered := false
	sc := bufio.NewScanner(stdout)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		raw.Write(sc.Bytes())
		raw.WriteByte('\n')
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Errorf("transcript line %q: %v", sc.Text(), err)
			continue
		}
		tr.Lines = append(tr.Lines, l)
		if l.Step == "listen" && l.HTTP == nil && !triggered {
			triggered = true
			if r.Trigger != nil {
				r.Trigger()
			}
		}
	}
	err, waited = cmd.Wait(), true
	t.Logf("transcript of the TypeScript SDK v2 client (%s):\n%s", r.Mode, raw.String())
	if last := tr.Lines; err != nil || len(last) == 0 || last[len(last)-1].Result != "ok" {
		t.Fatalf("modern.mjs: %v, stderr:\n%s", err, stderr.String())
	}
	return tr
}

// WantStateless checks a client's exchanges: each one in the 2026-07-28
// era (its MCP-Protocol-Version), none naming an Mcp-Session-Id either way,
// never an initialize, the first a server/discover; and each answered 200,
// or 202 for a notification.
func WantStateless(t *testing.T, who string, ex []Exchange) {
	t.Helper()
	if len(ex) == 0 || ex[0].RPC != "server/discover" {
		t.Errorf("%s: first exchange %+v, want a server/discover", who, ex)
	}
	for _, e := range ex {
		want := http.StatusOK
		if strings.HasPrefix(e.RPC, "notifications/") {
			want = http.StatusAccepted
		}
		if e.Version != Modern || e.SessionID || e.RPC == "initialize" || e.Status != want || e.Method != http.MethodPost {
			t.Errorf("%s: exchange %+v; want a POST with MCP-Protocol-Version %s, no Mcp-Session-Id, no initialize, status %d", who, e, Modern, want)
		}
	}
}

// Recorder is an http.RoundTripper for the go-sdk client's transport: it
// adds the bearer token and records each exchange.
type Recorder struct {
	Token string
	Base  http.RoundTripper

	mu sync.Mutex // guards ex
	ex []Exchange
}

// RoundTrip implements http.RoundTripper.
func (r *Recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	e := Exchange{Method: req.Method, Version: req.Header.Get("MCP-Protocol-Version"), SessionID: req.Header.Get("Mcp-Session-Id") != ""}
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		var msg struct {
			Method string `json:"method"`
			Params struct {
				RequestState   *string                    `json:"requestState"`
				InputResponses map[string]json.RawMessage `json:"inputResponses"`
			} `json:"params"`
		}
		if json.Unmarshal(b, &msg) == nil {
			e.RPC, e.RequestState = msg.Method, msg.Params.RequestState != nil
			for k := range msg.Params.InputResponses {
				e.InputResponses = append(e.InputResponses, k)
			}
		}
		req = req.Clone(req.Context())
		req.Body = io.NopCloser(bytes.NewReader(b))
	} else {
		req = req.Clone(req.Context())
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	res, err := r.Base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	e.Status, e.SessionID = res.StatusCode, e.SessionID || res.Header.Get("Mcp-Session-Id") != ""
	r.mu.Lock()
	r.ex = append(r.ex, e)
	r.mu.Unlock()
	return res, nil
}

// Exchanges returns what was recorded so far.
func (r *Recorder) Exchanges() []Exchange {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Exchange(nil), r.ex...)
}

// PostModern sends one 2026-07-28 request, as a client that declares no
// capability, and returns the answer's status and body.
func PostModern(url, token, method, name string, params map[string]any) (int, []byte, error) {
	p := map[string]any{"_meta": map[string]any{
		"io.modelcontextprotocol/protocolVersion": Modern, "io.modelcontextprotocol/clientCapabilities": map[string]any{},
	}}
	for k, v := range params {
		p[k] = v
	}
	body, err := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": p})
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", Modern)
	req.Header.Set("Mcp-Method", method)
	if name != "" {
		req.Header.Set("Mcp-Name", name)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr, Timeout: 30 * time.Second}).Do(req) // detects a hang only
	if err != nil {
		return 0, nil, fmt.Errorf("POST %s %s: %w", method, name, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// Build builds the command in the directory pkg (relative to the test's
// own, "." for its own) into a temporary directory of t and returns the
// binary's path; the binary is built with -race when this test binary was.
func Build(t *testing.T, pkg, name string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), name)
	args := []string{"build", "-o", bin}
	if raceBuild() {
		args = append(args, "-race")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute) // detects a hang only
	defer cancel()
	if out, err := exec.CommandContext(ctx, "go", append(args, pkg)...).CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", pkg, err, out)
	}
	return bin
}

// raceBuild reports whether this test binary was built with -race.
func raceBuild() bool {
	bi, ok := debug.ReadBuildInfo()
	return ok && slices.ContainsFunc(bi.Settings, func(s debug.BuildSetting) bool { return s.Key == "-race" && s.Value == "true" })
}

// ConnectGoSDK connects client to endpoint through rec, asking for
// version ("" for the client's default), and requires the 2026-07-28 era:
// that version negotiated and no session id. It returns the session and
// the names tools/list answers; the session is closed at cleanup.
func ConnectGoSDK(t *testing.T, ctx context.Context, client *mcp.Client, endpoint string, rec *Recorder, version string) (*mcp.ClientSession, []string) {
	t.Helper()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: &http.Client{Transport: rec}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	if got := cs.InitializeResult().ProtocolVersion; got != Modern || cs.ID() != "" {
		t.Errorf("negotiated %q, session id %q; want 2026-07-28 and none", got, cs.ID())
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tl := range list.Tools {
		names = append(names, tl.Name)
	}
	return cs, names
}

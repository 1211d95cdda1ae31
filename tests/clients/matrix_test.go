// Package clients runs the client matrix (SPEC §5b.24): the official Go
// SDK's client and mcp-go's, each in both protocol eras, against a host
// embedding the runtime with a tool whose result has an outputSchema, a
// long tool that reports progress, a host-side act tool, a resource
// template and a prompt; and against the examples/everything binary
// (TestClientMatrixEverything), with sampling, elicitation, logging and
// completion. The TypeScript SDK clients run the same features against
// examples/everything (TestTypeScriptSDKFeatures,
// TestModernClientsOnEverything).
package clients

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mcpgoclient "github.com/mark3labs/mcp-go/client"
	mcpgotransport "github.com/mark3labs/mcp-go/client/transport"
	mcpgo "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/goleak"

	mcpruntime "github.com/agenthost/mcpruntime"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// longSteps is how many progress notifications the long tool sends.
const longSteps = 3

type reportOut struct {
	Lines int    `json:"lines"`
	Path  string `json:"path"`
}

// host is the embedder of the matrix: its own tools besides the
// built-ins, served on a loopback httptest server; it returns the URL of
// its endpoint and a read-only client token.
func host(t *testing.T) (url, token string) {
	t.Helper()
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: slog.New(slog.DiscardHandler), ToolTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	type reportIn struct {
		Path string `json:"path" jsonschema:"the file to count"`
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mcpruntime.AddTool(rt, mcpruntime.Tool{Tool: mcp.Tool{Name: "report", Description: "counts a file's lines"}, Access: mcpruntime.AccessRead},
		func(_ context.Context, _ *mcpruntime.ToolCall, in reportIn) (*mcp.CallToolResult, reportOut, error) {
			return nil, reportOut{Lines: len(in.Path), Path: in.Path}, nil
		}))
	must(rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "long", Description: "works in three steps"}, Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			for i := 1; i <= longSteps; i++ {
				call.Progress(float64(i), longSteps, fmt.Sprintf("step %d", i))
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "done"}}}, nil
		}}))
	must(rt.RegisterTool(mcpruntime.Tool{Tool: mcp.Tool{Name: "deploy", Description: "deploys main"}, Access: mcpruntime.AccessAct,
		Handler: func(_ context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed"}}}, nil
		}}))
	must(rt.RegisterResourceTemplate(mcpruntime.ResourceTemplate{ResourceTemplate: mcp.ResourceTemplate{URITemplate: "notes://{id}", Name: "note", MIMEType: "text/plain"},
		Access: mcpruntime.AccessRead, Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: read.URI, MIMEType: "text/plain", Text: "note " + read.Vars["id"]}}}, nil
		}}))
	must(rt.RegisterPrompt(mcpruntime.Prompt{Prompt: mcp.Prompt{Name: "review", Arguments: []*mcp.PromptArgument{{Name: "path", Required: true}}},
		Access: mcpruntime.AccessRead, Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "Review " + get.Arguments["path"]}}}}, nil
		}}))
	h, err := rt.MCPHandler(mcpruntime.MCPOptions{})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(func() { h.Close(); srv.Close() })
	grant, err := rt.IssueClient(context.Background(), "matrix", "read-only")
	if err != nil {
		t.Fatal(err)
	}
	return srv.URL + "/mcp", grant.Token
}

// client is one client of the matrix in one era.
type client interface {
	version() string
	tools(ctx context.Context) ([]string, error)
	// call returns the result's text, its structured content as JSON, and
	// how many progress notifications arrived for it (with a token).
	call(ctx context.Context, name string, args map[string]any, progress bool) (text, structured string, isError bool, progressed int, err error)
	read(ctx context.Context, uri string) (string, error)
	prompt(ctx context.Context, name string, args map[string]string) (string, error)
	complete(ctx context.Context, prompt, arg, value string) ([]string, error)
	// askLogs asks for log messages at info and above: logging/setLevel
	// in a 2025 session, the logLevel of every later request's _meta in
	// 2026-07-28.
	askLogs(ctx context.Context) error
	// logged is how many notifications/message have arrived.
	logged() int
	close()
}

// Every client of the matrix answers a sampling request with
// sampledText and an elicitation by accepting elicitedName.
const (
	sampledText  = "sampled by the matrix client"
	elicitedName = "matrix-user"
)

var clients = []struct {
	name    string
	version string
	connect func(t *testing.T, url, token, version string) client
}{
	{"go-sdk", "2025-11-25", connectGoSDK},
	{"go-sdk", "2026-07-28", connectGoSDK},
	{"mcp-go", "2025-11-25", connectMCPGo},
	{"mcp-go", "2026-07-28", connectMCPGo},
}

// TestClientMatrix: every feature of the host with every client in both
// eras.
func TestClientMatrix(t *testing.T) {
	url, token := host(t)
	for _, c := range clients {
		t.Run(c.name+"/"+c.version, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // detects a hang only
			defer cancel()
			cl := c.connect(t, url, token, c.version)
			defer cl.close()
			if got := cl.version(); got != c.version {
				t.Errorf("negotiated %q, want %q", got, c.version)
			}
			t.Run("tools/list", func(t *testing.T) {
				names, err := cl.tools(ctx)
				for _, want := range []string{"report", "long", "deploy", "thread_read"} {
					if err != nil || !slices.Contains(names, want) {
						t.Errorf("tools %v (%v): no %s", names, err, want)
					}
				}
			})
			t.Run("outputSchema", func(t *testing.T) {
				_, sc, isErr, _, err := cl.call(ctx, "report", map[string]any{"path": "main.go"}, false)
				if err != nil || isErr || sc != `{"lines":7,"path":"main.go"}` {
					t.Errorf("report = %s (isError %v), %v", sc, isErr, err)
				}
			})
			t.Run("progress", func(t *testing.T) {
				text, _, isErr, n, err := cl.call(ctx, "long", nil, true)
				if err != nil || isErr || text != "done" || n != longSteps {
					t.Errorf("long = %q (isError %v), %d progress notifications, %v; want done and %d", text, isErr, n, err, longSteps)
				}
			})
			t.Run("act", func(t *testing.T) {
				text, _, isErr, _, err := cl.call(ctx, "deploy", nil, false)
				if err != nil || isErr || text != "deployed" {
					t.Errorf("deploy by a read-only client = %q (isError %v), %v", text, isErr, err)
				}
			})
			t.Run("resources/read", func(t *testing.T) {
				if text, err := cl.read(ctx, "notes://7"); err != nil || text != "note 7" {
					t.Errorf("read notes://7 = %q, %v", text, err)
				}
			})
			t.Run("prompts/get", func(t *testing.T) {
				if text, err := cl.prompt(ctx, "review", map[string]string{"path": "a.go"}); err != nil || text != "Review a.go" {
					t.Errorf("prompt review = %q, %v", text, err)
				}
			})
		})
	}
}

// The official Go SDK's client.

type goSDK struct {
	cs       *mcp.ClientSession
	progress *atomic.Int32
	logs     *atomic.Int32
	logLevel string // set by askLogs, sent in every later call's _meta in 2026-07-28
}

type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

func connectGoSDK(t *testing.T, url, token, version string) client {
	t.Helper()
	progress, logs := &atomic.Int32{}, &atomic.Int32{}
	c := mcp.NewClient(&mcp.Implementation{Name: "matrix-go-sdk", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) },
		LoggingMessageHandler:       func(context.Context, *mcp.LoggingMessageRequest) { logs.Add(1) },
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Role: "assistant", Model: "matrix", Content: &mcp.TextContent{Text: sampledText}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"username": elicitedName}}, nil
		},
	})
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, tr}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("go-sdk connect (%s): %v", version, err)
	}
	return &goSDK{cs: cs, progress: progress, logs: logs}
}

func (g *goSDK) version() string { return g.cs.InitializeResult().ProtocolVersion }
func (g *goSDK) close()          { g.cs.Close() }

func (g *goSDK) tools(ctx context.Context) ([]string, error) {
	res, err := g.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names, nil
}

func (g *goSDK) call(ctx context.Context, name string, args map[string]any, progress bool) (string, string, bool, int, error) {
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if args == nil {
		p.Arguments = map[string]any{}
	}
	if progress {
		p.SetProgressToken("p-" + name)
	}
	if g.logLevel != "" && g.version() >= "2026" {
		meta := p.GetMeta()
		if meta == nil {
			meta = map[string]any{}
		}
		meta[mcp.MetaKeyLogLevel] = g.logLevel
		p.SetMeta(meta)
	}
	before := g.progress.Load()
	res, err := g.cs.CallTool(ctx, p)
	if err != nil {
		return "", "", false, 0, err
	}
	sc, _ := json.Marshal(res.StructuredContent)
	if progress {
		// The go-sdk client runs its notification handlers apart from the
		// response, which can return first though the server sent the
		// notifications before it on the same stream: wait for them.
		for deadline := time.Now().Add(5 * time.Second); g.progress.Load()-before < longSteps && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return goSDKText(res.Content), string(sc), res.IsError, int(g.progress.Load() - before), nil
}

func (g *goSDK) read(ctx context.Context, uri string) (string, error) {
	res, err := g.cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
	if err != nil || len(res.Contents) == 0 {
		return "", err
	}
	return res.Contents[0].Text, nil
}

func (g *goSDK) prompt(ctx context.Context, name string, args map[string]string) (string, error) {
	res, err := g.cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: name, Arguments: args})
	if err != nil || len(res.Messages) == 0 {
		return "", err
	}
	return goSDKText([]mcp.Content{res.Messages[0].Content}), nil
}

func (g *goSDK) complete(ctx context.Context, prompt, arg, value string) ([]string, error) {
	res, err := g.cs.Complete(ctx, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: prompt},
		Argument: mcp.CompleteParamsArgument{Name: arg, Value: value}})
	if err != nil {
		return nil, err
	}
	return res.Completion.Values, nil
}

// askLogs: the go-sdk client has logging/setLevel for a 2025 session; for
// 2026-07-28 its user puts the level in each request's _meta.
func (g *goSDK) askLogs(ctx context.Context) error {
	g.logLevel = "info"
	if g.version() >= "2026" {
		return nil
	}
	return g.cs.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"})
}

func (g *goSDK) logged() int { return int(g.logs.Load()) }

func goSDKText(cs []mcp.Content) string {
	for _, c := range cs {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

// mcp-go's client.

type mcpGo struct {
	c        *mcpgoclient.Client
	v        string
	progress *atomic.Int32
	logs     *atomic.Int32
}

type mcpGoAsker struct{}

func (mcpGoAsker) CreateMessage(context.Context, mcpgo.CreateMessageRequest) (*mcpgo.CreateMessageResult, error) {
	return &mcpgo.CreateMessageResult{Model: "matrix",
		SamplingMessage: mcpgo.SamplingMessage{Role: mcpgo.RoleAssistant, Content: mcpgo.TextContent{Type: "text", Text: sampledText}}}, nil
}

func (mcpGoAsker) Elicit(context.Context, mcpgo.ElicitationRequest) (*mcpgo.ElicitationResult, error) {
	return &mcpgo.ElicitationResult{ElicitationResponse: mcpgo.ElicitationResponse{
		Action: mcpgo.ElicitationResponseActionAccept, Content: map[string]any{"username": elicitedName}}}, nil
}

func connectMCPGo(t *testing.T, url, token, version string) client {
	t.Helper()
	tr, err := mcpgotransport.NewStreamableHTTP(url, mcpgotransport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + token}))
	if err != nil {
		t.Fatal(err)
	}
	c := mcpgoclient.NewClient(tr, mcpgoclient.WithProtocolVersion(version),
		mcpgoclient.WithSamplingHandler(mcpGoAsker{}), mcpgoclient.WithElicitationHandler(mcpGoAsker{}))
	progress, logs := &atomic.Int32{}, &atomic.Int32{}
	c.OnNotification(func(n mcpgo.JSONRPCNotification) {
		switch n.Method {
		case "notifications/progress":
			progress.Add(1)
		case "notifications/message":
			logs.Add(1)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("mcp-go start: %v", err)
	}
	res, err := c.Initialize(ctx, mcpgo.InitializeRequest{Params: mcpgo.InitializeParams{ProtocolVersion: version,
		ClientInfo: mcpgo.Implementation{Name: "matrix-mcp-go", Version: "1"}}})
	if err != nil {
		c.Close()
		t.Fatalf("mcp-go initialize (%s): %v", version, err)
	}
	return &mcpGo{c: c, v: res.ProtocolVersion, progress: progress, logs: logs}
}

func (m *mcpGo) version() string { return m.v }
func (m *mcpGo) close()          { m.c.Close() }

func (m *mcpGo) tools(ctx context.Context) ([]string, error) {
	res, err := m.c.ListTools(ctx, mcpgo.ListToolsRequest{})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	return names, nil
}

func (m *mcpGo) call(ctx context.Context, name string, args map[string]any, progress bool) (string, string, bool, int, error) {
	req := mcpgo.CallToolRequest{Params: mcpgo.CallToolParams{Name: name, Arguments: args}}
	if args == nil {
		req.Params.Arguments = map[string]any{}
	}
	if progress {
		req.Params.Meta = &mcpgo.Meta{ProgressToken: "p-" + name}
	}
	before := m.progress.Load()
	res, err := m.c.CallTool(ctx, req)
	if err != nil {
		return "", "", false, 0, err
	}
	sc, _ := json.Marshal(res.StructuredContent)
	return mcpGoText(res.Content), string(sc), res.IsError, int(m.progress.Load() - before), nil
}

func (m *mcpGo) read(ctx context.Context, uri string) (string, error) {
	res, err := m.c.ReadResource(ctx, mcpgo.ReadResourceRequest{Params: mcpgo.ReadResourceParams{URI: uri}})
	if err != nil || len(res.Contents) == 0 {
		return "", err
	}
	if t, ok := res.Contents[0].(mcpgo.TextResourceContents); ok {
		return t.Text, nil
	}
	return fmt.Sprintf("%T", res.Contents[0]), nil
}

func (m *mcpGo) prompt(ctx context.Context, name string, args map[string]string) (string, error) {
	res, err := m.c.GetPrompt(ctx, mcpgo.GetPromptRequest{Params: mcpgo.GetPromptParams{Name: name, Arguments: args}})
	if err != nil || len(res.Messages) == 0 {
		return "", err
	}
	return mcpGoText([]mcpgo.Content{res.Messages[0].Content}), nil
}

func (m *mcpGo) complete(ctx context.Context, prompt, arg, value string) ([]string, error) {
	res, err := m.c.Complete(ctx, mcpgo.CompleteRequest{Params: mcpgo.CompleteParams{
		Ref: mcpgo.PromptReference{Type: "ref/prompt", Name: prompt}, Argument: mcpgo.CompleteArgument{Name: arg, Value: value}}})
	if err != nil {
		return nil, err
	}
	return res.Completion.Values, nil
}

// askLogs: mcp-go's SetLevel sends logging/setLevel in a 2025 session and
// keeps the level for every later request's _meta in 2026-07-28.
func (m *mcpGo) askLogs(ctx context.Context) error {
	return m.c.SetLevel(ctx, mcpgo.SetLevelRequest{Params: mcpgo.SetLevelParams{Level: mcpgo.LoggingLevelInfo}})
}

func (m *mcpGo) logged() int { return int(m.logs.Load()) }

func mcpGoText(cs []mcpgo.Content) string {
	for _, c := range cs {
		if t, ok := c.(mcpgo.TextContent); ok {
			return t.Text
		}
		if t, ok := c.(*mcpgo.TextContent); ok {
			return t.Text
		}
	}
	return strings.Repeat("?", len(cs))
}

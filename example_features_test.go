package mcpruntime_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The worked examples of the README and of docs/embedding.md: each region
// between "readme:start NAME" and "readme:end" is copied verbatim into the
// page that readmeRegions names, and TestREADMEExamples keeps the two the
// same.

// readme:start embed
func Example_embedding() {
	ctx := context.Background()
	rt, err := mcpruntime.New(mcpruntime.Config{}) // the zero Config: one node, in memory
	if err != nil {
		log.Fatal(err)
	}
	defer rt.Close()                                      // revokes every credential
	endpoint, _ := rt.MCPHandler(mcpruntime.MCPOptions{}) // an http.Handler: serve it at /mcp
	defer endpoint.Close()

	// The agent the host starts on thread t1 gets the credential of (t1, codex), shown once.
	rt.RegisterInstance(ctx, "codex", mcpruntime.InstanceSpec{Driver: "inproc"})
	rt.CreateThread(ctx, "t1", mcpruntime.ThreadOptions{Instance: "codex"})
	agent, _ := rt.OpenProviderSession(ctx, "t1", "codex")
	// A plain MCP client (an IDE, the MCP Inspector) gets a client token.
	ide, _ := rt.IssueClient(ctx, "my-ide", "read-only")

	fmt.Println(agent.Authorization[:13], "Bearer "+ide.Token[:6])
	// Output: Bearer mcprt_ Bearer mcprc_
}

// readme:end

// readme:start tool
type weatherIn struct {
	City string `json:"city" jsonschema:"the city to report on"`
}

type weatherOut struct {
	City  string  `json:"city"`
	TempC float64 `json:"tempC"`
}

func registerWeather(rt *mcpruntime.Runtime) error {
	// Input and output schemas are inferred from the types; the arguments
	// arrive validated and decoded; the Out becomes structuredContent (and
	// its JSON a text block). AccessRead: any live principal may call it,
	// and it is listed with readOnlyHint.
	return mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "weather", Title: "Weather", Description: "The weather in a city."},
		Access: mcpruntime.AccessRead,
	}, func(ctx context.Context, call *mcpruntime.ToolCall, in weatherIn) (*mcp.CallToolResult, weatherOut, error) {
		call.Progress(1, 1, "asked the sky")
		return nil, weatherOut{City: in.City, TempC: 21.5}, nil
	})
}

// readme:end

// readme:start resource
func registerNotes(rt *mcpruntime.Runtime) error {
	// A template (RFC 6570): test://notes/{id}. AccessReadAsCaller: provider
	// credentials only; anyone else reads, lists and subscribes to nothing
	// here, exactly as if it did not exist.
	return rt.RegisterResourceTemplate(mcpruntime.ResourceTemplate{
		ResourceTemplate: mcp.ResourceTemplate{URITemplate: "test://notes/{id}", Name: "note", MIMEType: "text/plain"},
		Access:           mcpruntime.AccessReadAsCaller,
		Handler: func(ctx context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			if read.Vars["id"] != "1" {
				return nil, mcpruntime.ErrResourceNotFound
			}
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{
				{URI: read.URI, MIMEType: "text/plain", Text: "note 1, for thread " + read.Caller.Thread},
			}}, nil
		},
	})
	// When a note changes: rt.ResourceUpdated("test://notes/1") tells the
	// sessions that subscribed and may read it.
}

// readme:end

// readme:start prompt
func registerReview(rt *mcpruntime.Runtime) error {
	return rt.RegisterPrompt(mcpruntime.Prompt{
		Prompt: mcp.Prompt{Name: "review", Description: "Review a file.",
			Arguments: []*mcp.PromptArgument{{Name: "path", Required: true}}},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.TextContent{Text: "Review " + get.Arguments["path"] + " for bugs."}},
			}}, nil
		},
		Complete: func(ctx context.Context, req *mcpruntime.CompletionRequest) (*mcp.CompletionResultDetails, error) {
			var paths []string
			for _, p := range []string{"main.go", "main_test.go", "README.md"} {
				if strings.HasPrefix(p, req.Argument.Value) {
					paths = append(paths, p)
				}
			}
			return &mcp.CompletionResultDetails{Values: paths}, nil
		},
	})
}

// readme:end

// readme:start elicitation
type branchIn struct {
	Branch string `json:"branch"`
}

func registerDeleteBranch(rt *mcpruntime.Runtime) error {
	// One handler for both protocol eras: it returns InputRequired for what
	// it still needs, and is called again with the answers. In a 2025
	// session the runtime sends elicitation/create on the call's stream and
	// waits; in the 2026-07-28 era the client calls again with them.
	return mcpruntime.AddTool(rt, mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "delete_branch", Description: "Deletes a branch once the user confirms."},
		Access: mcpruntime.AccessRead,
	}, func(ctx context.Context, call *mcpruntime.ToolCall, in branchIn) (*mcp.CallToolResult, any, error) {
		e, ok := call.Elicitation("confirm")
		if !ok {
			if call.ClientCapabilities().Elicitation == nil {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "cannot ask; kept " + in.Branch}}}, nil, nil
			}
			return mcpruntime.InputRequired(mcp.InputRequestMap{"confirm": &mcp.ElicitParams{
				Message: "Delete branch " + in.Branch + "?",
				RequestedSchema: map[string]any{"type": "object", "required": []string{"ok"},
					"properties": map[string]any{"ok": map[string]any{"type": "boolean"}}},
			}}, "asked:"+in.Branch), nil, nil
		}
		if e.Action != "accept" || e.Content["ok"] != true || call.State() != "asked:"+in.Branch {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "kept " + in.Branch}}}, nil, nil
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deleted " + in.Branch}}}, nil, nil
	})
}

// readme:end

// Example_features registers the README's tool, resource, prompt and
// elicitation, and calls them as an embedder can.
func Example_features() {
	ctx := context.Background()
	rt, err := mcpruntime.New(mcpruntime.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	for _, register := range []func(*mcpruntime.Runtime) error{registerWeather, registerNotes, registerReview, registerDeleteBranch} {
		if err := register(rt); err != nil {
			panic(err)
		}
	}
	grant, _ := rt.IssueClient(ctx, "example", "read-only")
	client, _ := rt.Authenticate(grant.Token)

	res, _ := rt.CallTool(ctx, client, "weather", []byte(`{"city":"Oslo"}`), nil)
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	_, err = rt.ReadResource(ctx, client, "test://notes/1")
	fmt.Println(err)
	p, _ := rt.GetPrompt(ctx, client, "review", map[string]string{"path": "main.go"})
	fmt.Println(p.Messages[0].Content.(*mcp.TextContent).Text)
	c, _ := rt.Complete(ctx, client, &mcp.CompleteParams{Ref: &mcp.CompleteReference{Type: "ref/prompt", Name: "review"}, Argument: mcp.CompleteParamsArgument{Name: "path", Value: "main"}})
	fmt.Println(c.Completion.Values)
	res, _ = rt.CallTool(ctx, client, "delete_branch", []byte(`{"branch":"old"}`), nil)
	fmt.Println(res.Content[0].(*mcp.TextContent).Text)
	// Output:
	// {"city":"Oslo","tempC":21.5}
	// resource "test://notes/1": resource not found
	// Review main.go for bugs.
	// [main.go main_test.go]
	// cannot ask; kept old
}

// readme:start host
// newHost is a host that serves only its own tools — none of the
// runtime's built-ins — each run bounded.
func newHost() (*mcpruntime.Runtime, error) {
	rt, err := mcpruntime.New(mcpruntime.Config{OmitBuiltins: []string{"*"}, ToolTimeout: 30 * time.Second})
	if err != nil {
		return nil, err
	}
	// deploy has side effects of its own but changes no thread: every
	// principal the endpoint admitted may call it, and it is not listed
	// as read-only. Its ctx ends after two minutes (the client then gets
	// the isError result "timeout: …").
	deploy := rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "deploy", Description: "Deploys the main branch."},
		Access: mcpruntime.AccessAct, Timeout: 2 * time.Minute,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "deployed for " + call.Caller.Namespace}}}, nil
		},
	})
	// summarize asks the client's model. Sampling answers one shape in
	// both eras (a 2025 client's single content block becomes a list).
	summarize := rt.RegisterTool(mcpruntime.Tool{
		Tool:   mcp.Tool{Name: "summarize", Description: "Summarizes the release notes."},
		Access: mcpruntime.AccessRead,
		Handler: func(ctx context.Context, call *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
			ans, ok := call.Sampling("summary")
			if !ok {
				return mcpruntime.InputRequired(mcp.InputRequestMap{"summary": &mcp.CreateMessageParams{MaxTokens: 200,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "Summarize: …"}}}}}, ""), nil
			}
			for _, c := range ans.Content {
				if t, ok := c.(*mcp.TextContent); ok {
					return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: t.Text}}}, nil
				}
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "no summary"}}, IsError: true}, nil
		},
	})
	if err := errors.Join(deploy, summarize); err != nil {
		rt.Close()
		return nil, err
	}
	return rt, nil
}

// readme:end

// Example_host calls the host's tools as a read-only client.
func Example_host() {
	ctx := context.Background()
	rt, err := newHost()
	if err != nil {
		panic(err)
	}
	defer rt.Close()
	for _, t := range rt.Tools() {
		fmt.Println(t.Name, t.Access)
	}
	grant, _ := rt.IssueClient(ctx, "ci", "read-only")
	client, _ := rt.Authenticate(grant.Token)
	res, _ := rt.CallTool(ctx, client, "deploy", nil, nil)
	fmt.Println(res.Content[0].(*mcp.TextContent).Text[:len("deployed for client:")])
	res, _ = rt.CallTool(ctx, client, "summarize", nil, nil) // nobody to ask here
	fmt.Println(len(res.InputRequests), "input request")
	// Output:
	// deploy act
	// summarize read
	// deployed for client:
	// 1 input request
}

// readmeRegions names the page that shows each region of this file.
var readmeRegions = map[string]string{
	"embed":       "README.md",
	"tool":        "docs/embedding.md",
	"resource":    "docs/embedding.md",
	"prompt":      "docs/embedding.md",
	"elicitation": "docs/embedding.md",
	"host":        "docs/embedding.md",
}

// TestREADMEExamples: the code of the README and of docs/embedding.md is
// this file's, verbatim.
func TestREADMEExamples(t *testing.T) {
	src, err := os.ReadFile("example_features_test.go")
	noErr(t, err)
	regions := regexp.MustCompile(`(?s)// readme:start (\w+)\n(.*?)\n// readme:end`).FindAllSubmatch(src, -1)
	if len(regions) != len(readmeRegions) {
		t.Fatalf("%d regions, want %d", len(regions), len(readmeRegions))
	}
	for _, r := range regions {
		page, ok := readmeRegions[string(r[1])]
		if !ok {
			t.Errorf("region %s names no page", r[1])
			continue
		}
		text, err := os.ReadFile(page)
		noErr(t, err)
		if !strings.Contains(string(text), string(r[2])) {
			t.Errorf("%s does not show region %s of example_features_test.go as it is", page, r[1])
		}
	}
}

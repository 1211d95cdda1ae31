package mcpruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// The README's worked example of the typed API (section "Tools, resources,
// prompts and asking the client"): the regions between "readme:start" and
// "readme:end" are copied into it verbatim, and TestREADMEExamples keeps
// the two the same.

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
		ans, ok := call.Input("confirm")
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
		if e := ans.(*mcp.ElicitResult); e.Action != "accept" || e.Content["ok"] != true || call.State() != "asked:"+in.Branch {
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

// TestREADMEExamples: the README's code of the typed API is this file's,
// verbatim.
func TestREADMEExamples(t *testing.T) {
	src, err := os.ReadFile("example_features_test.go")
	noErr(t, err)
	readme, err := os.ReadFile("README.md")
	noErr(t, err)
	regions := regexp.MustCompile(`(?s)// readme:start (\w+)\n(.*?)\n// readme:end`).FindAllSubmatch(src, -1)
	if len(regions) != 4 {
		t.Fatalf("%d README regions, want 4", len(regions))
	}
	for _, r := range regions {
		if !strings.Contains(string(readme), string(r[2])) {
			t.Errorf("README does not show region %s of example_features_test.go as it is", r[1])
		}
	}
}

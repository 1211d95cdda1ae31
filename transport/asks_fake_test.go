package transport_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/transport"
)

// nameSchema is the requested schema of the fake's ask_name: a required
// string name.
var nameSchema = map[string]any{
	"type":       "object",
	"properties": map[string]any{"name": map[string]any{"type": "string", "minLength": 1}},
	"required":   []string{"name"},
}

// askingTools registers the fake's tools that need the client, written
// once for both eras as the seam has it: each answers from
// req.InputResponses when the answer is there and returns InputRequests
// (and a state) otherwise.
//
//	ask_name    elicitation (form): "hello <name>", or the action declined
//	ask_sample  sampling/createMessage: "sampled: <text>"
//	ask_roots   roots/list: "roots: <n> <first uri>"
//	ask_all     all three in one round: their answers, and the state it kept
//	ask_url     a URL-mode elicitation: its action
//	ask_always  asks for its roots again whatever the answer (round bound)
func askingTools(f *fake) {
	f.serveTool("ask_name", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		if ans, ok := req.InputResponses["name"].(*mcp.ElicitResult); ok {
			if ans.Action != "accept" {
				return transport.Response{Result: textResult(ans.Action + " (state " + req.State + ")")}
			}
			return transport.Response{Result: textResult(fmt.Sprintf("hello %v (state %s)", ans.Content["name"], req.State))}
		}
		n, _ := strconv.Atoi(req.State)
		return transport.Response{
			InputRequests: mcp.InputRequestMap{"name": &mcp.ElicitParams{Message: "Your name?", RequestedSchema: nameSchema}},
			State:         strconv.Itoa(n + 1), // counts the rounds
		}
	})
	f.serveTool("ask_sample", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		if ans, ok := req.InputResponses["q"].(*mcp.CreateMessageResult); ok {
			text := ""
			if t, ok := ans.Content.(*mcp.TextContent); ok {
				text = t.Text
			}
			return transport.Response{Result: textResult("sampled: " + text + " by " + ans.Model)}
		}
		return transport.Response{InputRequests: mcp.InputRequestMap{"q": &mcp.CreateMessageParams{
			Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "2+2?"}}}, MaxTokens: 10,
		}}}
	})
	f.serveTool("ask_roots", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		if ans, ok := req.InputResponses["roots"].(*mcp.ListRootsResult); ok {
			first := ""
			if len(ans.Roots) > 0 {
				first = ans.Roots[0].URI
			}
			return transport.Response{Result: textResult(fmt.Sprintf("roots: %d %s", len(ans.Roots), first))}
		}
		return transport.Response{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}}
	})
	f.serveTool("ask_all", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		name, okN := req.InputResponses["name"].(*mcp.ElicitResult)
		sample, okS := req.InputResponses["q"].(*mcp.CreateMessageResult)
		roots, okR := req.InputResponses["roots"].(*mcp.ListRootsResult)
		if okN && okS && okR {
			return transport.Response{Result: textResult(fmt.Sprintf("%s %v, %s, %d roots", req.State, name.Content["name"], sample.Model, len(roots.Roots)))}
		}
		return transport.Response{State: "kept", InputRequests: mcp.InputRequestMap{
			"name":  &mcp.ElicitParams{Message: "Your name?", RequestedSchema: nameSchema},
			"q":     &mcp.CreateMessageParams{Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}, MaxTokens: 5},
			"roots": &mcp.ListRootsParams{},
		}}
	})
	f.serveTool("ask_url", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		if ans, ok := req.InputResponses["login"].(*mcp.ElicitResult); ok {
			return transport.Response{Result: textResult("url: " + ans.Action)}
		}
		return transport.Response{InputRequests: mcp.InputRequestMap{"login": &mcp.ElicitParams{
			Mode: "url", Message: "Sign in", URL: "https://example.test/login", ElicitationID: "e-1",
		}}}
	})
	f.serveTool("ask_always", func(_ context.Context, req *transport.Request, _ json.RawMessage) transport.Response {
		n, _ := strconv.Atoi(req.State)
		return transport.Response{InputRequests: mcp.InputRequestMap{"roots": &mcp.ListRootsParams{}}, State: strconv.Itoa(n + 1)}
	})
}

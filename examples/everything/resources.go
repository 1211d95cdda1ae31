package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime"
)

const watchedURI = "test://watched-resource"

// resource is a read resource answering one content.
func resource(uri, name, description, mime string, contents func(uri string) *mcp.ResourceContents) mcpruntime.Resource {
	return mcpruntime.Resource{
		Resource: mcp.Resource{URI: uri, Name: name, Description: description, MIMEType: mime},
		Access:   mcpruntime.AccessRead,
		Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{contents(read.URI)}}, nil
		},
	}
}

func registerResources(rt *mcpruntime.Runtime) error {
	static := rt.RegisterResource(resource("test://static-text", "static-text", "A static text resource for testing", "text/plain",
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "text/plain", Text: "This is the content of the static text resource."}
		}))
	binary := rt.RegisterResource(resource("test://static-binary", "static-binary", "A static binary resource (image) for testing", "image/png",
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "image/png", Blob: pngData}
		}))
	watched := rt.RegisterResource(resource(watchedURI, "watched-resource", "A resource that is updated every 3 seconds", "text/plain",
		func(uri string) *mcp.ResourceContents {
			return &mcp.ResourceContents{URI: uri, MIMEType: "text/plain", Text: "Watched resource content"}
		}))
	// The README's resource template example.
	template := rt.RegisterResourceTemplate(mcpruntime.ResourceTemplate{
		ResourceTemplate: mcp.ResourceTemplate{
			URITemplate: "test://template/{id}/data",
			Name:        "template",
			Description: "A resource template with parameter substitution",
			MIMEType:    "application/json",
		},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, read *mcpruntime.ResourceRead) (*mcp.ReadResourceResult, error) {
			id := read.Vars["id"]
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{
				URI: read.URI, MIMEType: "application/json",
				Text: fmt.Sprintf(`{"id":%q,"templateTest":true,"data":"Data for ID: %s"}`, id, id),
			}}}, nil
		},
	})
	return errors.Join(static, binary, watched, template)
}

// prompt is a read prompt of one user text message.
func prompt(name, description, message string) mcpruntime.Prompt {
	return mcpruntime.Prompt{
		Prompt: mcp.Prompt{Name: name, Description: description},
		Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: message}}}}, nil
		},
	}
}

func registerPrompts(rt *mcpruntime.Runtime) error {
	simple := prompt("test_simple_prompt", "A simple prompt without arguments", "This is a simple prompt for testing.")
	simple.Title = "Simple Test Prompt"
	// The README's prompt example: arguments, and their completion.
	withArgs := mcpruntime.Prompt{
		Prompt: mcp.Prompt{
			Name: "test_prompt_with_arguments", Title: "Prompt With Arguments", Description: "A prompt with required arguments",
			Arguments: []*mcp.PromptArgument{
				{Name: "arg1", Description: "First test argument", Required: true},
				{Name: "arg2", Description: "Second test argument", Required: true},
			},
		},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{
				Text: fmt.Sprintf("Prompt with arguments: arg1='%s', arg2='%s'", get.Arguments["arg1"], get.Arguments["arg2"]),
			}}}}, nil
		},
		Complete: func(_ context.Context, req *mcpruntime.CompletionRequest) (*mcp.CompletionResultDetails, error) {
			var vals []string
			for _, v := range []string{"testValue1", "testValue2", "other"} {
				if strings.HasPrefix(v, req.Argument.Value) {
					vals = append(vals, v)
				}
			}
			return &mcp.CompletionResultDetails{Values: vals, Total: len(vals)}, nil
		},
	}
	embedded := mcpruntime.Prompt{
		Prompt: mcp.Prompt{
			Name: "test_prompt_with_embedded_resource", Title: "Prompt With Embedded Resource", Description: "A prompt that includes an embedded resource",
			Arguments: []*mcp.PromptArgument{{Name: "resourceUri", Description: "URI of the resource to embed", Required: true}},
		},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{URI: get.Arguments["resourceUri"], MIMEType: "text/plain", Text: "Embedded resource content for testing."}}},
				{Role: "user", Content: &mcp.TextContent{Text: "Please process the embedded resource above."}},
			}}, nil
		},
	}
	image := mcpruntime.Prompt{
		Prompt: mcp.Prompt{Name: "test_prompt_with_image", Title: "Prompt With Image", Description: "A prompt that includes image content"},
		Access: mcpruntime.AccessRead,
		Handler: func(context.Context, *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{
				{Role: "user", Content: &mcp.ImageContent{Data: pngData, MIMEType: "image/png"}},
				{Role: "user", Content: &mcp.TextContent{Text: "Please analyze the image above."}},
			}}, nil
		},
	}
	input := mcpruntime.Prompt{
		Prompt: mcp.Prompt{Name: "test_input_required_result_prompt", Description: "MRTR (SEP-2322): asks for context with an elicitation"},
		Access: mcpruntime.AccessRead,
		Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			if c, ok := accepted(&get.Exchange, "user_context"); ok {
				return &mcp.GetPromptResult{Description: "A prompt with elicited context", Messages: []*mcp.PromptMessage{
					{Role: "user", Content: &mcp.TextContent{Text: fmt.Sprintf("Context: %v", c["context"])}},
				}}, nil
			}
			return &mcp.GetPromptResult{InputRequests: mcp.InputRequestMap{"user_context": &mcp.ElicitParams{
				Message:         "Please provide context for the prompt",
				RequestedSchema: map[string]any{"type": "object", "properties": map[string]any{"context": map[string]any{"type": "string"}}, "required": []string{"context"}},
			}}}, nil
		},
	}
	var errs []error
	for _, p := range []mcpruntime.Prompt{simple, withArgs, embedded, image, input} {
		errs = append(errs, rt.RegisterPrompt(p))
	}
	return errors.Join(errs...)
}

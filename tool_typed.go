package mcpruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TypedToolHandler is the handler of a tool registered with AddTool: the
// arguments decoded into In, the structured result an Out.
type TypedToolHandler[In, Out any] func(ctx context.Context, call *ToolCall, in In) (*mcp.CallToolResult, Out, error)

// AddTool registers a tool whose arguments are an In and whose structured
// result is an Out, as the go-sdk's AddTool does. Unless t sets them, the
// input schema is inferred from In and the output schema from Out (none
// when Out is any) with github.com/google/jsonschema-go; In must be a
// struct or a map (an object), or any. The arguments, validated against the
// input schema, are decoded into In. The handler's result may be nil; its
// structured content is set to the Out value, and when it has no content, a
// text block of the Out's JSON is added; the structured content is
// validated against the output schema. A result made with InputRequired is
// passed on as it is.
func AddTool[In, Out any](r *Runtime, t Tool, h TypedToolHandler[In, Out]) error {
	if h == nil {
		return fmt.Errorf("tool %s: no handler: %w", t.Name, ErrInvalidTool)
	}
	if t.InputSchema == nil {
		s, err := inferObjectSchema[In]()
		if err != nil {
			return fmt.Errorf("tool %s: input schema of %T: %v: %w", t.Name, *new(In), err, ErrInvalidTool)
		}
		t.InputSchema = s
	}
	outAny := reflect.TypeFor[Out]() == reflect.TypeFor[any]()
	if t.OutputSchema == nil && !outAny {
		s, err := jsonschema.For[Out](nil)
		if err != nil {
			return fmt.Errorf("tool %s: output schema of %T: %v: %w", t.Name, *new(Out), err, ErrInvalidTool)
		}
		t.OutputSchema = s
	}
	t.Handler = func(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
		var in In
		if err := json.Unmarshal(call.Arguments, &in); err != nil {
			return Refuse(CodeInvalidArguments, "arguments do not decode: "+err.Error()), nil
		}
		res, out, err := h(ctx, call, in)
		if err != nil {
			return nil, err
		}
		if res == nil {
			res = &mcp.CallToolResult{}
		}
		if len(res.InputRequests) > 0 || res.IsError {
			return res, nil
		}
		if outAny && any(out) == nil {
			return res, nil
		}
		res.StructuredContent = out
		if len(res.Content) == 0 {
			b, err := json.Marshal(out)
			if err != nil {
				return nil, fmt.Errorf("tool %s: encode the result: %w", call.Name, err)
			}
			res.Content = []mcp.Content{&mcp.TextContent{Text: string(b)}}
		}
		return res, nil
	}
	return r.RegisterTool(t)
}

// inferObjectSchema is the input schema of In: jsonschema-go's, or
// {"type":"object"} for In any or a map without a type.
func inferObjectSchema[In any]() (any, error) {
	if reflect.TypeFor[In]() == reflect.TypeFor[any]() {
		return emptyObjectSchema, nil
	}
	s, err := jsonschema.For[In](nil)
	if err != nil {
		return nil, err
	}
	if s.Type == "" && len(s.Types) == 0 {
		s.Type = "object"
	}
	return s, nil
}

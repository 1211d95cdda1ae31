package mcpruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ErrInvalidPrompt is returned by RegisterPrompt for a prompt that cannot
// be registered: a bad name, an access class other than read or
// readAsCaller, no handler, an argument without a name or named twice, or
// a name in use.
var ErrInvalidPrompt = errors.New("invalid prompt")

// Prompt is a prompt the runtime serves: the go-sdk's description of it
// (name, title, description, arguments, icons) with the runtime's access
// rules, its handler, and an optional completion of its arguments.
type Prompt struct {
	mcp.Prompt
	// Access is AccessRead or AccessReadAsCaller. A caller it refuses is
	// answered as if the prompt did not exist, and does not see it in
	// prompts/list.
	Access     Access
	Capability string
	Handler    PromptHandler
	// Complete, if set, completes the prompt's arguments
	// (completion/complete with a ref/prompt naming it).
	Complete CompletionHandler
}

// PromptHandler answers prompts/get for a caller the access rules admitted,
// with every required argument present. ErrInvalidArgument is answered as
// invalid params (its message shown); another error as an internal error
// (logged, not shown). A result with InputRequests asks the client first
// (see Exchange).
type PromptHandler func(ctx context.Context, get *PromptGet) (*mcp.GetPromptResult, error)

// PromptGet is what a prompt handler is given.
type PromptGet struct {
	Caller    Principal
	Name      string
	Arguments map[string]string // never nil
	Exchange
	rt *Runtime
}

// Runtime returns the runtime serving the request.
func (g *PromptGet) Runtime() *Runtime { return g.rt }

// CompletionHandler suggests values for one argument of a prompt or one
// variable of a resource template. At most 100 values reach the client
// (hasMore is set when there were more).
type CompletionHandler func(ctx context.Context, req *CompletionRequest) (*mcp.CompletionResultDetails, error)

// CompletionRequest is what a completion handler is given.
type CompletionRequest struct {
	Caller Principal
	// Ref names the prompt (ref/prompt) or the template (ref/resource).
	Ref mcp.CompleteReference
	// Argument is the argument or variable being completed and what the
	// user typed so far.
	Argument mcp.CompleteParamsArgument
	// Context holds the arguments or variables already resolved; never nil.
	Context map[string]string
}

type registeredPrompt struct {
	Prompt
	listed *mcp.Prompt // read-only
}

// RegisterPrompt adds a prompt and tells the endpoints' sessions that the
// prompt list changed.
func (r *Runtime) RegisterPrompt(p Prompt) error {
	if !validToolName(p.Name) || !validReadAccess(p.Access) || p.Handler == nil {
		return fmt.Errorf("prompt %q: needs a name of [A-Za-z0-9_.-], access read or readAsCaller and a handler: %w", p.Name, ErrInvalidPrompt)
	}
	seen := map[string]bool{}
	args := make([]*mcp.PromptArgument, len(p.Arguments))
	for i, a := range p.Arguments {
		if a == nil || a.Name == "" || seen[a.Name] {
			return fmt.Errorf("prompt %s: arguments need distinct names: %w", p.Name, ErrInvalidPrompt)
		}
		seen[a.Name] = true
		c := *a
		args[i] = &c
	}
	listed := p.Prompt
	listed.Arguments = args
	listed.Icons = slices.Clone(p.Icons)
	p.Arguments = args
	if !r.prompts.add(p.Name, &registeredPrompt{Prompt: p, listed: &listed}) {
		return fmt.Errorf("prompt %s: name in use: %w", p.Name, ErrInvalidPrompt)
	}
	r.listChanged(listPrompts)
	return nil
}

// RemovePrompt removes the prompt of that name and tells the endpoints'
// sessions that the prompt list changed. It reports whether there was one.
func (r *Runtime) RemovePrompt(name string) bool {
	if !r.prompts.remove(name) {
		return false
	}
	r.listChanged(listPrompts)
	return true
}

// visiblePrompt returns the prompt of name if caller may get it.
func (r *Runtime) visiblePrompt(caller Principal, name string) (*registeredPrompt, bool) {
	p, ok := r.prompts.get(name)
	if !ok || !admits(p.Access, p.Capability, caller) {
		return nil, false
	}
	return p, true
}

// GetPrompt answers prompts/get for caller, as the MCP endpoint does, for
// an embedder: ErrUnknownPrompt for a prompt caller may not get or that
// does not exist, ErrInvalidArgument for a missing required argument.
func (r *Runtime) GetPrompt(ctx context.Context, caller Principal, name string, args map[string]string) (*mcp.GetPromptResult, error) {
	return r.getPrompt(ctx, &PromptGet{Caller: caller, Name: name, Arguments: args})
}

func (r *Runtime) getPrompt(ctx context.Context, get *PromptGet) (*mcp.GetPromptResult, error) {
	p, ok := r.visiblePrompt(get.Caller, get.Name)
	if !ok {
		return nil, fmt.Errorf("prompt %q: %w", get.Name, ErrUnknownPrompt)
	}
	if get.Arguments == nil {
		get.Arguments = map[string]string{}
	}
	for _, a := range p.Arguments {
		if _, ok := get.Arguments[a.Name]; a.Required && !ok {
			return nil, fmt.Errorf("prompt %s: missing required argument %q: %w", p.Name, a.Name, ErrInvalidArgument)
		}
	}
	get.rt = r
	res, err := p.Handler(ctx, get)
	if err != nil {
		return nil, fmt.Errorf("prompt %s: %w", p.Name, err)
	}
	if res == nil {
		res = &mcp.GetPromptResult{}
	}
	if len(res.InputRequests) == 0 && res.Messages == nil {
		res.Messages = []*mcp.PromptMessage{}
	}
	return res, nil
}

// maxCompletionValues is the most values a completion answers (MCP).
const maxCompletionValues = 100

// Complete answers completion/complete for caller: the completion handler
// of the prompt (ref/prompt) or template (ref/resource, by its uriTemplate)
// the reference names. One without a handler, or an argument it does not
// declare, completes to no values. A reference to something caller may not
// use is ErrUnknownReference, as one to nothing.
func (r *Runtime) Complete(ctx context.Context, caller Principal, params *mcp.CompleteParams) (*mcp.CompleteResult, error) {
	if params == nil || params.Ref == nil {
		return nil, fmt.Errorf("completion needs a ref: %w", ErrInvalidArgument)
	}
	var complete CompletionHandler
	switch params.Ref.Type {
	case "ref/prompt":
		p, ok := r.visiblePrompt(caller, params.Ref.Name)
		if !ok {
			return nil, fmt.Errorf("prompt %q: %w", params.Ref.Name, ErrUnknownReference)
		}
		if slices.ContainsFunc(p.Arguments, func(a *mcp.PromptArgument) bool { return a.Name == params.Argument.Name }) {
			complete = p.Complete
		}
	case "ref/resource":
		t, ok := r.templates.get(params.Ref.URI)
		if !ok || !admits(t.Access, t.Capability, caller) {
			return nil, fmt.Errorf("resource template %q: %w", params.Ref.URI, ErrUnknownReference)
		}
		if slices.Contains(t.tmpl.Varnames(), params.Argument.Name) {
			complete = t.Complete
		}
	default:
		return nil, fmt.Errorf("reference type %q: %w", params.Ref.Type, ErrInvalidArgument)
	}
	details := &mcp.CompletionResultDetails{}
	if complete != nil {
		req := &CompletionRequest{Caller: caller, Ref: *params.Ref, Argument: params.Argument, Context: map[string]string{}}
		if params.Context != nil {
			for k, v := range params.Context.Arguments {
				req.Context[k] = v
			}
		}
		d, err := complete(ctx, req)
		if err != nil {
			return nil, fmt.Errorf("completion of %s: %w", params.Argument.Name, err)
		}
		if d != nil {
			details = d
		}
	}
	if details.Values == nil {
		details.Values = []string{}
	}
	if len(details.Values) > maxCompletionValues {
		details.Total = max(details.Total, len(details.Values))
		details.Values, details.HasMore = details.Values[:maxCompletionValues], true
	}
	return &mcp.CompleteResult{Completion: *details}, nil
}

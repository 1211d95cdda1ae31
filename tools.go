package mcpruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agenthost/mcpruntime/memdb"
)

// Access is the access class of a tool (SPEC §4). Every tool has exactly one.
type Access string

// Access classes.
const (
	// AccessRead: any live principal, provider credential or client grant.
	AccessRead Access = "read"
	// AccessReadAsCaller: provider credentials only (the tool needs the
	// caller's thread scope).
	AccessReadAsCaller Access = "readAsCaller"
	// AccessMutate: a live caller — a provider credential whose instance owns
	// its thread's active run — or, where the tool allows clients, a
	// read-write client grant. The check is atomic with the effect when the
	// handler applies it through ToolCall.Mutate.
	AccessMutate Access = "mutate"
)

// Refusal codes, in the structuredContent of an isError tool result.
const (
	CodeParentNotActive          = "parent_not_active"
	CodeCapabilityDenied         = "capability_denied"
	CodeThreadCredentialRequired = "thread_credential_required"
	CodeThreadNotFound           = "thread_not_found"
	CodeInvalidArguments         = "invalid_arguments"
)

// ErrInvalidTool is returned by RegisterTool for a tool that cannot be
// registered: bad name, no or unknown access class, no handler, a schema
// that does not compile, or a name in use.
var ErrInvalidTool = errors.New("invalid tool")

// Tool is a tool the runtime serves over MCP.
type Tool struct {
	// Name is 1–128 characters of [A-Za-z0-9_.-].
	Name        string
	Description string
	// InputSchema is the JSON Schema of the arguments object; its "type" must
	// be "object", as MCP requires. Nil: {"type":"object"}. It is compiled
	// once, at registration.
	InputSchema json.RawMessage
	Access      Access
	// Capability, if set, must be among the caller's capabilities.
	Capability string
	// AllowClients lets read-write client grants call a mutate tool.
	AllowClients bool
	Handler      ToolHandler
}

// ToolHandler runs a tool call whose caller passed the access checks and
// whose arguments passed the schema. It runs on the request's goroutine, never
// inside an actor, and should return when ctx is done (the client cancelled,
// the session was deleted, or the runtime closed). A refusal is a result
// made with Refuse; an error is reported to the client as a tool error.
type ToolHandler func(ctx context.Context, call *ToolCall) (*ToolResult, error)

// ToolCall is what a handler is given.
type ToolCall struct {
	Caller    Principal
	Arguments json.RawMessage
	rt        *Runtime
	progress  func(progress, total float64, message string)
}

// Progress reports progress to the client, if it asked for it (a progress
// token in the request). It switches the response to an event stream.
func (c *ToolCall) Progress(progress, total float64, message string) {
	if c.progress != nil {
		c.progress(progress, total, message)
	}
}

// Runtime returns the runtime serving the call: for reads, and for a
// mutation of the caller's thread, Mutate(ctx, call.Runtime(), call.Caller,
// "", effect), which checks in the same transaction that the caller is
// live.
func (c *ToolCall) Runtime() *Runtime { return c.rt }

// ToolResult is a tools/call result: one text content block (Text), an
// optional structured result (StructuredContent) and IsError.
type ToolResult struct {
	Text              string // one text content block
	StructuredContent any    // optional structured result
	IsError           bool
}

// Refuse returns the isError result of a policy refusal with a stable code.
func Refuse(code, message string) *ToolResult {
	return &ToolResult{
		Text:              message,
		StructuredContent: map[string]string{"code": code, "message": message},
		IsError:           true,
	}
}

// ToolInfo describes a registered tool (tools/list).
type ToolInfo struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	Access      Access
	Capability  string
}

type registeredTool struct {
	Tool
	schema *jsonschema.Schema
}

// toolRegistry holds the tools. Registration is rare and lookups are on
// every call, so lookups read an immutable snapshot.
type toolRegistry struct {
	mu    sync.Mutex // serializes writers
	tools map[string]*registeredTool
	order []string // sorted names
}

func validToolName(name string) bool {
	if len(name) == 0 || len(name) > 128 {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

var emptyObjectSchema = json.RawMessage(`{"type":"object"}`)

// compileSchema compiles a tool's input schema. External references are
// not loaded: a schema must be self-contained.
func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "mem:///tools/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// RegisterTool adds a tool. It fails with ErrInvalidTool if the tool is
// malformed or its name is taken.
func (r *Runtime) RegisterTool(t Tool) error {
	if !validToolName(t.Name) {
		return fmt.Errorf("tool name %q: %w", t.Name, ErrInvalidTool)
	}
	switch t.Access {
	case AccessRead, AccessReadAsCaller, AccessMutate:
	default:
		return fmt.Errorf("tool %s: access class %q: %w", t.Name, t.Access, ErrInvalidTool)
	}
	if t.Handler == nil {
		return fmt.Errorf("tool %s: no handler: %w", t.Name, ErrInvalidTool)
	}
	if len(t.InputSchema) == 0 {
		t.InputSchema = emptyObjectSchema
	}
	var probe map[string]any
	if err := json.Unmarshal(t.InputSchema, &probe); err != nil || probe["type"] != "object" {
		return fmt.Errorf("tool %s: input schema must be a JSON object schema of type \"object\": %w", t.Name, ErrInvalidTool)
	}
	sch, err := compileSchema(t.Name, t.InputSchema)
	if err != nil {
		return fmt.Errorf("tool %s: input schema: %v: %w", t.Name, err, ErrInvalidTool)
	}
	t.InputSchema = slices.Clone(t.InputSchema)
	reg := &r.tools
	reg.mu.Lock()
	defer reg.mu.Unlock()
	if _, dup := reg.tools[t.Name]; dup {
		return fmt.Errorf("tool %s: name in use: %w", t.Name, ErrInvalidTool)
	}
	next := make(map[string]*registeredTool, len(reg.tools)+1)
	for k, v := range reg.tools {
		next[k] = v
	}
	next[t.Name] = &registeredTool{Tool: t, schema: sch}
	order := append(slices.Clone(reg.order), t.Name)
	slices.Sort(order)
	reg.tools, reg.order = next, order
	return nil
}

func (reg *toolRegistry) snapshot() (map[string]*registeredTool, []string) {
	reg.mu.Lock()
	defer reg.mu.Unlock()
	return reg.tools, reg.order
}

// Tools lists the registered tools, sorted by name.
func (r *Runtime) Tools() []ToolInfo {
	tools, order := r.tools.snapshot()
	out := make([]ToolInfo, len(order))
	for i, name := range order {
		t := tools[name]
		out[i] = ToolInfo{Name: t.Name, Description: t.Description, InputSchema: slices.Clone(t.InputSchema), Access: t.Access, Capability: t.Capability}
	}
	return out
}

// permit decides whether caller may call t right now, by its class and
// capability. A mutate tool's liveness is checked again, atomically, when
// it applies its effect.
func (r *Runtime) permit(t *registeredTool, caller Principal) *ToolResult {
	if t.Capability != "" && !slices.Contains(caller.Capabilities, t.Capability) {
		return Refuse(CodeCapabilityDenied, fmt.Sprintf("tool %s needs capability %q", t.Name, t.Capability))
	}
	switch t.Access {
	case AccessReadAsCaller:
		if !caller.Provider() {
			return Refuse(CodeThreadCredentialRequired, fmt.Sprintf("tool %s needs a provider credential with a thread", t.Name))
		}
	case AccessMutate:
		if !caller.Provider() {
			if !t.AllowClients {
				return Refuse(CodeThreadCredentialRequired, fmt.Sprintf("tool %s needs a provider credential with a thread", t.Name))
			}
			if caller.Access != memdb.AccessReadWrite {
				return Refuse(CodeCapabilityDenied, fmt.Sprintf("tool %s needs a read-write client grant", t.Name))
			}
		}
	}
	return nil
}

// CallTool runs one tools/call for caller: lookup, class and capability
// checks, schema validation, then the handler. Unknown tools are
// ErrUnknownTool (a JSON-RPC error, not a result). Policy refusals and
// invalid arguments are isError results. A handler that fails with ctx's
// error once ctx is done was cancelled, not failed: CallTool returns that
// error, not an isError result.
func (r *Runtime) CallTool(ctx context.Context, caller Principal, name string, args json.RawMessage, progress func(progress, total float64, message string)) (*ToolResult, error) {
	tools, _ := r.tools.snapshot()
	t := tools[name]
	if t == nil {
		return nil, fmt.Errorf("tool %q: %w", name, ErrUnknownTool)
	}
	if refusal := r.permit(t, caller); refusal != nil {
		return refusal, nil
	}
	if len(args) == 0 || string(args) == "null" {
		args = json.RawMessage(`{}`)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return Refuse(CodeInvalidArguments, "arguments are not valid JSON"), nil
	}
	if err := t.schema.Validate(v); err != nil {
		return Refuse(CodeInvalidArguments, "arguments do not match the input schema: "+err.Error()), nil
	}
	res, err := t.Handler(ctx, &ToolCall{Caller: caller, Arguments: args, rt: r, progress: progress})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("tool %s: %w", name, err) // cancelled, not failed
		}
		return refusalFor(err), nil
	}
	if res == nil {
		res = &ToolResult{}
	}
	return res, nil
}

// ErrUnknownTool is returned by CallTool for a name no tool has.
var ErrUnknownTool = errors.New("unknown tool")

// refusalFor maps a runtime error from a handler to the stable codes of
// SPEC §4; anything else is a generic tool error (its text is the error's).
func refusalFor(err error) *ToolResult {
	switch {
	case errors.Is(err, ErrNotLive):
		return Refuse(CodeParentNotActive, err.Error())
	case errors.Is(err, ErrReadOnly):
		return Refuse(CodeCapabilityDenied, err.Error())
	case errors.Is(err, ErrCredentialRequired):
		return Refuse(CodeThreadCredentialRequired, err.Error())
	case errors.Is(err, ErrUnknownThread), errors.Is(err, ErrInvalidID), errors.Is(err, ErrArchivedThread):
		return Refuse(CodeThreadNotFound, err.Error())
	case errors.Is(err, ErrInvalidArgument):
		return Refuse(CodeInvalidArguments, err.Error())
	}
	return &ToolResult{Text: "tool failed: " + err.Error(), IsError: true}
}

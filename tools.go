package mcpruntime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agenthost/mcpruntime/actors/thread"
	"github.com/agenthost/mcpruntime/internal/fastschema"
	"github.com/agenthost/mcpruntime/internal/jsonenc"
	"github.com/agenthost/mcpruntime/internal/ratelimit"
	"github.com/agenthost/mcpruntime/memdb"
	"github.com/agenthost/mcpruntime/transport"
)

// Access is the access class of a tool, a resource or a prompt (SPEC §4,
// §5b). Every one has exactly one.
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
	// handler applies it through ToolCall.Mutate. Tools only.
	AccessMutate Access = "mutate"
	// AccessAct: any live principal, as AccessRead, for a host tool that
	// is not a thread mutation but may have side effects of its own (a
	// deploy, a notification): listed without an implied readOnlyHint,
	// refused to nobody the endpoint admitted — a read-only client grant
	// included, since read-only is about threads. Gate it further with
	// Capability, or check call.Caller in the handler. Tools only.
	AccessAct Access = "act"
)

// Refusal codes, in the structuredContent of an isError tool result.
const (
	CodeParentNotActive          = "parent_not_active"
	CodeCapabilityDenied         = "capability_denied"
	CodeThreadCredentialRequired = "thread_credential_required"
	CodeThreadNotFound           = "thread_not_found"
	CodeInvalidArguments         = "invalid_arguments"
	// CodeTimeout: the tool did not finish within its Timeout.
	CodeTimeout = "timeout"
	// CodeRateLimited: the caller spent the tool's RatePerNamespace; the
	// refusal's retryAfter says in how many seconds one call fits again.
	CodeRateLimited = "rate_limited"
)

// errToolTimeout is the cause of a handler's ctx its Tool.Timeout ended.
var errToolTimeout = errors.New("tool timeout")

// ErrInvalidTool is returned by RegisterTool for a tool that cannot be
// registered: bad name, no or unknown access class, no handler, a schema
// that does not compile, or a name in use.
var ErrInvalidTool = errors.New("invalid tool")

// Tool is a tool the runtime serves over MCP: the go-sdk's description of
// it (name, title, description, input and output schema, annotations,
// icons, _meta) with the runtime's access rules and its handler.
type Tool struct {
	// Tool describes it. Name is 1–128 characters of [A-Za-z0-9_.-].
	// InputSchema is the JSON Schema of the arguments object, anything that
	// marshals to one (json.RawMessage, a map, a *jsonschema.Schema); its
	// "type" must be "object", as MCP requires. Nil: {"type":"object"}.
	// OutputSchema, if set, is the schema the result's structuredContent
	// must match. Both are compiled once, at registration, and listed as
	// given. Annotations nil: {"readOnlyHint": true} for the read classes.
	mcp.Tool
	Access Access
	// Capability, if set, must be among the caller's capabilities.
	Capability string
	// AllowClients lets read-write client grants call a mutate tool.
	AllowClients bool
	// Timeout bounds one run of the handler: past it the handler's ctx is
	// cancelled and, if it then fails, the caller gets the isError result
	// "timeout: …" (code CodeTimeout). A handler that ignores its ctx holds
	// the call until it returns; one that returns a result after the
	// deadline has it answered. Each round of a call that asks its client
	// (InputRequests) is a run of its own. Zero: Config.ToolTimeout;
	// negative: no bound.
	Timeout time.Duration
	// AuditArguments puts the call's arguments (up to 16 KiB) in its audit
	// record (Config.Audit). Off: the record names the tool, never what it
	// was given.
	AuditArguments bool
	// RatePerNamespace limits the calls of this tool by one principal: a
	// token bucket of BurstPerNamespace calls (zero: the rate rounded up)
	// per namespace, refilled at this many a second, on top of the
	// endpoint's request rate (MCPOptions.RatePerNamespace). A call past it
	// is refused (isError, code rate_limited, retryAfter in seconds) before
	// its arguments are looked at. Per node. Zero: no limit of its own.
	RatePerNamespace  float64
	BurstPerNamespace int
	Handler           ToolHandler
}

// ToolHandler runs a tool call whose caller passed the access checks and
// whose arguments passed the schema. It runs on the request's goroutine, never
// inside an actor, and should return when ctx is done (the client cancelled,
// the session was deleted, or the runtime closed). A refusal is a result
// made with Refuse; an error is reported to the client as a tool error; a
// result made with InputRequired asks the client first (see Exchange).
type ToolHandler func(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error)

// ToolCall is what a tool handler is given.
type ToolCall struct {
	Caller    Principal
	Name      string
	Arguments json.RawMessage // an object, validated against the input schema
	Exchange
	rt *Runtime
}

// Runtime returns the runtime serving the call: for reads, and for a
// mutation of the caller's thread, Mutate(ctx, call.Runtime(), call.Caller,
// "", effect), which checks in the same transaction that the caller is
// live.
func (c *ToolCall) Runtime() *Runtime { return c.rt }

// Mutate applies effect to threadID ("" for the caller's own thread) on
// behalf of the caller, checked atomically with the effect (SPEC §4.4):
// the package-level Mutate without its type parameter.
func (c *ToolCall) Mutate(ctx context.Context, threadID string, effect thread.Effect) (any, error) {
	return Mutate[any](ctx, c.rt, c.Caller, threadID, effect)
}

// Refuse returns the isError result of a policy refusal with a stable code.
// Its text begins with the code ("parent_not_active: …"), since many
// clients hand the model a result's text only; its structured content is
// {"code", "message"}, which the endpoint leaves out for a tool whose
// output schema it does not match (SPEC §4.3).
func Refuse(code, message string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		Content:           []mcp.Content{&mcp.TextContent{Text: code + ": " + message}},
		StructuredContent: map[string]string{"code": code, "message": message},
		IsError:           true,
	}
}

// ToolInfo describes a registered tool.
type ToolInfo struct {
	Name        string
	Description string
	InputSchema json.RawMessage
	Access      Access
	Capability  string
}

type registeredTool struct {
	Tool
	listed *mcp.Tool // what tools/list shows: schemas as JSON, annotations defaulted; read-only
	schema *jsonschema.Schema
	// fast says, without decoding, that arguments surely match schema, for
	// the schemas of its subset (internal/fastschema); nil: always ask
	// schema.
	fast   *fastschema.Schema
	output *jsonschema.Schema // nil: no output schema
	// headers are the input schema's x-mcp-header markings; read-only.
	headers []transport.ParamHeader
	rates   *ratelimit.Buckets // RatePerNamespace
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

// compileSchema compiles a schema. External references are not loaded: a
// schema must be self-contained.
func compileSchema(name string, raw json.RawMessage) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	url := "mem:///" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, err
	}
	return c.Compile(url)
}

// schemaJSON is a schema as the JSON it marshals to; nil for nil.
func schemaJSON(v any) (json.RawMessage, error) {
	switch v := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(v) == 0 {
			return nil, nil
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, v); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	return json.Marshal(v)
}

// RegisterTool adds a tool and tells the endpoints' sessions that the tool
// list changed. It fails with ErrInvalidTool if the tool is malformed or its
// name is taken.
func (r *Runtime) RegisterTool(t Tool) error {
	rt, err := prepareTool(t)
	if err != nil {
		return err
	}
	if !r.tools.add(rt.Name, rt) {
		return fmt.Errorf("tool %s: name in use: %w", rt.Name, ErrInvalidTool)
	}
	r.listChanged(listTools)
	return nil
}

// prepareTool checks a tool and compiles its schemas.
func prepareTool(t Tool) (*registeredTool, error) {
	if !validToolName(t.Name) {
		return nil, fmt.Errorf("tool name %q: %w", t.Name, ErrInvalidTool)
	}
	switch t.Access {
	case AccessRead, AccessReadAsCaller, AccessMutate, AccessAct:
	default:
		return nil, fmt.Errorf("tool %s: access class %q: %w", t.Name, t.Access, ErrInvalidTool)
	}
	if t.Handler == nil {
		return nil, fmt.Errorf("tool %s: no handler: %w", t.Name, ErrInvalidTool)
	}
	in, err := schemaJSON(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %v: %w", t.Name, err, ErrInvalidTool)
	}
	if in == nil {
		in = emptyObjectSchema
	}
	var probe map[string]any
	if err := json.Unmarshal(in, &probe); err != nil || probe["type"] != "object" {
		return nil, fmt.Errorf("tool %s: input schema must be a JSON object schema of type \"object\": %w", t.Name, ErrInvalidTool)
	}
	sch, err := compileSchema("tools/"+t.Name, in)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %v: %w", t.Name, err, ErrInvalidTool)
	}
	headers, err := paramHeaders(in)
	if err != nil {
		return nil, fmt.Errorf("tool %s: input schema: %v: %w", t.Name, err, ErrInvalidTool)
	}
	out, err := schemaJSON(t.OutputSchema)
	if err != nil {
		return nil, fmt.Errorf("tool %s: output schema: %v: %w", t.Name, err, ErrInvalidTool)
	}
	var outSch *jsonschema.Schema
	if out != nil {
		if outSch, err = compileSchema("tools/"+t.Name+"/output", out); err != nil {
			return nil, fmt.Errorf("tool %s: output schema: %v: %w", t.Name, err, ErrInvalidTool)
		}
	}
	listed := t.Tool // a copy: the host's values are not shared
	listed.InputSchema = in
	if out != nil {
		listed.OutputSchema = out
	}
	listed.Icons = slices.Clone(t.Icons)
	if t.Annotations != nil {
		a := *t.Annotations
		listed.Annotations = &a
	} else if t.Access == AccessRead || t.Access == AccessReadAsCaller {
		listed.Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
	}
	t.InputSchema, t.OutputSchema = in, listed.OutputSchema
	return &registeredTool{Tool: t, listed: &listed, schema: sch, fast: fastschema.Compile(in), output: outSch, headers: headers,
		rates: ratelimit.New(t.RatePerNamespace, t.BurstPerNamespace)}, nil
}

// RemoveTool removes the tool of that name, built-ins included, and tells
// the endpoints' sessions that the tool list changed. It reports whether
// there was one. Calls in flight finish.
func (r *Runtime) RemoveTool(name string) bool {
	if !r.tools.remove(name) {
		return false
	}
	r.listChanged(listTools)
	return true
}

// Tools lists the registered tools, sorted by name.
func (r *Runtime) Tools() []ToolInfo {
	tools, order := r.tools.snapshot()
	out := make([]ToolInfo, len(order))
	for i, name := range order {
		t := tools[name]
		out[i] = ToolInfo{Name: t.Name, Description: t.Description, InputSchema: slices.Clone(t.InputSchema.(json.RawMessage)), Access: t.Access, Capability: t.Capability}
	}
	return out
}

// permit decides whether caller may call t right now, by its class and
// capability. A mutate tool's liveness is checked again, atomically, when
// it applies its effect.
func (r *Runtime) permit(t *registeredTool, caller Principal) *mcp.CallToolResult {
	switch refusalOf(t, caller) {
	case lacksCapability:
		return Refuse(CodeCapabilityDenied, fmt.Sprintf("tool %s needs capability %q", t.Name, t.Capability))
	case needsThread:
		return Refuse(CodeThreadCredentialRequired, fmt.Sprintf("tool %s needs a provider credential with a thread", t.Name))
	case needsReadWrite:
		return Refuse(CodeCapabilityDenied, fmt.Sprintf("tool %s needs a read-write client grant", t.Name))
	}
	return nil
}

// refusal is why a caller may not call a tool (its class and capability),
// or mayCall: permit words it, runtime_capabilities only asks.
type refusal uint8

const (
	mayCall refusal = iota
	lacksCapability
	needsThread
	needsReadWrite
)

func refusalOf(t *registeredTool, caller Principal) refusal {
	if t.Capability != "" && !slices.Contains(caller.Capabilities, t.Capability) {
		return lacksCapability
	}
	switch t.Access {
	case AccessReadAsCaller:
		if !caller.Provider() {
			return needsThread
		}
	case AccessMutate:
		if !caller.Provider() {
			if !t.AllowClients {
				return needsThread
			}
			if caller.Access != memdb.AccessReadWrite {
				return needsReadWrite
			}
		}
	}
	return mayCall
}

// CallTool runs one tools/call for caller, as the MCP endpoint does, for
// an embedder that calls tools itself: lookup, class and capability checks,
// schema validation, then the handler; progress, if not nil, hears the
// handler's Progress. Unknown tools are ErrUnknownTool (a JSON-RPC error,
// not a result). Policy refusals and invalid arguments are isError results.
// A handler that fails with ctx's error once ctx is done was cancelled, not
// failed: CallTool returns that error, not an isError result. A handler
// that needs the client answers a result with InputRequests, returned as it
// is (nobody is there to ask). A built-in's structuredContent is a
// json.RawMessage.
func (r *Runtime) CallTool(ctx context.Context, caller Principal, name string, args json.RawMessage, progress func(progress, total float64, message string)) (*mcp.CallToolResult, error) {
	call := &ToolCall{Caller: caller, Name: name, Arguments: args, rt: r}
	if progress != nil {
		call.req = &transport.Request{Out: progressOutput(progress)}
	}
	res, err := r.callTool(ctx, call)
	if res != nil {
		// A built-in's encoded structuredContent, which the endpoint copies
		// as it is, reaches an embedder as the json.RawMessage it decodes.
		if enc, ok := res.StructuredContent.(jsonenc.Encoded); ok {
			raw := *res
			raw.StructuredContent = json.RawMessage(enc.Bytes())
			res = &raw
		}
	}
	return res, err
}

// callTool is CallTool for a call the caller built (the endpoint's, with
// its exchange). The result is complete (Content never nil) or asks for
// input (InputRequests not empty).
func (r *Runtime) callTool(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	tools, _ := r.tools.snapshot()
	t := tools[call.Name]
	if t == nil {
		return nil, fmt.Errorf("tool %q: %w", call.Name, ErrUnknownTool)
	}
	res, err := r.runTool(ctx, t, call)
	if err != nil || !res.IsError || t.output == nil || res.StructuredContent == nil {
		return res, err
	}
	// An isError result keeps its structured content only where it matches
	// the tool's output schema: a client that validates structuredContent
	// against outputSchema rejects the whole result otherwise, refusal and
	// all. The text still begins with the code.
	if validateStructured(t.output, res.StructuredContent) != nil {
		fit := *res
		fit.StructuredContent = nil
		res = &fit
	}
	return res, nil
}

// runTool is callTool once the tool is found: the class and capability
// checks, the input schema, the handler and the output schema.
func (r *Runtime) runTool(ctx context.Context, t *registeredTool, call *ToolCall) (*mcp.CallToolResult, error) {
	if refusal := r.permit(t, call.Caller); refusal != nil {
		return refusal, nil
	}
	if wait, ok := t.rates.Take(call.Caller.Namespace, 1, r.cfg.Now()); !ok {
		secs := ratelimit.Seconds(wait)
		msg := fmt.Sprintf("this tool's rate limit for this credential is spent; retry in %d s", secs)
		res := Refuse(CodeRateLimited, msg)
		res.StructuredContent = map[string]any{"code": CodeRateLimited, "message": msg, "retryAfter": secs}
		return res, nil
	}
	if len(call.Arguments) == 0 || string(call.Arguments) == "null" {
		call.Arguments = json.RawMessage(`{}`)
	}
	if !t.fast.Valid(call.Arguments) {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(call.Arguments))
		if err != nil {
			return Refuse(CodeInvalidArguments, "arguments are not valid JSON"), nil
		}
		if err := t.schema.Validate(v); err != nil {
			return Refuse(CodeInvalidArguments, "arguments do not match the input schema: "+err.Error()), nil
		}
	}
	call.rt = r
	hctx := ctx
	limit := t.Timeout
	if limit == 0 {
		limit = r.cfg.ToolTimeout
	}
	if limit > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeoutCause(ctx, limit, errToolTimeout)
		defer cancel()
	}
	res, err := t.Handler(hctx, call)
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return nil, fmt.Errorf("tool %s: %w", call.Name, err) // cancelled, not failed
		}
		if ctx.Err() == nil && context.Cause(hctx) == errToolTimeout {
			return Refuse(CodeTimeout, fmt.Sprintf("tool %s did not finish within %v", call.Name, limit)), nil
		}
		return refusalFor(err), nil
	}
	if res == nil {
		res = &mcp.CallToolResult{}
	}
	if len(res.InputRequests) > 0 {
		return res, nil
	}
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	if t.output != nil && !res.IsError {
		if err := validateStructured(t.output, res.StructuredContent); err != nil {
			r.cfg.Logger.Error("tool result does not match its output schema", "tool", call.Name, "err", err)
			return &mcp.CallToolResult{
				Content: []mcp.Content{&mcp.TextContent{Text: "tool failed: its structured result does not match its output schema"}},
				IsError: true,
			}, nil
		}
	}
	return res, nil
}

// validateStructured checks a structured result against an output schema;
// a missing one fails it.
func validateStructured(sch *jsonschema.Schema, v any) error {
	if v == nil {
		return errors.New("no structuredContent")
	}
	b, err := jsonenc.JSON(v)
	if err != nil {
		return err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return err
	}
	return sch.Validate(doc)
}

// refusalFor maps a runtime error from a handler to the stable codes of
// SPEC §4; anything else is a generic tool error (its text is the error's).
func refusalFor(err error) *mcp.CallToolResult {
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
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "tool failed: " + err.Error()}}, IsError: true}
}

// textOf is the text of a result's first text block, "" if none.
func textOf(res *mcp.CallToolResult) string {
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			return t.Text
		}
	}
	return ""
}

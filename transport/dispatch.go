package transport

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/trace"

	"github.com/agenthost/mcpruntime/internal/fault"
)

// The feature methods' dispatch, for both eras: the method names the
// Backend method, the params are decoded here (tools/call's by a scan that
// leaves the arguments as sent), and what the backend answers becomes a
// Response: its result, the input requests it needs the client for
// (checked against what the client declared), or a JSON-RPC error from
// backendErrors (errors.go).

// Response is the answer of one feature request: exactly one of Result,
// InputRequests and Err is set; Err is CodeRequestCancelled when the
// request's context ended (the endpoint answers nothing for it).
type Response struct {
	// Result is the complete result, marshalled as it is (an
	// *mcp.CallToolResult, *mcp.ListToolsResult, *mcp.ReadResourceResult, …).
	Result any
	// InputRequests: the request needs the client first, and the client
	// declared every capability they need. State is the backend's
	// RequestState, given back as Request.State in the next round.
	InputRequests mcp.InputRequestMap
	State         string
	// Err is the JSON-RPC error answered.
	Err *RPCError

	fail  failure // the failure Err answers (its HTTP status); 0: failBackendError
	cause error   // the backend's error behind a failBackendFailed, for the log
}

// RPCError is a JSON-RPC error the endpoint answers a feature request with.
type RPCError struct {
	Code    int
	Message string
	Data    any // marshalled as it is; nil: none
}

// dispatch is Dispatch with the backend's failure logged: what a client
// never sees.
func (s *Server) dispatch(ctx context.Context, method string, params json.RawMessage, req *Request) (res Response) {
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.traceFeature(ctx, method, params, req)
		defer func() { endFeature(span, &res) }()
	}
	res = Dispatch(ctx, s.backend, method, params, req)
	if res.cause != nil {
		s.opts.Logger.Error("backend failed", "method", method, "err", res.cause)
	}
	return res
}

// failure is the failure res.Err answers.
func (res *Response) failure() failure {
	if res.fail == 0 {
		return failBackendError
	}
	return res.fail
}

// featureMethod reports whether m is one the backend answers (Dispatch).
func featureMethod(m string) bool {
	switch m {
	case "tools/list", "tools/call", "resources/list", "resources/read", "resources/templates/list",
		"prompts/list", "prompts/get", "completion/complete":
		return true
	}
	return false
}

// Dispatch answers one feature request with b, as the endpoint does after
// admission: method names the feature, params is its params object as
// sent ("{}" or nil when absent), req what the call carries. It runs on
// the caller's goroutine and does not ask the client: input requests are
// returned (after the capability check) for the caller to ask.
func Dispatch(ctx context.Context, b Backend, method string, params json.RawMessage, req *Request) Response {
	var (
		res     any
		err     error
		subject string // what the request names, for its error: a tool's or prompt's name, a URI, a list's kind
	)
	switch method {
	case "tools/call":
		name, args, ok := toolCallParams(params)
		if !ok {
			return invalidParams("tools/call needs params.name")
		}
		r, e := b.CallTool(ctx, req, name, args)
		if e == nil && r != nil && len(r.InputRequests) > 0 && ctx.Err() == nil {
			return asked(req, method, r.InputRequests, r.RequestState)
		}
		res, err, subject = result(r, e), e, name
	case "tools/list", "resources/list", "resources/templates/list", "prompts/list":
		var p struct {
			Cursor string `json:"cursor"`
		}
		if !decodeParams(params, &p) {
			return invalidParams("cursor must be a string")
		}
		res, err, subject = list(ctx, b, req, method, p.Cursor)
	case "resources/read":
		var p struct {
			URI string `json:"uri"`
		}
		if !decodeParams(params, &p) || p.URI == "" {
			return invalidParams("resources/read needs params.uri")
		}
		r, e := b.ReadResource(ctx, req, p.URI)
		if e == nil && r != nil && len(r.InputRequests) > 0 && ctx.Err() == nil {
			return asked(req, method, r.InputRequests, r.RequestState)
		}
		res, err, subject = result(r, e), e, p.URI
	case "prompts/get":
		var p struct {
			Name      string            `json:"name"`
			Arguments map[string]string `json:"arguments"`
		}
		if !decodeParams(params, &p) || p.Name == "" {
			return invalidParams("prompts/get needs params.name and string arguments")
		}
		r, e := b.GetPrompt(ctx, req, p.Name, p.Arguments)
		if e == nil && r != nil && len(r.InputRequests) > 0 && ctx.Err() == nil {
			return asked(req, method, r.InputRequests, r.RequestState)
		}
		res, err, subject = result(r, e), e, p.Name
	case "completion/complete":
		var p mcp.CompleteParams
		if !decodeParams(params, &p) || p.Ref == nil {
			return invalidParams("completion/complete needs params.ref and params.argument")
		}
		r, e := b.Complete(ctx, req, &p)
		res, err = result(r, e), e
	default:
		return backendFailed(req, method, "", ErrNotServed)
	}
	switch {
	case ctx.Err() != nil:
		return cancelled
	case err != nil:
		return backendFailed(req, method, subject, err)
	}
	return Response{Result: res}
}

// cancelled is the Response of a request whose context ended.
var cancelled = Response{Err: &RPCError{Code: CodeRequestCancelled, Message: "request cancelled"}}

// result is r as a Response's Result: nil (not a typed nil) when there is
// none.
func result[T any](r *T, err error) any {
	if err != nil || r == nil {
		return nil
	}
	return r
}

// list answers one page of the list method names; subject is the list's
// kind, for an invalid cursor's message.
func list(ctx context.Context, b Backend, req *Request, method, cursor string) (any, error, string) {
	switch method {
	case "tools/list":
		r, err := b.ListTools(ctx, req, cursor)
		return result(r, err), err, "tools"
	case "resources/list":
		r, err := b.ListResources(ctx, req, cursor)
		return result(r, err), err, "resources"
	case "resources/templates/list":
		r, err := b.ListResourceTemplates(ctx, req, cursor)
		return result(r, err), err, "templates"
	default: // prompts/list
		r, err := b.ListPrompts(ctx, req, cursor)
		return result(r, err), err, "prompts"
	}
}

// toolCallParams reads tools/call's name and arguments without decoding
// the arguments: the tool's schema validates them, and its handler decodes
// them. params comes from a validated body.
func toolCallParams(params json.RawMessage) (name string, args json.RawMessage, ok bool) {
	err := eachMember(params, func(n, value []byte) error {
		switch string(n) {
		case "name":
			return stringValue(value, &name)
		case "arguments":
			args = value
		}
		return nil
	})
	return name, args, err == nil && name != ""
}

// decodeParams reads a request's params into v; false: not an object of
// the shape v wants.
func decodeParams(params json.RawMessage, v any) bool {
	if len(params) == 0 {
		return true
	}
	return json.Unmarshal(params, v) == nil
}

func invalidParams(what string) Response {
	return Response{Err: &RPCError{Code: CodeInvalidParams, Message: "invalid params: " + what}, fail: failInvalidParams}
}

// failedMessages are the fixed messages of a backend's failure that no
// row of backendErrors names (-32603): the detail is logged, never
// answered.
var failedMessages = map[string]string{
	"tools/call": "tool call failed", "resources/read": "resource read failed",
	"prompts/get": "prompt get failed", "completion/complete": "completion failed",
}

// backendFailed answers the backend's error err for the request of method
// that named subject, by backendErrors.
func backendFailed(req *Request, method, subject string, err error) Response {
	f := backendFailure(err, req.Era)
	a := &failures[f]
	e := &RPCError{Code: a.code, Message: a.message}
	switch f {
	case failUnknownTool, failUnknownPrompt:
		e.Message = fmt.Sprintf("%s %q", a.message, subject)
	case failMethodNotFound:
		e.Message = fmt.Sprintf("method %q not found", method)
	case failResourceNotFound, failResourceNotFoundModern:
		e.Data = map[string]string{"uri": subject}
	case failInvalidArgument:
		e.Message = err.Error()
	case failInvalidCursor:
		e.Message = a.message + ": not one a " + subject + " list returned"
	case failCapabilityNotDeclared:
		return askFailed(method, &askFailure{a.code, err.Error()}) // a tools/call's isError result, else -32602
	case failMissingCapability:
		e.Message = err.Error()
		if ce, ok := err.(*capabilityError); ok {
			e.Data = ce.requiredCapabilities()
		}
	case failBackendFailed:
		if m, ok := failedMessages[method]; ok {
			e.Message = m
		}
		return Response{Err: e, fail: f, cause: err}
	}
	return Response{Err: e, fail: f}
}

// asked is the answer of a feature method that needs the client first:
// its input requests, unless the client did not declare what they need
// (ErrCapabilityNotDeclared's answer, backendErrors).
func asked(req *Request, method string, reqs mcp.InputRequestMap, state string) Response {
	if err := missingCapabilities(reqs, req.ClientCapabilities); err != nil {
		return backendFailed(req, method, "", err)
	}
	// A copy, so that a handler's later change of its own map cannot reach
	// the answer on its way.
	return Response{InputRequests: maps.Clone(reqs), State: state}
}

// capabilityError is fault.ErrCapabilityNotDeclared with what the input
// requests need that the client did not declare.
type capabilityError struct {
	names   []string // sorted, as the message says them
	missing mcp.ClientCapabilities
}

func (e *capabilityError) Error() string {
	noun := "capability"
	if len(e.names) > 1 {
		noun = "capabilities"
	}
	return "the client did not declare the " + strings.Join(e.names, ", ") + " " + noun + ": " + fault.ErrCapabilityNotDeclared.Error()
}

func (e *capabilityError) Unwrap() error { return fault.ErrCapabilityNotDeclared }

// requiredCapabilities is the data of a -32021 error: the missing
// capabilities as the wire names them (roots as an object).
func (e *capabilityError) requiredCapabilities() map[string]any {
	out := map[string]any{}
	if e.missing.Elicitation != nil {
		out["elicitation"] = e.missing.Elicitation
	}
	if e.missing.Sampling != nil {
		out["sampling"] = map[string]any{}
	}
	if e.missing.RootsV2 != nil {
		out["roots"] = map[string]any{}
	}
	return map[string]any{"requiredCapabilities": out}
}

// missingCapabilities returns what the input requests need that caps does
// not declare, or nil when it declares every one: URL-mode elicitation
// needs elicitation.url; form mode, elicitation (with form, or neither
// member: form is assumed); sampling; roots. A nil request or one of no
// known method needs nothing here: asking it fails (questions).
func missingCapabilities(reqs mcp.InputRequestMap, caps *mcp.ClientCapabilities) *capabilityError {
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	var e capabilityError
	for _, r := range reqs {
		if isNilRequest(r) {
			continue
		}
		switch r := r.(type) {
		case *mcp.ElicitParams:
			el := caps.Elicitation
			switch url := isURLElicitation(r); {
			case url && (el == nil || el.URL == nil):
				e.names = append(e.names, "elicitation (url mode)")
				e.missing.Elicitation = mergeElicitation(e.missing.Elicitation, &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}})
			case !url && (el == nil || el.Form == nil && el.URL != nil):
				e.names = append(e.names, "elicitation")
				e.missing.Elicitation = mergeElicitation(e.missing.Elicitation, &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}})
			}
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams:
			if caps.Sampling == nil {
				e.names = append(e.names, "sampling")
				e.missing.Sampling = &mcp.SamplingCapabilities{}
			}
		case *mcp.ListRootsParams:
			if caps.RootsV2 == nil && !caps.Roots.ListChanged {
				e.names = append(e.names, "roots")
				e.missing.RootsV2 = &mcp.RootCapabilities{}
			}
		}
	}
	if len(e.names) == 0 {
		return nil
	}
	slices.Sort(e.names)
	e.names = slices.Compact(e.names)
	return &e
}

func mergeElicitation(a, b *mcp.ElicitationCapabilities) *mcp.ElicitationCapabilities {
	if a == nil {
		return b
	}
	if b.Form != nil {
		a.Form = b.Form
	}
	if b.URL != nil {
		a.URL = b.URL
	}
	return a
}

package mcpruntime

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/transport"
)

// Exchange is what a handler of either protocol era has of the request it
// serves besides its arguments: the client's answers to what an earlier
// round asked (Input), the handler's own state from that round (State), the
// client's capabilities, and the request's stream back to the client
// (Progress, Log, CloseStream). ToolCall, ResourceRead and PromptGet embed
// it.
//
// A handler never sends a request to the client. When it needs one — an
// elicitation, a sampling, the client's roots — it returns InputRequired
// (for a prompt or a resource: a result with InputRequests) naming what it
// needs and a state of its own, and is called again with the answers: in a
// 2025 session the runtime asks the client over the request's stream and
// waits; in the 2026-07-28 era the client calls again with them. The same
// handler serves both (SPEC §5b.6).
type Exchange struct {
	out    transport.Output // nil: nothing goes back (Runtime.CallTool without progress)
	caps   *mcp.ClientCapabilities
	inputs mcp.InputResponseMap
	state  string
}

// Input returns the client's answer to the input request the previous
// round named key: an *mcp.ElicitResult (an accepted form's content
// validated against the requested schema — in the 2026-07-28 era when the
// retry carries the requestState the runtime handed out, as every client
// that was asked does; a stateless first round's answers come by shape
// only), an *mcp.CreateMessageWithToolsResult or
// *mcp.CreateMessageResult, or an *mcp.ListRootsResult. False on a first
// round, or when the client gave no answer for key.
func (x *Exchange) Input(key string) (mcp.InputResponse, bool) {
	v, ok := x.inputs[key]
	return v, ok && v != nil
}

// State returns the state the handler returned with its input requests in
// the previous round; "" on the first. The runtime carries it (sealed, in
// the 2026-07-28 era) and never shows it to the client.
func (x *Exchange) State() string { return x.state }

// ClientCapabilities returns what the client declared: at initialize in a
// 2025 session, on the request itself in the 2026-07-28 era. Never nil.
func (x *Exchange) ClientCapabilities() *mcp.ClientCapabilities {
	if x.caps == nil {
		return &mcp.ClientCapabilities{}
	}
	return x.caps
}

// Progress reports progress to the client if the request carried a
// progress token; else it does nothing. total and message are optional (0,
// "").
func (x *Exchange) Progress(progress, total float64, message string) {
	if x.out != nil {
		x.out.Progress(progress, total, message)
	}
}

// Log sends notifications/message on the request's stream if level passes
// the level the client asked for (logging/setLevel in a 2025 session, the
// request's logLevel in the 2026-07-28 era); else, and when the client did
// not ask, nothing.
func (x *Exchange) Log(level mcp.LoggingLevel, logger string, data any) {
	if x.out != nil {
		x.out.Log(level, logger, data)
	}
}

// CloseStream ends the request's SSE stream now, before its answer: a
// 2025-11-25 client resumes with GET and Last-Event-ID and gets the rest
// there. The handler goes on.
func (x *Exchange) CloseStream() {
	if x.out != nil {
		x.out.CloseStream()
	}
}

// InputRequired returns the result of a tool handler that needs the client
// first: requests names each question by a key of the handler's choosing
// (an *mcp.ElicitParams, *mcp.CreateMessageParams or *mcp.ListRootsParams),
// state is the handler's own, given back by State in the next round. The
// handler is called again with the answers (Input).
func InputRequired(requests mcp.InputRequestMap, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{InputRequests: requests, RequestState: state}
}

// ErrCapabilityNotDeclared is what a request gets when its handler asked
// the client for something the client did not declare it can do (an
// elicitation without the elicitation capability, …): in a 2025 session a
// tools/call answers it as an isError result, other requests as JSON-RPC
// -32602; in the 2026-07-28 era it is -32021 with data.requiredCapabilities.
// A handler avoids it by reading ClientCapabilities first.
var ErrCapabilityNotDeclared = errors.New("client capability not declared")

// missingCapabilities returns the capabilities the input requests need that
// caps does not declare, as a ClientCapabilities value naming them, or nil
// when every one is declared. URL-mode elicitation needs elicitation.url;
// form mode, elicitation (with form, or neither: form is assumed).
func missingCapabilities(reqs mcp.InputRequestMap, caps *mcp.ClientCapabilities) *mcp.ClientCapabilities {
	if caps == nil {
		caps = &mcp.ClientCapabilities{}
	}
	var miss mcp.ClientCapabilities
	missing := false
	for _, r := range reqs {
		switch r := r.(type) {
		case *mcp.ElicitParams:
			e := caps.Elicitation
			url := r.Mode == "url" || (r.Mode == "" && (r.URL != "" || r.ElicitationID != ""))
			switch {
			case url && (e == nil || e.URL == nil):
				miss.Elicitation = mergeElicitation(miss.Elicitation, &mcp.ElicitationCapabilities{URL: &mcp.URLElicitationCapabilities{}})
				missing = true
			case !url && (e == nil || (e.Form == nil && e.URL != nil)):
				miss.Elicitation = mergeElicitation(miss.Elicitation, &mcp.ElicitationCapabilities{Form: &mcp.FormElicitationCapabilities{}})
				missing = true
			}
		case *mcp.CreateMessageParams, *mcp.CreateMessageWithToolsParams:
			if caps.Sampling == nil {
				miss.Sampling, missing = &mcp.SamplingCapabilities{}, true
			}
		case *mcp.ListRootsParams:
			if caps.RootsV2 == nil && !caps.Roots.ListChanged {
				miss.RootsV2, missing = &mcp.RootCapabilities{}, true
			}
		}
	}
	if !missing {
		return nil
	}
	return &miss
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

// capabilityNames lists what caps names, sorted, for messages.
func capabilityNames(caps *mcp.ClientCapabilities) string {
	var names []string
	if caps.Elicitation != nil {
		names = append(names, "elicitation")
	}
	if caps.Sampling != nil {
		names = append(names, "sampling")
	}
	if caps.RootsV2 != nil {
		names = append(names, "roots")
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// capabilityError is ErrCapabilityNotDeclared with what was missing.
type capabilityError struct{ missing *mcp.ClientCapabilities }

func (e *capabilityError) Error() string {
	return fmt.Sprintf("the client did not declare the %s capability: %v", capabilityNames(e.missing), ErrCapabilityNotDeclared)
}

func (e *capabilityError) Unwrap() error { return ErrCapabilityNotDeclared }

// requiredCapabilities is the data of a -32021 error: the missing
// capabilities as the wire names them (roots as an object).
func (e *capabilityError) requiredCapabilities() map[string]any {
	out := map[string]any{}
	if m := e.missing; m.Elicitation != nil {
		out["elicitation"] = m.Elicitation
	}
	if e.missing.Sampling != nil {
		out["sampling"] = map[string]any{}
	}
	if e.missing.RootsV2 != nil {
		out["roots"] = map[string]any{}
	}
	return map[string]any{"requiredCapabilities": out}
}

// cloneInputs copies an input request map so a handler's later change of
// its own map cannot reach a response on its way.
func cloneInputs(m mcp.InputRequestMap) mcp.InputRequestMap { return maps.Clone(m) }

// progressOutput is the Output of Runtime.CallTool: progress goes to the
// caller's function, nothing else goes anywhere.
type progressOutput func(progress, total float64, message string)

func (f progressOutput) Progress(progress, total float64, message string) {
	f(progress, total, message)
}
func (progressOutput) Log(mcp.LoggingLevel, string, any) {}
func (progressOutput) CloseStream()                      {}

package mcpruntime

import (
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
	// req is the endpoint's request, read in place rather than copied (a
	// handler's call is one allocation of the hot path; copying its four
	// fields made it a size class bigger). Runtime.CallTool gives one
	// with an Out when it has a progress callback; nil otherwise: nothing
	// goes back and nothing was answered.
	req *transport.Request
}

// Input returns the client's answer to the input request the previous
// round named key: an *mcp.ElicitResult (an accepted form's content
// validated against the requested schema — in the 2026-07-28 era when the
// retry carries the requestState the runtime handed out, as every client
// that was asked does; a stateless first round's answers come by shape
// only), an *mcp.CreateMessageWithToolsResult or
// *mcp.CreateMessageResult (which one depends on the era and the client:
// Sampling answers one shape for both), or an *mcp.ListRootsResult. False
// on a first round, or when the client gave no answer for key. Elicitation,
// Sampling and Roots answer each kind as its own type.
func (x *Exchange) Input(key string) (mcp.InputResponse, bool) {
	if x.req == nil {
		return nil, false
	}
	v, ok := x.req.InputResponses[key]
	return v, ok && v != nil
}

// Elicitation returns the client's answer to the elicitation the previous
// round named key; false when there is none, or the answer under key is
// not an elicitation's.
func (x *Exchange) Elicitation(key string) (*mcp.ElicitResult, bool) {
	v, ok := x.Input(key)
	if !ok {
		return nil, false
	}
	e, ok := v.(*mcp.ElicitResult)
	return e, ok && e != nil
}

// Sampling returns the client's answer to the sampling the previous round
// named key, in one shape whatever the era and whatever was asked: the
// content as a list (a 2025 session's single block becomes a list of one).
// False when there is none, or the answer under key is not a sampling's.
// Input(key) still has the answer as it came.
func (x *Exchange) Sampling(key string) (*mcp.CreateMessageWithToolsResult, bool) {
	v, ok := x.Input(key)
	if !ok {
		return nil, false
	}
	switch a := v.(type) {
	case *mcp.CreateMessageWithToolsResult:
		return a, a != nil
	case *mcp.CreateMessageResult:
		if a == nil {
			return nil, false
		}
		out := &mcp.CreateMessageWithToolsResult{Meta: a.Meta, Model: a.Model, Role: a.Role, StopReason: a.StopReason, Content: []mcp.Content{}}
		if a.Content != nil {
			out.Content = []mcp.Content{a.Content}
		}
		return out, true
	}
	return nil, false
}

// Roots returns the client's answer to the roots request the previous
// round named key; false when there is none, or the answer under key is
// not a roots list.
func (x *Exchange) Roots(key string) (*mcp.ListRootsResult, bool) {
	v, ok := x.Input(key)
	if !ok {
		return nil, false
	}
	r, ok := v.(*mcp.ListRootsResult)
	return r, ok && r != nil
}

// State returns the state the handler returned with its input requests in
// the previous round; "" on the first. The runtime carries it (sealed, in
// the 2026-07-28 era) and never shows it to the client.
func (x *Exchange) State() string {
	if x.req == nil {
		return ""
	}
	return x.req.State
}

// ClientCapabilities returns what the client declared: at initialize in a
// 2025 session, on the request itself in the 2026-07-28 era. Never nil.
func (x *Exchange) ClientCapabilities() *mcp.ClientCapabilities {
	if x.req == nil || x.req.ClientCapabilities == nil {
		return &mcp.ClientCapabilities{}
	}
	return x.req.ClientCapabilities
}

// Progress reports progress to the client if the request carried a
// progress token; else it does nothing. total and message are optional (0,
// "").
func (x *Exchange) Progress(progress, total float64, message string) {
	if out := x.output(); out != nil {
		out.Progress(progress, total, message)
	}
}

// Log sends notifications/message on the request's stream if level passes
// the level the client asked for (logging/setLevel in a 2025 session, the
// request's logLevel in the 2026-07-28 era); else, and when the client did
// not ask, nothing.
func (x *Exchange) Log(level mcp.LoggingLevel, logger string, data any) {
	if out := x.output(); out != nil {
		out.Log(level, logger, data)
	}
}

// CloseStream ends the request's SSE stream now, before its answer: a
// 2025-11-25 client resumes with GET and Last-Event-ID and gets the rest
// there. The handler goes on.
func (x *Exchange) CloseStream() {
	if out := x.output(); out != nil {
		out.CloseStream()
	}
}

// output is the request's stream back to the client; nil: none.
func (x *Exchange) output() transport.Output {
	if x.req == nil {
		return nil
	}
	return x.req.Out
}

// InputRequired returns the result of a tool handler that needs the client
// first: requests names each question by a key of the handler's choosing
// (an *mcp.ElicitParams, *mcp.CreateMessageParams or *mcp.ListRootsParams),
// state is the handler's own, given back by State in the next round. The
// handler is called again with the answers (Input).
func InputRequired(requests mcp.InputRequestMap, state string) *mcp.CallToolResult {
	return &mcp.CallToolResult{InputRequests: requests, RequestState: state}
}

// progressOutput is the Output of Runtime.CallTool: progress goes to the
// caller's function, nothing else goes anywhere.
type progressOutput func(progress, total float64, message string)

func (f progressOutput) Progress(progress, total float64, message string) {
	f(progress, total, message)
}
func (progressOutput) Log(mcp.LoggingLevel, string, any) {}
func (progressOutput) CloseStream()                      {}

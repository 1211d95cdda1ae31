package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/agenthost/mcpruntime/actors/session"
)

// Asking the client (2025 era, SPEC §5b.18–). A backend never sends a
// request to the client: when it needs one — an elicitation, a sampling,
// the client's roots — its feature method answers a result with
// InputRequests and a RequestState. For a session the endpoint then checks
// that the client declared each capability at initialize (dispatch.go),
// sends elicitation/create,
// sampling/createMessage or roots/list on the request's own stream (the
// answer turns into an event stream if it was not one), with ids unique
// in the session ("srv-<n>", session.Asks), waits for every answer within
// Options.AskTimeout, and calls the method again with the answers and the
// State: at most maxAskRounds rounds. The client answers with a POSTed
// JSON-RPC response, admitted like any request (its token, the session's
// owner) and matched by id within that session only.

// maxAskRounds bounds the rounds of asks of one request: the handler is
// called at most maxAskRounds+1 times.
const maxAskRounds = 10

// cancelledParams are the params of notifications/cancelled.
type cancelledParams struct {
	RequestID json.RawMessage `json:"requestId"`
	Reason    string          `json:"reason,omitempty"`
}

// askRequest is a request the endpoint sends to the client.
type askRequest struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// elicitWire is elicitation/create's params as sent: the SDK's
// ElicitParams writes "mode" even when empty, which clients of
// 2025-06-18 do not know.
type elicitWire struct {
	Meta            mcp.Meta `json:"_meta,omitempty"`
	Mode            string   `json:"mode,omitempty"`
	Message         string   `json:"message"`
	RequestedSchema any      `json:"requestedSchema,omitempty"`
	URL             string   `json:"url,omitempty"`
	ElicitationID   string   `json:"elicitationId,omitempty"`
}

// question is one input request as the endpoint asks it: the key the
// backend named it by, the method and params sent, and how its answer is
// read.
type question struct {
	key    string
	method string
	params json.RawMessage
	// schema validates an accepted form elicitation's content; nil: none.
	schema *jsonschema.Schema
	// decode reads the answer's result; nil and false: not an answer of
	// this method (treated as no answer).
	decode func(result []byte, q *question) (mcp.InputResponse, bool)
}

// askFailure is why a round of asks ended without answers for the
// handler: the request is answered with it (a tools/call's isError result,
// else a JSON-RPC error).
type askFailure struct {
	code    int // JSON-RPC code for the other methods
	message string
}

// askFailed is the answer of a request whose asks failed: for tools/call
// a tool error result (the model sees why), for the other methods a
// JSON-RPC error.
func askFailed(method string, f *askFailure) Response {
	if method == "tools/call" {
		return Response{Result: &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: f.message}}, IsError: true}}
	}
	return Response{Err: &RPCError{Code: f.code, Message: f.message}}
}

// converse runs the rounds of asks a request's backend wants: while its
// method answers InputRequests, they are asked of the client and the
// method is called again with the answers and its State. It returns the last answer; the
// caller checks ctx first (a request whose context ended is abandoned).
func (s *Server) converse(ctx context.Context, out *callWriter, e *session.Entry, res Response) Response {
	for round := 0; len(res.InputRequests) > 0 && res.Err == nil; round++ {
		if out.batch {
			// Its answer is one element of the batch's JSON array: nothing
			// can be sent before it, so the client could never be asked.
			return askFailed(out.method, &askFailure{CodeInternalError, "a request in a JSON-RPC batch cannot ask the client: send it alone"})
		}
		if round == maxAskRounds {
			return askFailed(out.method, &askFailure{CodeInternalError,
				fmt.Sprintf("the request still needed the client's input after %d rounds of requests to the client", maxAskRounds)})
		}
		answers, failed := s.askClient(ctx, out, e, res.InputRequests)
		switch {
		case ctx.Err() != nil:
			return Response{}
		case failed != nil:
			return askFailed(out.method, failed)
		}
		out.req.InputResponses, out.req.State = answers, res.State
		res = s.dispatch(ctx, out.method, out.params, &out.req)
	}
	return res
}

// askClient asks the client every input request of one round and waits
// for the answers. On a failure the request is answered with it; when ctx
// ends (the call cancelled, the session ended, the credential died) both
// results are nil.
func (s *Server) askClient(ctx context.Context, out *callWriter, e *session.Entry, reqs mcp.InputRequestMap) (mcp.InputResponseMap, *askFailure) {
	qs, failed := questions(reqs, e.Version())
	if failed != nil {
		return nil, failed
	}
	round, err := e.Asks().Begin(len(qs))
	switch {
	case errors.Is(err, session.ErrClosed):
		out.cancel(err) // ended between the call's start and now
		return nil, nil
	case err != nil:
		return nil, &askFailure{CodeInternalError, fmt.Sprintf("too many requests to the client pending in this session (at most %d)", session.MaxPendingAsks)}
	}
	reason := ""
	defer func() {
		if left := e.Asks().End(round); reason != "" && len(left) > 0 {
			// The notice goes on the call's stream (kept there for its
			// resumption), and on the session's standalone stream, which the
			// client still has, when the call's stream is gone (the client
			// dropped it) or the client cancelled the call: a client that
			// cancelled stops reading the call's stream at once, while its
			// connection may still take writes, so a write that succeeded
			// there says nothing of its being read. A notice that reaches the
			// client twice names a request it no longer has the second time:
			// ignored, as MCP asks.
			onCall := out.cancelAsks(left, reason)
			if !onCall || errors.Is(context.Cause(ctx), session.ErrCancelled) {
				for _, a := range left {
					s.queue(e, cancelNotice(a, reason), "")
				}
			}
		}
	}()
	for i, ask := range round.Asks() {
		out.event(&askRequest{JSONRPC: "2.0", ID: ask.ID(), Method: qs[i].method, Params: qs[i].params})
	}
	timer := time.NewTimer(s.opts.AskTimeout)
	defer timer.Stop()
	answers := make(mcp.InputResponseMap, len(qs))
	answered := make([]bool, len(qs))
	for got := 0; got < len(qs); got++ {
		select {
		case a := <-round.Answers():
			q := &qs[a.Index]
			answered[a.Index] = true
			if a.Error != nil {
				reason = "another request to the client failed"
				return nil, &askFailure{CodeInternalError, fmt.Sprintf("the client answered %s with an error: %s", q.method, clientErrorMessage(a.Error))}
			}
			if v, ok := q.decode(a.Result, q); ok {
				answers[q.key] = v
			} // else: no valid answer, as if none came; the handler asks again
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, session.ErrClosed) && !errors.Is(cause, errCredentialDead) {
				reason = "the request was cancelled"
			}
			return nil, nil
		case <-timer.C:
			reason = "timed out"
			return nil, &askFailure{CodeInternalError, fmt.Sprintf("the client did not answer within %v (%s)", s.opts.AskTimeout, unanswered(qs, answered))}
		}
	}
	return answers, nil
}

// unanswered names the methods of the round's unanswered asks.
func unanswered(qs []question, answered []bool) string {
	var names []string
	for i := range qs {
		if !answered[i] && !slices.Contains(names, qs[i].method) {
			names = append(names, qs[i].method)
		}
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// clientErrorMessage is the code and message of a client's JSON-RPC error
// object, the message cut to 256 bytes (never inside a character).
func clientErrorMessage(raw []byte) string {
	var e struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}
	if json.Unmarshal(raw, &e) != nil {
		return "malformed error"
	}
	return fmt.Sprintf("%d %s", e.Code, strings.ToValidUTF8(truncate(e.Message, 256), ""))
}

// questions turns a round's input requests into what is sent, in the
// order of their keys; the dispatch checked the client declared what
// each needs (missingCapabilities). A form
// elicitation's requested schema is compiled here: one that does not
// compile is the handler's fault, never the client's.
func questions(reqs mcp.InputRequestMap, version string) ([]question, *askFailure) {
	keys := make([]string, 0, len(reqs))
	for k := range reqs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	qs := make([]question, 0, len(keys))
	for _, k := range keys {
		q := question{key: k}
		var params any
		if isNilRequest(reqs[k]) {
			return nil, &askFailure{CodeInternalError, fmt.Sprintf("input request %q is nil", k)}
		}
		switch r := reqs[k].(type) {
		case *mcp.ElicitParams:
			url := isURLElicitation(r)
			w := elicitWire{Meta: r.Meta, Message: r.Message, URL: r.URL, ElicitationID: r.ElicitationID}
			if resumable(version) { // 2025-11-25 names the mode
				w.Mode = "form"
				if url {
					w.Mode = "url"
				}
			}
			switch {
			case url:
			case r.RequestedSchema == nil:
				w.RequestedSchema = emptyForm // form mode requires one; nothing to validate
			default:
				sch, err := compileRequested(r.RequestedSchema)
				if err != nil {
					return nil, &askFailure{CodeInternalError, "the request's elicitation schema is invalid: " + err.Error()}
				}
				w.RequestedSchema, q.schema = r.RequestedSchema, sch
			}
			q.method, params, q.decode = "elicitation/create", w, decodeElicit
		case *mcp.CreateMessageParams:
			q.method, params, q.decode = "sampling/createMessage", r, decodeAs[mcp.CreateMessageResult]
		case *mcp.CreateMessageWithToolsParams:
			q.method, params, q.decode = "sampling/createMessage", r, decodeAs[mcp.CreateMessageWithToolsResult]
		case *mcp.ListRootsParams:
			if r == nil {
				r = &mcp.ListRootsParams{}
			}
			q.method, params, q.decode = "roots/list", r, decodeAs[mcp.ListRootsResult]
		default:
			return nil, &askFailure{CodeInternalError, fmt.Sprintf("input request %q: %T is not a request the client can be asked", k, r)}
		}
		b, err := json.Marshal(params)
		if err != nil {
			return nil, &askFailure{CodeInternalError, fmt.Sprintf("input request %q: %v", k, err)}
		}
		q.params = b
		qs = append(qs, q)
	}
	return qs, nil
}

// emptyForm is the requested schema of a form elicitation that named none.
var emptyForm = json.RawMessage(`{"type":"object","properties":{}}`)

// isNilRequest reports whether r is nil or a nil pointer of one of the
// request types.
func isNilRequest(r mcp.InputRequest) bool {
	switch r := r.(type) {
	case nil:
		return true
	case *mcp.ElicitParams:
		return r == nil
	case *mcp.CreateMessageParams:
		return r == nil
	case *mcp.CreateMessageWithToolsParams:
		return r == nil
	}
	return false // a nil *mcp.ListRootsParams asks with {}
}

// compileRequested compiles an elicitation's requested schema as JSON.
func compileRequested(v any) (*jsonschema.Schema, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{}) // no loader: a schema must be self-contained
	if err := c.AddResource("mem:///requested.json", doc); err != nil {
		return nil, err
	}
	return c.Compile("mem:///requested.json")
}

// decodeAs reads a result as a T.
func decodeAs[T any, P interface {
	*T
	mcp.InputResponse
}](result []byte, _ *question) (mcp.InputResponse, bool) {
	var v T
	if json.Unmarshal(result, &v) != nil {
		return nil, false
	}
	return P(&v), true
}

// decodeElicit reads an elicitation's answer: an action of accept,
// decline or cancel; an accepted form's content must validate against the
// requested schema (absent content counts as {}), else the answer counts
// as none.
func decodeElicit(result []byte, q *question) (mcp.InputResponse, bool) {
	var raw struct {
		Action  string          `json:"action"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(result, &raw) != nil {
		return nil, false
	}
	switch raw.Action {
	case "accept":
		if q.schema != nil {
			content := raw.Content
			if len(content) == 0 || string(content) == "null" {
				content = json.RawMessage(`{}`)
			}
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(content))
			if err != nil || q.schema.Validate(doc) != nil {
				return nil, false
			}
		}
	case "decline", "cancel":
	default:
		return nil, false
	}
	var v mcp.ElicitResult
	if json.Unmarshal(result, &v) != nil {
		return nil, false
	}
	return &v, true
}

// answerAsk hands a POSTed JSON-RPC response to the session's ask of its
// id; a response nothing awaits (an unknown id, a second answer, a late
// one) is dropped. Either way the POST is answered 202.
func (s *Server) answerAsk(e *session.Entry, msg *message) {
	key, ok := idKey(msg.ID)
	if !ok {
		return
	}
	var result, rpcErr []byte
	if len(msg.Error) > 0 {
		rpcErr = msg.Error
	} else {
		result = msg.Result
	}
	e.Asks().Answer(key, result, rpcErr)
}

// cancelAsks tells the client, on the request's stream if it is still
// there, that the runtime abandoned asks (notifications/cancelled, the
// ask's id as requestId). It is sent even when the request's own context
// ended: that is when asks are abandoned.
// It reports whether the notices went out on a stream the client is
// reading.
func (c *callWriter) cancelAsks(asks []*session.Ask, reason string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done || c.stream == nil {
		return false
	}
	for _, a := range asks {
		c.send(cancelNotice(a, reason), false)
	}
	return c.direct
}

// cancelNotice is the notifications/cancelled of an abandoned ask.
func cancelNotice(a *session.Ask, reason string) []byte {
	data, _ := json.Marshal(&notification{JSONRPC: "2.0", Method: "notifications/cancelled", Params: cancelledParams{RequestID: a.ID(), Reason: reason}})
	return data
}

package mcpruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/credential"
	"github.com/agenthost/mcpruntime/internal/jsonenc"
)

// The built-in tools of SPEC §4. Hosts add their own with RegisterTool.
func (r *Runtime) builtinTools() []Tool {
	return []Tool{
		{
			Tool: mcp.Tool{
				Name:        "runtime_capabilities",
				Title:       "Runtime capabilities",
				Description: "Who the caller is (namespace kind, thread, instance), its capabilities, and which tools it may call now.",
				InputSchema: json.RawMessage(`{"type":"object","additionalProperties":false}`),
			},
			Access:  AccessRead,
			Handler: r.toolCapabilities,
		},
		{
			Tool: mcp.Tool{
				Name:  "thread_list",
				Title: "List threads",
				Description: "List threads with their status and current provider instance, " + strconv.Itoa(DefaultPageSize) +
					" at a time, ordered by id; pass the answer's nextCursor as cursor for the next ones.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"cursor":{"type":"string","minLength":1,"maxLength":256}},"additionalProperties":false}`),
			},
			Access:  AccessRead,
			Handler: r.toolThreadList,
		},
		{
			Tool: mcp.Tool{
				Name:        "thread_read",
				Title:       "Read a thread",
				Description: "Read a thread: status, current instance, active run and recent messages. Defaults to the caller's thread.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"threadId":{"type":"string","minLength":1,"maxLength":128}},"additionalProperties":false}`),
			},
			Access:  AccessRead,
			Handler: r.toolThreadRead,
		},
		{
			Tool: mcp.Tool{
				Name:        "thread_post",
				Title:       "Post to a thread",
				Description: "Post a message to a thread (default: the caller's). The caller must own its thread's active run.",
				InputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string","minLength":1,"maxLength":65536},"threadId":{"type":"string","minLength":1,"maxLength":128}},"required":["text"],"additionalProperties":false}`),
			},
			Access:       AccessMutate,
			AllowClients: true,
			Handler:      r.toolThreadPost,
		},
	}
}

// structured is a result of v: v's JSON as structuredContent (a
// jsonenc.Encoded, so that the endpoint copies those bytes instead of
// encoding, or rescanning, them again) and as the one text block. The
// result, its block and its content slice are one allocation (the
// built-ins are on the hot path). v is a typed value whose fields are in
// the order of their JSON names, so the object is written as encoding/json
// writes a map: keys sorted.
func structured(v any) *mcp.CallToolResult {
	enc, _ := jsonenc.Marshal(v) // the built-ins' values are strings and slices of them
	one := &struct {
		res     mcp.CallToolResult
		text    mcp.TextContent
		content [1]mcp.Content
	}{}
	one.text.Text = string(enc.Bytes())
	one.content[0] = &one.text
	one.res.Content, one.res.StructuredContent = one.content[:], enc
	return &one.res
}

// providerCapabilities and clientCapabilities are runtime_capabilities'
// answer to a provider credential and to a client grant.
type providerCapabilities struct {
	Capabilities  []string `json:"capabilities"`
	Instance      string   `json:"instance"`
	NamespaceKind string   `json:"namespaceKind"`
	ThreadID      string   `json:"threadId"`
	Tools         []string `json:"tools"`
}

type clientCapabilities struct {
	Access        string   `json:"access"`
	Capabilities  []string `json:"capabilities"`
	ClientID      string   `json:"clientId"`
	NamespaceKind string   `json:"namespaceKind"`
	Tools         []string `json:"tools"`
}

func (r *Runtime) toolCapabilities(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	c := call.Caller
	tools, order := r.tools.snapshot()
	callable := make([]string, 0, len(order))
	for _, name := range order {
		if t := tools[name]; refusalOf(t, c) == mayCall && r.liveFor(t.Access, c) {
			callable = append(callable, name)
		}
	}
	caps := c.Capabilities
	if caps == nil {
		caps = []string{}
	}
	if c.Provider() {
		return structured(providerCapabilities{Capabilities: caps, Instance: c.Instance, NamespaceKind: "provider",
			ThreadID: c.Thread, Tools: callable}), nil
	}
	return structured(clientCapabilities{Access: c.Access, Capabilities: caps, ClientID: c.Client, NamespaceKind: "client",
		Tools: callable}), nil
}

// liveFor reports whether a mutate tool would currently pass its liveness
// check for c; other classes have none beyond authentication.
func (r *Runtime) liveFor(a Access, c Principal) bool {
	if a != AccessMutate || !c.Provider() {
		return true
	}
	return credential.CheckLive(r.store.Read(), c, r.cfg.Now()) == nil
}

// nonNil is a copy of s, [] for nil (JSON's empty array, not null).
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
}

// threadPage is thread_list's answer.
type threadPage struct {
	NextCursor string          `json:"nextCursor,omitempty"`
	Threads    []threadSummary `json:"threads"`
}

type threadSummary struct {
	ThreadID string `json:"threadId"`
	Status   string `json:"status"`
	Instance string `json:"instance,omitempty"`
}

// toolThreadList answers one page: {"threads": [...], "nextCursor": "…"},
// nextCursor absent on the last page. A cursor no listing returned is an
// invalid_arguments refusal.
func (r *Runtime) toolThreadList(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	var args struct {
		Cursor string `json:"cursor"`
	}
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	page, err := r.ListThreads(ctx, ListOptions{Cursor: args.Cursor})
	if err != nil {
		return nil, err
	}
	out := make([]threadSummary, len(page.Threads))
	for i, t := range page.Threads {
		out[i] = threadSummary{ThreadID: t.ID, Status: t.Status, Instance: t.Instance}
	}
	return structured(threadPage{NextCursor: page.NextCursor, Threads: out}), nil
}

type threadArgs struct {
	ThreadID string `json:"threadId"`
	Text     string `json:"text"`
}

// threadView is thread_read's answer: a thread with its recent messages.
type threadView struct {
	ActiveRun *activeRun `json:"activeRun,omitempty"`
	Instance  string     `json:"instance"`
	Messages  []Message  `json:"messages"`
	Status    string     `json:"status"`
	ThreadID  string     `json:"threadId"`
}

type activeRun struct {
	Instance string `json:"instance"`
	RunID    string `json:"runId"`
}

// postedMessage is thread_post's answer.
type postedMessage struct {
	Author   string `json:"author"`
	Seq      uint64 `json:"seq"`
	Text     string `json:"text"`
	ThreadID string `json:"threadId"`
}

func (r *Runtime) toolThreadRead(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	var args threadArgs
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	id := args.ThreadID
	if id == "" {
		if !call.Caller.Provider() {
			return Refuse(CodeThreadCredentialRequired, "threadId is required for a client grant"), nil
		}
		id = call.Caller.Thread
	}
	t, err := r.Thread(ctx, id)
	if err != nil {
		return nil, err
	}
	const recent = 50
	out := threadView{Instance: t.Instance, Messages: t.Messages[max(0, len(t.Messages)-recent):], Status: t.Status, ThreadID: t.ID}
	if t.Run != nil {
		out.ActiveRun = &activeRun{Instance: t.Run.Instance, RunID: t.Run.ID}
	}
	return structured(out), nil
}

func (r *Runtime) toolThreadPost(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	var args threadArgs
	if err := json.Unmarshal(call.Arguments, &args); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidArgument, err)
	}
	m, err := r.Post(ctx, call.Caller, args.ThreadID, args.Text)
	if err != nil {
		return nil, err
	}
	return structured(postedMessage{Author: m.Author, Seq: m.Seq, Text: m.Text, ThreadID: orDefault(args.ThreadID, call.Caller.Thread)}), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

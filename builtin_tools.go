package mcpruntime

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agenthost/mcpruntime/internal/credential"
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

// structured is a result of v: v as structuredContent, its JSON as the one
// text block. The result, its block and its content slice are one
// allocation (the built-ins are on the hot path).
func structured(v any) *mcp.CallToolResult {
	b, _ := json.Marshal(v)
	one := &struct {
		res     mcp.CallToolResult
		text    mcp.TextContent
		content [1]mcp.Content
	}{}
	one.text.Text = string(b)
	one.content[0] = &one.text
	one.res.Content, one.res.StructuredContent = one.content[:], v
	return &one.res
}

func (r *Runtime) toolCapabilities(ctx context.Context, call *ToolCall) (*mcp.CallToolResult, error) {
	c := call.Caller
	kind := "provider"
	if !c.Provider() {
		kind = "client"
	}
	var callable []string
	tools, order := r.tools.snapshot()
	for _, name := range order {
		if r.permit(tools[name], c) == nil && r.liveFor(tools[name].Access, c) {
			callable = append(callable, name)
		}
	}
	out := map[string]any{
		"namespaceKind": kind,
		"capabilities":  nonNil(c.Capabilities),
		"tools":         nonNil(callable),
	}
	if c.Provider() {
		out["threadId"], out["instance"] = c.Thread, c.Instance
	} else {
		out["clientId"], out["access"] = c.Client, c.Access
	}
	return structured(out), nil
}

// liveFor reports whether a mutate tool would currently pass its liveness
// check for c; other classes have none beyond authentication.
func (r *Runtime) liveFor(a Access, c Principal) bool {
	if a != AccessMutate || !c.Provider() {
		return true
	}
	return credential.CheckLive(r.store.Read(), c, r.cfg.Now()) == nil
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return slices.Clone(s)
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
	res := map[string]any{"threads": out}
	if page.NextCursor != "" {
		res["nextCursor"] = page.NextCursor
	}
	return structured(res), nil
}

type threadArgs struct {
	ThreadID string `json:"threadId"`
	Text     string `json:"text"`
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
	out := map[string]any{"threadId": t.ID, "status": t.Status, "instance": t.Instance}
	if t.Run != nil {
		out["activeRun"] = map[string]string{"runId": t.Run.ID, "instance": t.Run.Instance}
	}
	out["messages"] = t.Messages[max(0, len(t.Messages)-recent):]
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
	return structured(map[string]any{"seq": m.Seq, "threadId": orDefault(args.ThreadID, call.Caller.Thread), "text": m.Text, "author": m.Author}), nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

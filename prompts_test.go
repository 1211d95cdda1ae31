package mcpruntime_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
	"github.com/agenthost/mcpruntime/memdb"
)

func echoPrompt(name string, access mcpruntime.Access, capability string, args ...string) mcpruntime.Prompt {
	p := mcpruntime.Prompt{Prompt: mcp.Prompt{Name: name, Description: "echoes"}, Access: access, Capability: capability,
		Handler: func(_ context.Context, get *mcpruntime.PromptGet) (*mcp.GetPromptResult, error) {
			var parts []string
			for _, a := range args {
				parts = append(parts, a+"="+get.Arguments[a])
			}
			return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: strings.Join(parts, ",")}}}}, nil
		},
		Complete: func(_ context.Context, req *mcpruntime.CompletionRequest) (*mcp.CompletionResultDetails, error) {
			var vals []string
			for i := range 150 {
				vals = append(vals, req.Argument.Value+strings.Repeat("x", i))
			}
			return &mcp.CompletionResultDetails{Values: vals}, nil
		}}
	for _, a := range args {
		p.Arguments = append(p.Arguments, &mcp.PromptArgument{Name: a, Required: true})
	}
	return p
}

// TestServePrompts (SPEC §5b.1-3): prompts/get with arguments, a missing
// required one -32602; a prompt the caller may not get is answered exactly
// as one that does not exist, in prompts/get, prompts/list and completion.
func TestServePrompts(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	noErr(t, rt.RegisterPrompt(echoPrompt("p_open", mcpruntime.AccessRead, "", "a", "b")))
	noErr(t, rt.RegisterPrompt(echoPrompt("p_mine", mcpruntime.AccessReadAsCaller, "", "a")))
	noErr(t, rt.RegisterPrompt(echoPrompt("p_secret", mcpruntime.AccessRead, "x", "a")))
	b := mcpruntime.NewBackend(rt, mcpruntime.MCPOptions{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	prov, _, _ := liveOn(t, rt, "T", "A")
	client := clientOf(t, rt, memdb.AccessReadOnly)

	res := resultOf[*mcp.GetPromptResult](t, "get", serve(t, b, serveReq{caller: client, method: "prompts/get", params: `{"name":"p_open","arguments":{"a":"1","b":"2"}}`}))
	if len(res.Messages) != 1 || res.Messages[0].Content.(*mcp.TextContent).Text != "a=1,b=2" {
		t.Errorf("prompts/get = %+v", res.Messages)
	}
	e := wantRPCError(t, "missing arg", serve(t, b, serveReq{caller: client, method: "prompts/get", params: `{"name":"p_open","arguments":{"a":"1"}}`}), -32602)
	if !strings.Contains(e.Message, `"b"`) {
		t.Errorf("missing argument message %q does not name it", e.Message)
	}
	wantRPCError(t, "non-string args", serve(t, b, serveReq{caller: client, method: "prompts/get", params: `{"name":"p_open","arguments":{"a":1}}`}), -32602)
	if r := serve(t, b, serveReq{caller: prov, method: "prompts/get", params: `{"name":"p_mine","arguments":{"a":"1"}}`}); r.Result == nil {
		t.Errorf("provider gets its readAsCaller prompt: %+v", r.Err)
	}

	unknown := func(method, params string) map[string]any {
		return wire(t, wantRPCError(t, method+" "+params, serve(t, b, serveReq{caller: client, method: method, params: params}), -32602))
	}
	for _, name := range []string{"p_mine", "p_secret"} {
		if got, want := unknown("prompts/get", `{"name":"`+name+`","arguments":{"a":"1"}}`), unknown("prompts/get", `{"name":"p_none","arguments":{"a":"1"}}`); !cmp.Equal(
			strings.ReplaceAll(got["Message"].(string), name, "?"), strings.ReplaceAll(want["Message"].(string), "p_none", "?")) || got["Code"] != want["Code"] {
			t.Errorf("refused %s = %v, unknown = %v: want alike", name, got, want)
		}
		ref := `{"ref":{"type":"ref/prompt","name":"` + name + `"},"argument":{"name":"a","value":"v"}}`
		if got, want := unknown("completion/complete", ref), unknown("completion/complete", strings.Replace(ref, name, "p_none", 1)); !cmp.Equal(got, want) {
			t.Errorf("refused completion %s = %v, unknown = %v", name, got, want)
		}
	}

	w := wire(t, serve(t, b, serveReq{caller: client, method: "prompts/list"}).Result)
	var names []string
	for _, p := range w["prompts"].([]any) {
		names = append(names, p.(map[string]any)["name"].(string))
	}
	if !cmp.Equal(names, []string{"p_open"}) {
		t.Errorf("client prompts/list = %v, want [p_open]", names)
	}

	// Completion: at most 100 values, hasMore past them; an argument the
	// prompt does not have completes to none.
	c := resultOf[*mcp.CompleteResult](t, "complete", serve(t, b, serveReq{caller: client, method: "completion/complete",
		params: `{"ref":{"type":"ref/prompt","name":"p_open"},"argument":{"name":"a","value":"v"}}`}))
	if len(c.Completion.Values) != 100 || !c.Completion.HasMore || c.Completion.Values[0] != "v" {
		t.Errorf("completion = %d values, hasMore %v", len(c.Completion.Values), c.Completion.HasMore)
	}
	c = resultOf[*mcp.CompleteResult](t, "complete other", serve(t, b, serveReq{caller: client, method: "completion/complete",
		params: `{"ref":{"type":"ref/prompt","name":"p_open"},"argument":{"name":"zzz","value":"v"}}`}))
	if vals, ok := wire(t, c)["completion"].(map[string]any)["values"].([]any); !ok || len(vals) != 0 {
		t.Errorf("completion of an undeclared argument = %v, want values []", wire(t, c))
	}
	wantRPCError(t, "bad ref", serve(t, b, serveReq{caller: client, method: "completion/complete", params: `{"ref":{"type":"ref/other"},"argument":{"name":"a","value":""}}`}), -32602)
}

// TestServeTemplateCompletion: completion/complete of a template variable
// (ref/resource by its uriTemplate).
func TestServeTemplateCompletion(t *testing.T) {
	rt, b := resourcesFixture(t)
	c := resultOf[*mcp.CompleteResult](t, "complete", serve(t, b, serveReq{caller: clientOf(t, rt, memdb.AccessReadOnly), method: "completion/complete",
		params: `{"ref":{"type":"ref/resource","uri":"test://items/{id}"},"argument":{"name":"id","value":"4"}}`}))
	if !cmp.Equal(c.Completion.Values, []string{"41", "42"}) {
		t.Errorf("template completion = %v", c.Completion.Values)
	}
}

// TestPromptRegistration: what cannot be registered, and list changes.
func TestPromptRegistration(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	f := &recFeed{}
	mcpruntime.AddChangeFeed(rt, f)
	dup := echoPrompt("p_dup", mcpruntime.AccessRead, "", "a")
	dup.Arguments = append(dup.Arguments, &mcp.PromptArgument{Name: "a"})
	for _, p := range []mcpruntime.Prompt{
		echoPrompt("", mcpruntime.AccessRead, ""), echoPrompt("has space", mcpruntime.AccessRead, ""),
		echoPrompt("p_m", mcpruntime.AccessMutate, ""), {Prompt: mcp.Prompt{Name: "p_h"}, Access: mcpruntime.AccessRead}, dup,
	} {
		if err := rt.RegisterPrompt(p); !errors.Is(err, mcpruntime.ErrInvalidPrompt) {
			t.Errorf("RegisterPrompt(%q) = %v, want ErrInvalidPrompt", p.Name, err)
		}
	}
	noErr(t, rt.RegisterPrompt(echoPrompt("p_a", mcpruntime.AccessRead, "")))
	if err := rt.RegisterPrompt(echoPrompt("p_a", mcpruntime.AccessRead, "")); !errors.Is(err, mcpruntime.ErrInvalidPrompt) {
		t.Errorf("RegisterPrompt of a taken name = %v", err)
	}
	if !rt.RemovePrompt("p_a") || rt.RemovePrompt("p_a") {
		t.Error("RemovePrompt")
	}
	if changed, _ := f.take(); !cmp.Equal(changed, []string{"prompts", "prompts"}) {
		t.Errorf("list changes = %v", changed)
	}
}

package mcpruntime_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpruntime "github.com/agenthost/mcpruntime"
)

// auditRecords returns the journal's audit records, in order.
func auditRecords(t *testing.T, rt *mcpruntime.Runtime) []mcpruntime.Record {
	t.Helper()
	page, err := rt.Records(0, 1<<20)
	noErr(t, err)
	var out []mcpruntime.Record
	for _, rec := range page.Records {
		if strings.HasPrefix(rec.Kind, "audit.") {
			out = append(out, rec)
		}
	}
	return out
}

// TestAuditRecords (SPEC §3.7): with Config.Audit, a scripted go-sdk
// session's every tools/call, resources/read and prompts/get leaves exactly
// one audit record, in order, naming the principal (kind, thread, instance,
// credential), what was called, how it ended (ok, refused with its code,
// error with its code, cancelled) and how long it took; no record carries
// the token or an argument, but for the one tool that opted in.
func TestAuditRecords(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{Audit: true})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	p, _, tok := liveOn(t, rt, "T", "A")
	ok := func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
		return textResult("done", nil), nil
	}
	started := make(chan struct{})
	for _, tl := range []mcpruntime.Tool{
		{Tool: mcp.Tool{Name: "plain"}, Access: mcpruntime.AccessRead, Handler: ok},
		{Tool: mcp.Tool{Name: "opted"}, Access: mcpruntime.AccessRead, AuditArguments: true, Handler: ok},
		{Tool: mcp.Tool{Name: "refuses"}, Access: mcpruntime.AccessRead,
			Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				return mcpruntime.Refuse("quota_spent", "no more today"), nil
			}},
		{Tool: mcp.Tool{Name: "fails"}, Access: mcpruntime.AccessRead,
			Handler: func(context.Context, *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				return nil, errors.New("disk on fire")
			}},
		{Tool: mcp.Tool{Name: "waits"}, Access: mcpruntime.AccessRead,
			Handler: func(ctx context.Context, _ *mcpruntime.ToolCall) (*mcp.CallToolResult, error) {
				close(started)
				<-ctx.Done()
				return nil, ctx.Err()
			}},
	} {
		noErr(t, rt.RegisterTool(tl))
	}
	ts, _ := interopServer(t, rt)
	cs := sdkConnectClient(t, ts, tok, mcp.NewClient(&mcp.Implementation{Name: "audited", Version: "1"}, nil))
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	call := func(name string, args map[string]any) {
		t.Helper()
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args}); err != nil && name != "nope" {
			t.Fatalf("CallTool(%s) = %v", name, err)
		}
	}
	const secret = "s3cr3t-value"
	call("plain", map[string]any{"password": secret})
	call("opted", map[string]any{"n": 7})
	call("refuses", map[string]any{"password": secret})
	call("fails", nil)
	call("nope", nil)
	call("thread_post", map[string]any{"text": secret})
	if _, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: mcpruntime.TranscriptURI("T")}); err != nil {
		t.Fatalf("ReadResource = %v", err)
	}
	if _, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "nope", Arguments: map[string]string{"x": secret}}); err == nil {
		t.Fatal("GetPrompt(nope) answered")
	}
	cctx, ccancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: "waits", Arguments: map[string]any{"password": secret}})
		done <- err
	}()
	<-started
	ccancel()
	<-done

	type want struct{ kind, name, outcome, code string }
	wants := []want{
		{mcpruntime.RecordAuditTool, "plain", mcpruntime.OutcomeOK, ""},
		{mcpruntime.RecordAuditTool, "opted", mcpruntime.OutcomeOK, ""},
		{mcpruntime.RecordAuditTool, "refuses", mcpruntime.OutcomeRefused, "quota_spent"},
		{mcpruntime.RecordAuditTool, "fails", mcpruntime.OutcomeError, "tool_error"},
		{mcpruntime.RecordAuditTool, "nope", mcpruntime.OutcomeError, "unknown_tool"},
		{mcpruntime.RecordAuditTool, "thread_post", mcpruntime.OutcomeOK, ""},
		{mcpruntime.RecordAuditResource, mcpruntime.TranscriptURI("T"), mcpruntime.OutcomeOK, ""},
		{mcpruntime.RecordAuditPrompt, "nope", mcpruntime.OutcomeError, "unknown_prompt"},
		{mcpruntime.RecordAuditTool, "waits", mcpruntime.OutcomeCancelled, ""},
	}
	var recs []mcpruntime.Record
	waitUntil(t, "the cancelled call's audit record", func() bool {
		recs = auditRecords(t, rt)
		return len(recs) >= len(wants)
	})
	if len(recs) != len(wants) {
		t.Fatalf("%d audit records, want %d: %+v", len(recs), len(wants), recs)
	}
	for i, w := range wants {
		rec := recs[i]
		name := rec.Tool + rec.URI + rec.Prompt
		if rec.Kind != w.kind || name != w.name || rec.Outcome != w.outcome || rec.Code != w.code {
			t.Errorf("record %d = %s %q %s %q, want %s %q %s %q", i, rec.Kind, name, rec.Outcome, rec.Code, w.kind, w.name, w.outcome, w.code)
		}
		if rec.PrincipalKind != p.Kind || rec.Principal != p.Namespace || rec.Thread != "T" || rec.Instance != "A" || rec.Credential != p.CredentialID {
			t.Errorf("record %d names %s %s (%s, %s) %s, want the caller %+v", i, rec.PrincipalKind, rec.Principal, rec.Thread, rec.Instance, rec.Credential, p)
		}
		if rec.DurationMs < 0 || rec.Time.IsZero() {
			t.Errorf("record %d: duration %v ms at %v", i, rec.DurationMs, rec.Time)
		}
		b, err := json.Marshal(rec)
		noErr(t, err)
		if strings.Contains(string(b), tok) || strings.Contains(string(b), secret) {
			t.Errorf("record %d carries the token or an argument: %s", i, b)
		}
		if (w.name == "opted") != (len(rec.Data) > 0) {
			t.Errorf("record %d: arguments %s, want them only for the tool that opted in", i, rec.Data)
		}
	}
	if got := string(recs[1].Data); got != `{"n":7}` {
		t.Errorf("opted's arguments = %s, want {\"n\":7}", got)
	}
}

// TestAuditOff: without Config.Audit no call is recorded.
func TestAuditOff(t *testing.T) {
	rt := quietRuntime(t, mcpruntime.Config{})
	registerInproc(t, rt, "A")
	createThreads(t, rt, "T")
	_, _, tok := liveOn(t, rt, "T", "A")
	ts, _ := interopServer(t, rt)
	cs := sdkConnectClient(t, ts, tok, mcp.NewClient(&mcp.Implementation{Name: "unaudited", Version: "1"}, nil))
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), hangAfter)
	defer cancel()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "thread_read", Arguments: map[string]any{}}); err != nil {
		t.Fatalf("CallTool = %v", err)
	}
	// The MCP session's opening is journaled once the call is answered.
	waitUntil(t, "mcp.opened", func() bool {
		page, err := rt.Records(0, 1<<20)
		noErr(t, err)
		for _, rec := range page.Records {
			if rec.Kind == mcpruntime.RecordMCPOpened {
				return true
			}
		}
		return false
	})
	if recs := auditRecords(t, rt); len(recs) != 0 {
		t.Fatalf("audit records without Config.Audit: %+v", recs)
	}
}

package mcpruntime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Kinds of the audit records (Config.Audit): one per tools/call,
// resources/read and prompts/get the MCP endpoint dispatched.
const (
	RecordAuditTool     = "audit.tool"     // Tool
	RecordAuditResource = "audit.resource" // URI
	RecordAuditPrompt   = "audit.prompt"   // Prompt
)

// Outcomes of an audited call (Record.Outcome).
const (
	OutcomeOK            = "ok"
	OutcomeRefused       = "refused"        // a policy refusal; Code is its code (SPEC §4.3)
	OutcomeError         = "error"          // the handler failed, or the request did (Code: unknown_tool, resource_not_found, …)
	OutcomeCancelled     = "cancelled"      // the client cancelled, the session ended, the runtime closed
	OutcomeInputRequired = "input_required" // a 2026-07-28 call answered with InputRequests, to be called again
)

// maxAuditedArguments bounds the arguments an audit record carries for a
// tool that opted in (Tool.AuditArguments); larger ones are left out and
// the record says how large they were.
const maxAuditedArguments = 16 << 10

// audit journals one call's record: who called what, how it ended and how
// long it took. It never carries the token, and the arguments only when the
// tool opted in.
//
// rec carries what is the call's own (its tool, URI or prompt, and the
// arguments a tool opted in to); the rest is filled here. The journal keeps
// a copy: rec stays on the caller's stack.
func (r *Runtime) audit(rec *Record, kind string, caller Principal, started time.Time, outcome, code string) {
	now := r.cfg.Now()
	rec.Time, rec.Kind, rec.Principal, rec.PrincipalKind = now, kind, caller.Namespace, caller.Kind
	rec.Thread, rec.Instance, rec.Client, rec.Credential = caller.Thread, caller.Instance, caller.Client, caller.CredentialID
	rec.Outcome, rec.Code, rec.DurationMs = outcome, code, float64(now.Sub(started).Microseconds())/1000
	r.journal.append(rec)
}

// toolOutcome is how a tools/call ended, for its audit record.
func toolOutcome(res *mcp.CallToolResult, err error) (outcome, code string) {
	switch {
	case err != nil:
		return errOutcome(err)
	case res == nil:
		return OutcomeOK, ""
	case len(res.InputRequests) > 0:
		return OutcomeInputRequired, ""
	case res.IsError:
		switch m := res.StructuredContent.(type) {
		case map[string]string: // Refuse
			if m["code"] != "" {
				return OutcomeRefused, m["code"]
			}
		case map[string]any: // a refusal with more to say (rate_limited)
			if c, _ := m["code"].(string); c != "" {
				return OutcomeRefused, c
			}
		}
		return OutcomeError, "tool_error"
	}
	return OutcomeOK, ""
}

// errOutcome is how a call that failed as a request ended.
func errOutcome(err error) (outcome, code string) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return OutcomeCancelled, ""
	}
	for _, c := range []struct {
		err  error
		code string
	}{
		{ErrUnknownTool, "unknown_tool"},
		{ErrResourceNotFound, "resource_not_found"},
		{ErrUnknownPrompt, "unknown_prompt"},
		{ErrInvalidArgument, "invalid_argument"},
		{ErrCapabilityNotDeclared, "capability_not_declared"},
		{ErrTimeout, "timeout"},
		{ErrClosed, "closed"},
	} {
		if errors.Is(err, c.err) {
			return OutcomeError, c.code
		}
	}
	return OutcomeError, "internal"
}

// auditedArguments is what a tool's audit record keeps of its arguments.
func auditedArguments(rec *Record, args json.RawMessage) {
	if len(args) > maxAuditedArguments {
		rec.Text = fmt.Sprintf("arguments of %d bytes left out (over %d)", len(args), maxAuditedArguments)
		return
	}
	rec.Data = append(json.RawMessage(nil), args...)
}

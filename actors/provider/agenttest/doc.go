// Package agenttest holds what the agent drivers' tests share: a scripted
// model that speaks the three wire formats the agent CLIs use, the path of
// a pinned CLI, a throwaway HOME, and a scan for a leaked token.
//
// # The scripted model
//
// [NewModel] serves, on loopback, the model APIs the pinned CLIs were
// measured to call:
//
//   - POST /v1/responses, OpenAI Responses, for Codex (wire_api
//     "responses"): its MCP tools arrive as a {"type":"namespace"} entry,
//     a call names the namespace, a tool result comes back as a
//     function_call_output item;
//   - POST /v1/messages, Anthropic Messages, for Claude Code: its MCP tools
//     are deferred (named only in a system-role message), so the model
//     first calls ToolSearch "select:<name>" and calls the tool once it is
//     in the request's tools; a result is a tool_result block;
//   - POST /v1/chat/completions, OpenAI Chat Completions, for OpenCode
//     (@ai-sdk/openai-compatible): tools are named "<server>_<tool>", a
//     result is a "tool" message, a prompt in double quotes is decoded as
//     the JSON string literal opencode run makes of it, and a
//     title-generation request ("You are a title generator…") gets
//     [Title].
//
// Each answers as the request asks: a server-sent event stream when
// "stream" is true (what the CLIs send), a JSON body otherwise.
//
// The model keeps no conversation state: every answer is decided from the
// request alone, as a real model's would be. If the conversation ends with
// the result of a tool call, the model records the result's text
// ([Model.ToolResults]) and answers "saw: <text>", ending the turn.
// Otherwise it reads the last user prompt:
//
//   - "call <tool> <json>" calls the tool whose name ends with <tool> with
//     those arguments (or answers an error text naming the tools offered,
//     if none matches);
//   - "sleep <duration>" holds the answer for that long, or until the
//     request is cancelled or the model closed, then answers "slept";
//   - anything else is answered "ok: <prompt>".
//
// A tool result is recorded as the agent hands it to the model: Codex's
// header before a tool's output ("Wall time: …\nOutput:\n") is dropped;
// Codex passes an MCP tool's structured content (its JSON), Claude Code and
// OpenCode its text content.
//
// Every request is recorded ([Model.Requests]), those to unknown paths
// (answered 404) included. Bodies are bounded (8 MiB, else 413). A
// streamed answer's first events are sent at once, so a held answer is a
// turn in progress to the agent; its request's end (the agent's
// interrupt) ends the hold.
//
// The package's tests run each pinned CLI in its one-shot mode (codex
// exec, claude -p, opencode run) against the model: a text, a built-in
// tool's call and an MCP tool's call (through Claude Code's ToolSearch).
//
// # The other helpers
//
// [Binary] is the path of a CLI pinned in e2e/agents (make test-deps
// installs them); a missing one fails the test, it does not skip it.
// [Home] is a throwaway HOME. [Leaks] says where a secret appears: in any
// process's command line, in a file under the directories scanned, or in
// captured logs.
package agenttest

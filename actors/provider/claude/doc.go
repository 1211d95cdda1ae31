// Package claude is the "claude" provider kind: every provider session is
// one long-lived Claude Code process in stream-json mode (`claude -p
// --input-format stream-json --output-format stream-json`, a JSON message
// per line on its stdin and stdout), serving one thread (the driver is
// exclusive: no process ever holds another thread's token). It is written
// against Claude Code 2.1.328; TestProtocolPinned checks the binary's
// version and finds every message, field and flag the driver uses in the
// zod schemas compiled into it (Claude Code ships no separate schema of
// its control protocol).
//
// # What the agent needs
//
// The `claude` command (Config.Command, else "claude" in PATH; what the
// npm package installs is a native executable, no node needed) and a
// model: Config.BaseURL, an Anthropic Messages API (Claude Code posts to
// <baseURL>/v1/messages), handed over as ANTHROPIC_BASE_URL; Config.Model
// (--model); Config.APIKeyEnv, the runtime's variable holding the model
// key, handed over as ANTHROPIC_API_KEY. Without a baseURL Claude Code
// uses Anthropic's API, which this package's tests do not exercise (they
// have no network).
//
// # Where the token goes
//
// Each session gets a private directory (0700) under Config.ConfigDir:
// mcp.json (0600, written atomically) and HOME, with CLAUDE_CONFIG_DIR
// (HOME/.claude) and XDG_CONFIG_HOME, XDG_CACHE_HOME, XDG_DATA_HOME and
// XDG_STATE_HOME under it: Claude Code's state, its transcripts, nothing
// of the user's ~/.claude. mcp.json is the only place the token is:
//
//	{"mcpServers":{"<serverName>":{"type":"http","url":"<endpoint>",
//	  "headers":{"Authorization":"Bearer <token>"}}}}
//
// and a rotation hands the new one over on stdin (below). The environment
// is built from scratch (Config.InheritEnv and Config.Env, see agentproc)
// plus the directories above, ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY,
// DISABLE_AUTOUPDATER=1, CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1,
// DISABLE_TELEMETRY=1 and DISABLE_ERROR_REPORTING=1; the token is in no
// environment. The arguments, public to every local user, carry no
// secret:
//
//	claude <Config.Args…> -p --input-format stream-json --output-format stream-json
//	  --verbose --mcp-config <dir>/mcp.json --strict-mcp-config
//	  --allowedTools mcp__<serverName>__* [--model M]
//
// --strict-mcp-config makes the runtime's server the only one (no user,
// project or plugin MCP configuration is read). A host's Config.Args come
// first, so a variadic flag of the host's (--allowedTools Read Grep) ends
// where the driver's begin; ParseConfig refuses host arguments that are
// the driver's own (-p, the formats, --mcp-config, --strict-mcp-config,
// --permission-prompt-tool, --dangerously-skip-permissions, --resume,
// --continue, --session-id, --settings, --model, --debug…), and
// variables that are (ANTHROPIC_API_KEY, ANTHROPIC_AUTH_TOKEN,
// CLAUDE_CODE_OAUTH_TOKEN, CLAUDE_CONFIG_DIR). The token and the model
// key are redacted from every logged stderr line; stdout (the protocol)
// is never logged, since Claude Code's mcp_status answer echoes the
// server's headers, the token with them.
//
// CLAUDE_CODE_SUBPROCESS_ENV_SCRUB=1 (Config.ScrubSubprocessEnv) would
// give the commands the model runs an environment without the model key;
// measured on 2.1.328, Claude Code then refuses to start unless bubblewrap
// is installed ("bubblewrap is required for subprocess env scrubbing and
// isolation"), so it is off by default. The MCP token is not in any
// environment either way. (Every process runs as the runtime's user: one
// that goes looking can read a sibling's files and /proc/<pid>/environ.
// Isolation between agents needs a user per instance.)
//
// # Permissions
//
// --allowedTools mcp__<serverName>__* allows the runtime's tools (without
// it a call is refused: "Claude requested permissions to use …"). Other
// tools keep Claude Code's default permission mode: in -p mode a tool
// that needs approval is refused (measured: Bash "This command requires
// approval", reported as an error event and an error tool result); a host
// may allow more with its own --allowedTools or --permission-mode
// (measured: a host's --allowedTools Bash adds to the driver's; the
// model's `env` then shows the model key, never the MCP token). The
// driver passes no --permission-prompt-tool, so Claude Code asks it
// nothing; a can_use_tool control request that comes anyway is denied
// ("no one is there to approve"), any other request of Claude Code's is
// answered with an error.
//
// # Open and health
//
// Open writes mcp.json, starts Claude Code, sends the control request
// initialize, then asks mcp_status until Claude Code reports the
// runtime's server connected, with the session's Authorization in its
// configuration and its tools listed, all within Config.StartTimeout and
// the open's context (measured: 1.2–2.7 s with the scripted model; one
// process, RSS ~190 MB). Otherwise Open fails with Claude Code's own
// words, the process stopped and the directory removed: for a refused
// token `MCP server "mcpruntime" failed: Server rejected the configured
// Authorization header (HTTP 401)…`, for no server there `… failed:
// ECONNREFUSED: Unable to connect…`.
//
// Status: connected once the open (or a rotation) saw it; the servers'
// states in each turn's system/init message (connected, pending,
// failed, needs-auth) are reported when they change; failed with "HTTP
// 401" is needs_auth. A revoked token does not change Claude Code's
// state: an MCP call of the runtime's tool whose result is Claude Code's
// `MCP server "<name>" rejected the Authorization header in its config…`
// is reported as needs_auth.
//
// # Turns
//
// StartTurn writes a user message ({"type":"user","uuid":…,"message":
// {"role":"user","content":[{"type":"text","text":…}]}}) and returns once it is
// written (stream-json acknowledges nothing; Claude Code reads stdin in
// order); one turn at a time. Claude Code's messages map to Events: the
// turn's first system/init → turn_started; an assistant message's text
// block → message, its tool_use block → tool_call (Tool as Claude Code
// names it: "ToolSearch", "mcp__<server>__<tool>", "Bash"…; Data its
// input); a tool_result block in a user message → tool_result (Text its
// text content, a ToolSearch result as "loaded <tool>"; Error from
// is_error); system/permission_denied and system/api_retry → error.
// Texts are cut to 4 KiB. The runtime's tools are deferred: the model
// loads one with ToolSearch ("select:mcp__<server>__<tool>") before it
// calls it, so a call is two tool_call/tool_result pairs. The result
// message ends the turn: completed for subtype success, failed (with its
// errors or result text) for is_error or another subtype. Interrupt sends
// the control request interrupt and returns once Claude Code answered;
// the result that follows (error_during_execution) is reported
// interrupted (measured: 50–640 ms from Runtime.EndRun to the end). Each
// prompt carries a uuid and the interrupt asks cancel_queued, so an
// Interrupt that comes before Claude Code began the turn (it is still
// queued) cancels it: Claude Code names it in its answer's cancelled
// list, sends no result for it, and the driver reports it interrupted.
// Turn round trips measured with the scripted model: 80–210 ms for a text
// answer, 190 ms–1.4 s for one with an MCP call (a session's first turn
// the slowest).
//
// # Rotation
//
// Attach with a new Authorization rewrites mcp.json, sends the control
// request mcp_set_servers with the runtime's server alone (the set is
// replaced whole; the token goes on stdin, never in argv), and asks
// mcp_status until the server is connected with the new Authorization and
// its tools listed; only then it returns, and the runtime revokes the old
// credential (measured: 40–240 ms, the higher under load). After that the
// old token comes back at most once, refused: the replaced client's
// notification stream (subscriptions/listen), closed by the revocation,
// reconnecting while Claude Code tears that client down (seen under
// load); no call is made with it. It is the same process: the conversation goes on. A turn in
// progress is neither waited for nor interrupted: Claude Code takes
// mcp_set_servers mid-turn (measured: 0.2–1.5 s during a held model answer)
// and the turn completes; a call of the old token's already in flight
// when the old credential is revoked may fail. If the rotation fails
// (mcp_set_servers answers the server's error, for a refused token the
// same "HTTP 401" words as an open, reported needs_auth) the session is
// dead: Attach fails with Claude Code's words and Died is reported. Attach with an
// empty Authorization is a re-attach: nothing happens.
//
// # Close and death
//
// Detach keeps Claude Code (a handoff). Close stops it (stdin closed,
// SIGTERM, SIGKILL after Config.Grace, to its whole process group: Claude
// Code and what it started; measured 110–200 ms), reports a turn still
// running as interrupted, and removes the private directory. A Claude
// Code that exits on its own, or whose stdout ends, is reported with Died
// (with its exit status and last stderr lines), after the end of a turn
// in progress as failed.
package claude

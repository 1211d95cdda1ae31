// Package codex is the "codex" provider kind: every provider session is one
// Codex CLI app-server (`codex app-server`, JSON-RPC over its stdin and
// stdout, a message per line), serving one thread (the driver is
// exclusive: no process's environment ever holds another thread's token).
// It is written against Codex 0.169.0; TestProtocolPinned regenerates the
// binary's own protocol schema and fails if a method or field the driver
// uses is gone.
//
// # What the agent needs
//
// The `codex` command (Config.Command, else "codex" in PATH; the npm
// wrapper runs under node, so node must be in the PATH it inherits) and a
// model: Config.BaseURL, an OpenAI Responses API (Codex posts to
// <baseURL>/responses), Config.Model, and Config.APIKeyEnv, the runtime's
// variable holding the model key. With a baseURL the driver defines the
// model provider "mcpruntime" (wire_api "responses", env_key
// OPENAI_API_KEY) and selects it; without one Codex uses its built-in
// OpenAI provider, which this package's tests do not exercise (they have
// no network).
//
// # Where the token goes
//
// Each session gets a private directory (0700) under Config.ConfigDir
// holding a fresh CODEX_HOME: Codex's state, its thread rollouts, nothing
// of the user's ~/.codex. The environment is built from scratch
// (Config.InheritEnv and Config.Env, see agentproc) plus CODEX_HOME, the
// bare token in MCPRUNTIME_TOKEN and the model key in OPENAI_API_KEY. The
// arguments, public to every local user, carry no secret:
//
//	codex app-server -c approval_policy="never" <Config.Args…>
//	  -c mcp_servers.<serverName>.url="<endpoint>"
//	  -c mcp_servers.<serverName>.bearer_token_env_var="MCPRUNTIME_TOKEN"
//	  -c mcp_servers.<serverName>.default_tools_approval_mode="approve"
//	  -c shell_environment_policy.exclude=["MCPRUNTIME_*","OPENAI_API_KEY"]
//	  [-c model_providers.mcpruntime={…} -c model_provider="mcpruntime"] [-c model="…"]
//
// Codex reads the token from its environment and sends it as
// "Authorization: Bearer <token>"; it writes it into no file (the tests
// scan CODEX_HOME and HOME for it). The exclude keeps both secrets out of
// the commands the model runs (measured: a model's `env` shows neither;
// without the exclude it shows both). A host's Config.Args come before the
// driver's settings, so they cannot undo them (Codex takes the last -c of
// a key); approval_policy comes before, so a host may change it. The
// token is redacted from every logged stderr line. (Every process runs as
// the runtime's user: one that goes looking can read a sibling's
// /proc/<pid>/environ. Isolation between agents needs a user per
// instance.)
//
// "approve" matters: Codex refuses an MCP call that needs approval when no
// one can give it. Requests the app-server sends the driver anyway
// (command or file-change approvals, elicitations, user input) are
// declined; others are answered with a JSON-RPC error.
//
// # Open and health
//
// Open starts the app-server, sends initialize and initialized, starts
// the Codex thread (thread/start, kept for the session's life), then lists
// the thread's MCP status (mcpServerStatus/list with the thread id) until
// Codex reports the runtime's server connected with its tools listed, all
// within Config.StartTimeout and the open's context. Otherwise Open fails
// with Codex's own words: its toolsError (for a refused token, "…
// handshaking with MCP server failed: … Auth required …"), the process
// stopped and the directory removed.
//
// Status: Codex's mcpServer/startupStatus/updated for the server maps
// starting → pending, ready → connected, failed → failed (needs_auth when
// Codex says "not logged in" or "Auth required", its words for a 401).
// An open or a restart that fails reports failed, or needs_auth when
// Codex's state is authenticationRequired, with the error. A revoked
// token does not change Codex's state; an MCP call that fails with
// "Authentication required" is reported as needs_auth.
//
// # Turns
//
// StartTurn sends turn/start on the Codex thread with the input as text
// and returns once Codex accepted it; one turn at a time (a turn/start
// during a turn would steer it, so the driver refuses it). Codex's
// notifications map to Events: turn/started → turn_started; a completed
// agentMessage item → message; an mcpToolCall item started → tool_call
// (Tool "mcp__<server>__<tool>", Data its arguments) and completed →
// tool_result (Text the result's text content, or Codex's error; Error
// when the call failed); a commandExecution item → tool_call and
// tool_result of Tool "shell" (Data {"command": …}, Text its output,
// Error on a failure or a non-zero exit); "error" → error (" (Codex
// retries)" appended when it will). Texts are cut to 4 KiB.
// turn/completed → TurnEnded with Codex's status (completed, interrupted,
// failed, with its error message). Interrupt sends turn/interrupt; the end
// follows as interrupted (measured: ~25 ms with the scripted model).
// A StartTurn whose context ends after turn/start was sent but before
// Codex answered returns the context's error; Codex may run that turn
// anyway, so the session stays busy (its events reported outside any
// turn, its end not reported) until Codex ends it, or 30 s passed with no
// word of it.
//
// What the model is handed for an MCP result is Codex's: "Wall time: …
// \nOutput:\n" followed by the result's structuredContent when it has one
// (so a refusal reaches the model as {"code":"parent_not_active",…}),
// else its text.
//
// # Rotation
//
// Codex reads the token variable once, at spawn, so Attach with a new
// Authorization restarts the app-server: the old one is stopped (stdin
// closed, SIGTERM, SIGKILL after the grace), a new one started in the same
// CODEX_HOME with the new token, and the Codex thread resumed
// (thread/resume): the conversation goes on, the next model request
// carries it all. Attach returns once the new app-server reports the
// runtime's server connected on the resumed thread (measured: ~0.3 s).
// Meanwhile the agent does nothing (the session's calls are serialized,
// no turn starts). A turn in progress when the rotation comes is waited
// for, up to Config.RotateWait (10 s) and never past the point where
// less than 10 s of the Attach's context is left for the restart; then it
// is interrupted (turn/interrupt) and reported TurnEnded interrupted
// ("interrupted by a credential rotation"). If the restart fails the
// session is dead: Attach fails and Died is reported. Attach with an
// empty Authorization is a re-attach: nothing happens.
//
// # Close and death
//
// Detach keeps the app-server (a handoff). Close stops it as above (its
// whole process group: node, codex and what they started), reports a turn
// still running as interrupted, and removes the private directory. An
// app-server that exits on its own, or whose stdout ends, is reported with
// Died (with its exit status and last stderr lines), after the end of a
// turn in progress as failed.
package codex

// Package opencode is the "opencode" provider kind: every provider session
// is one OpenCode server ("opencode serve", OpenCode 1.18) serving one
// thread, driven over its HTTP API, with the runtime's MCP endpoint
// registered in it live. It is written against OpenCode 1.18.33; the
// server describes its API in an OpenAPI document (GET /doc), and
// TestAPIPinned fails if an endpoint, field or event the driver uses is
// gone from it.
//
// # What the agent needs
//
// The server runs the configured command (default "opencode", looked up in
// PATH) as
//
//	opencode serve --hostname 127.0.0.1 --port 0 --print-logs <Config.Args…>
//
// in Config.Dir (OpenCode's project; default the runtime's working
// directory), in a process group of its own, with an environment built
// from scratch: the variables named in Config.InheritEnv, Config.Env, and
// the driver's own:
//
//   - HOME, TMPDIR and XDG_CONFIG_HOME, XDG_DATA_HOME, XDG_STATE_HOME,
//     XDG_CACHE_HOME: directories inside the session's private directory,
//     a 0700 directory created under Config.ConfigDir and removed when the
//     session ends. Whatever OpenCode writes — its database of sessions,
//     its log file, the package it installs into its config directory at
//     start — stays there.
//   - OPENCODE_CONFIG: the private directory's opencode.json (0600), which
//     defines the model and holds no secret (below).
//   - OPENCODE_SERVER_PASSWORD: 32 random bytes, new for every session;
//     every API call carries it as HTTP basic authentication (user
//     [Username], OPENCODE_SERVER_USERNAME).
//   - [DefaultEnv], unless Config.Env sets the variable: no self-update,
//     no models.dev download, no default plugins, no session sharing, no
//     reading of Claude Code's files.
//   - [EnvAPIKey], the model API key, when Config.APIKeyEnv names a
//     variable of the runtime's environment (an open fails if it is
//     unset).
//
// The server prints the port it chose ("opencode server listening on
// http://127.0.0.1:<port>"); the driver reads it from stdout. With
// Config.BaseURL, opencode.json defines the model provider [ProviderID]
// ("@ai-sdk/openai-compatible", bundled with OpenCode: Chat Completions at
// BaseURL) with the one model Config.Model, as OpenCode's model and small
// model, its apiKey the reference "{env:MCPRUNTIME_MODEL_API_KEY}"; every
// prompt names that model too, so a repository's opencode.json cannot send
// the turns elsewhere. Without BaseURL, Config.Model is an OpenCode
// "provider/model" and the provider's own settings are the host's.
//
// OpenCode installs "@opencode-ai/plugin" into its config directory in the
// background at every start, with npm; a host without network access can
// set "npm_config_offline": "true" in Config.Env to make it fail at once
// (OpenCode only logs a warning). Note that this setting, like every
// variable of the server's environment, also reaches the commands the
// model runs.
//
// # Where the token goes
//
// Nowhere but the server's memory. Once the server answers, the driver
// registers the runtime's MCP endpoint over the API:
//
//	POST /mcp {"name": "<serverName>-<hash>", "config": {"type": "remote", "url": "<endpoint>",
//	           "headers": {"Authorization": "Bearer <token>"}, "oauth": false, "enabled": true}}
//
// The name is Config.ServerName (default "mcpruntime") and a short hash of
// the session id, a name no repository's opencode.json uses: a project's
// configuration overrides OPENCODE_CONFIG's, and an entry of its own under
// the same name would replace the runtime's.
// OpenCode's MCP tools are then named "<name>_<tool>" (thread_post is
// "mcpruntime-1a2b3c4d_thread_post"). The token is never in argv, never in
// the environment, never in a file (opencode.json, OpenCode's database and
// log hold none), never in a log record: the server's stdout and stderr
// are logged a record per line with the token, the password and the model
// key replaced by "[redacted]", and so are the driver's error texts.
// Registering live was chosen over writing the entry into opencode.json
// (where OpenCode would read it just as well) because a file outlives the
// process on a crash and is read by whatever can read the directory; the
// price is that OpenCode forgets a live entry when it reloads its project
// (a configuration change over the API), which the driver notices (below)
// and repairs by registering it again.
//
// The OpenCode server runs as the runtime's user: a process of that user
// can read another's /proc/<pid>/environ (the server password, the model
// key) and call that server's API. The commands the model runs inherit the
// server's environment too, so they can drive their own server — which
// holds only their own thread's token, and whose GET /mcp and GET
// /config show no MCP header. Isolation between agents needs a user per instance.
//
// # Health
//
// Open succeeds only once POST /mcp answers "connected" for the entry and
// GET /mcp says so too, and the configured model is among OpenCode's
// providers. For OpenCode, connected means it initialized the
// MCP session and listed the tools (a failed listing is "Failed to get
// tools"). Otherwise Open fails with OpenCode's status and error text, for
// a refused token "failed: SSE error: Non-200 status code (401)" (with
// OAuth off OpenCode reports no needs_auth; the driver reports a failure
// naming a 401 or 403 as [driver.StatusNeedsAuth]). Events.Status reports
// pending before every registration and then what GET /mcp says, polled
// every two seconds, on every change: OpenCode publishes no MCP status
// event. An entry missing from GET /mcp (OpenCode reloaded its project:
// "server.instance.disposed") is registered again with the current token.
// OpenCode never closes an MCP session with DELETE, and keeps saying
// "connected" about a revoked token: the next call's result is then
// OpenCode's "Streamable HTTP error: Error POSTing to endpoint: …
// unauthorized" (a tool_result with Error).
//
// # Turns
//
// Open creates one OpenCode session for the thread (POST /session, titled
// after the thread, so that OpenCode asks the model for no title) with
// the rules "opencode run" uses for a session no one watches: the
// question, plan_enter and plan_exit permissions denied. Every turn is a
// message of that session, so the conversation carries over from turn to
// turn and across rotations.
//
//   - StartTurn sends the input as a text part (POST
//     /session/{id}/prompt_async) and returns on OpenCode's 204. A previous
//     turn still ending (interrupted) is waited for first.
//   - The driver follows GET /event (server-sent events), reconnecting if
//     it breaks, and reports the events of its own session in order:
//     session.status busy → turn_started; a message.part.updated of a tool
//     → tool_call when it runs (Tool is OpenCode's name, Data its input),
//     then tool_result when it completed (Text its output) or failed
//     (Error, Text OpenCode's error); a finished text part of an assistant
//     message → message; session.error → error. Text is cut at 4 KiB.
//   - An idle (session.status idle, session.idle) ends the turn once the
//     session went busy with it, OpenCode answered it (an assistant
//     message appeared during it), reported an error or was interrupted,
//     and none of the turn's assistant messages is still open: completed;
//     failed, with the session.error's text; or interrupted (aborted). A
//     session.error that comes after the idle ends the turn then. An
//     abort is followed by two idles, one before the aborted message is
//     closed and one after: the first does not end the aborted turn
//     (OpenCode fails a prompt sent that soon), the second is not left
//     over to end the next one. After the stream reconnects, GET
//     /session/status settles a turn whose idle was missed.
//   - Interrupt aborts the session's run (POST /session/{id}/abort); the
//     turn ends interrupted at the idle that follows, within a second.
//     Open has OpenCode load its providers (GET /config/providers, which
//     also checks that the configured model is there): OpenCode loads
//     them at the first use, and an abort that interrupts that load (a
//     first turn interrupted in its first second) leaves every later
//     prompt of the server failing with "All fibers interrupted without
//     error".
//   - OpenCode asks permission (permission.asked) only where a
//     configuration says "ask" (a project's opencode.json may): the
//     driver rejects it, for the subagents' sessions too, and reports an
//     error event, as "opencode run" does. OpenCode then fails that tool
//     call ("The user rejected permission to use this specific tool
//     call.") and ends the turn.
//   - OpenCode hands the model only an MCP result's text content (not its
//     structuredContent nor an error flag): the runtime's refusals begin
//     with their code ("parent_not_active: …"), which is what the model
//     reads.
//
// # Rotation, detach, close
//
// Attach with a new Authorization (a rotation) registers the entry again
// under the same name with the new header, on the running server: OpenCode
// replaces the entry's MCP client with one it connects with the new token
// (a new MCP session: initialize, tool listing); Attach returns once POST
// /mcp and GET /mcp say connected, so the runtime may revoke the old
// token. The process, the
// OpenCode session and its conversation stay; a tool call in flight at that
// moment may fail. Attach with an empty Authorization is a re-attach and
// does nothing; Detach keeps the server (a handoff).
//
// Close sends SIGTERM to the process group, SIGKILL after Config.Grace
// (the whole grace: [driver.CloseBudgeter]), waits until it is reaped,
// and removes the private directory. A server that exits on its own is
// reported with Events.Died (and a turn in progress ends failed).
//
// Sessions are exclusive ([driver.Driver.MultiThread] is false): one server
// per thread. An OpenCode server could serve several threads (an entry
// and a session each), but every MCP entry is offered to every session of
// a project, so each thread's tools would have to be fenced off by
// permission rules, and one process would hold every thread's token; a
// server per thread keeps each token alone in its process at the cost of
// a server's memory (several hundred MiB) per thread.
package opencode

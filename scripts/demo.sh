#!/usr/bin/env bash
# The runtime's story in one command (`make demo`): start a server on free
# loopback ports, drive it with `runtime admin …` and MCP over real HTTP,
# print each step with its HTTP status, and exit non-zero if any step
# deviates from the expected outcome. The server it started is stopped by
# PID (SIGTERM) and must exit 0.
#
# Usage: scripts/demo.sh [path/to/runtime [path/to/agent]]
#        (default: bin/runtime and bin/agent, built by `make demo`)
set -euo pipefail

BIN=${1:-bin/runtime}
AGENT=${2:-bin/agent}
for b in "$BIN" "$AGENT"; do
  [[ -x $b ]] || { echo "demo: $b is not an executable; run make demo" >&2; exit 2; }
done
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
AGENT=$(cd "$(dirname "$AGENT")" && pwd)/$(basename "$AGENT")

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpruntime-demo.XXXXXX")
LOG=$WORK/server.log
SERVER_PID=
cleanup() {
  if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# Settings for both the server and the CLI, by their one set of names.
export RUNTIME_ADMIN_TOKEN_FILE=$WORK/admin-token
unset RUNTIME_ADMIN_TOKEN RUNTIME_CONFIG RUNTIME_ADMIN_URL

FAILED=0
if [[ -t 1 ]]; then G=$'\033[32m' R=$'\033[31m' N=$'\033[0m'; else G= R= N=; fi
ok()   { printf '  %sok%s   %s\n' "$G" "$N" "$*"; }
fail() { printf '  %sFAIL%s %s\n' "$R" "$N" "$*"; FAILED=1; }
say()  { printf '\n== %s\n' "$*"; }

"$BIN" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --no-demo >"$LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
  grep -q 'msg="runtime ready"' "$LOG" 2>/dev/null && break
  kill -0 "$SERVER_PID" 2>/dev/null || { cat "$LOG" >&2; echo "demo: the server exited" >&2; exit 1; }
  sleep 0.1
done
grep -q 'msg="runtime ready"' "$LOG" || { cat "$LOG" >&2; echo "demo: the server was not ready in 10 s" >&2; exit 1; }
MCP=$(sed -n 's/.*msg="runtime ready" mcp=\([^ ]*\).*/\1/p' "$LOG")
ADMIN=$(sed -n 's/.*msg="runtime ready".* admin=\([^ ]*\)\/admin\/v1\/.*/\1/p' "$LOG")
export RUNTIME_ADMIN_URL=$ADMIN
echo "server pid $SERVER_PID: MCP $MCP, admin $ADMIN, admin token in $RUNTIME_ADMIN_TOKEN_FILE"
[[ $(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$ADMIN/readyz") == 200 ]] && ok "GET /readyz → 200" || fail "GET /readyz"

# admin STEP ARGS…: one `runtime admin -v …` (prints METHOD path → status);
# its answer lands in $OUT. The step fails on a non-zero exit.
admin() {
  local step=$1; shift
  if OUT=$("$BIN" admin -v "$@" 2>"$WORK/err"); then
    ok "$step: $(tail -n1 "$WORK/err")"
  else
    fail "$step: runtime admin $*: $(cat "$WORK/err")"
    OUT=
  fi
}

# mcp AUTH SID BODY → sets STATUS, BODY_OUT and (on initialize) NEW_SID.
mcp() {
  local auth=$1 sid=$2 body=$3 hdr=$WORK/headers
  local args=(-s -o "$WORK/body" -D "$hdr" -w '%{http_code}' --max-time 10 -X POST "$MCP"
    -H "Authorization: $auth" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream')
  [[ -n $sid ]] && args+=(-H "Mcp-Session-Id: $sid" -H 'MCP-Protocol-Version: 2025-11-25')
  : >"$hdr"
  STATUS=$(curl "${args[@]}" -d "$body" || true)
  BODY_OUT=$(cat "$WORK/body" 2>/dev/null || true)
  NEW_SID=$(tr -d '\r' <"$hdr" | sed -n 's/^[Mm]cp-[Ss]ession-[Ii]d: //p')
}

# initialize WHO AUTH → sets SID to the new session's id.
initialize() {
  SID=
  mcp "$2" "" '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"demo","version":"1"}}}'
  [[ $STATUS == 200 && -n $NEW_SID ]] || { fail "$1 initialize → HTTP $STATUS $BODY_OUT"; return; }
  SID=$NEW_SID
  ok "$1 initialize → HTTP $STATUS, session ${SID:0:12}…"
  mcp "$2" "$SID" '{"jsonrpc":"2.0","method":"notifications/initialized"}'
  [[ $STATUS == 202 ]] || fail "$1 notifications/initialized → HTTP $STATUS"
}

# call WHO AUTH SID TOOL ARGS WANT: a tools/call; WANT is "ok", a refusal
# code (isError with that code) or an HTTP status (401, 404).
call() {
  local who=$1 auth=$2 sid=$3 tool=$4 args=$5 want=$6
  mcp "$auth" "$sid" "{\"jsonrpc\":\"2.0\",\"id\":7,\"method\":\"tools/call\",\"params\":{\"name\":\"$tool\",\"arguments\":$args}}"
  local got
  if [[ $STATUS != 200 ]]; then got=$STATUS
  elif grep -q '"isError":true' <<<"$BODY_OUT"; then got=$(grep -o '"code":"[a-z_]*"' <<<"$BODY_OUT" | head -n1 | cut -d'"' -f4)
  else got=ok; fi
  if [[ $got == "$want" ]]; then ok "$who $tool → HTTP $STATUS ($got)"; else fail "$who $tool → HTTP $STATUS ($got), want $want: $BODY_OUT"; fi
}

say "Register two provider instances; open thread t1 on A"
admin "instance A" instance create A --driver inproc
admin "instance B" instance create B --driver inproc
admin "thread t1 on A" thread create t1 --instance A
admin "provider session (t1, A)" provider-session open t1 A
AUTH_A=$(sed -n 's/.*"authorization": "\(.*\)".*/\1/p' <<<"$OUT")
admin "run of A" run start t1 A

say "A calls tools"
initialize A "$AUTH_A"; SID_A=$SID
call A "$AUTH_A" "$SID_A" thread_post '{"text":"A was here"}' ok
call A "$AUTH_A" "$SID_A" thread_read '{}' ok

say "Switch t1 to B"
admin "switch to B" thread switch t1 B
admin "provider session (t1, B)" provider-session open t1 B
AUTH_B=$(sed -n 's/.*"authorization": "\(.*\)".*/\1/p' <<<"$OUT")
initialize B "$AUTH_B"; SID_B=$SID
call A "$AUTH_A" "$SID_A" thread_read '{}' ok
call A "$AUTH_A" "$SID_A" thread_post '{"text":"A again"}' parent_not_active
admin "run of B" run start t1 B
call B "$AUTH_B" "$SID_B" thread_post '{"text":"B was here"}' ok
call "B on A's session" "$AUTH_B" "$SID_A" thread_read '{}' 404

say "Back to A: A's credential still works"
admin "end B's run" run end t1
admin "switch to A" thread switch t1 A
call A "$AUTH_A" "$SID_A" thread_read '{}' ok
admin "MCP sessions" mcp-sessions
admin "thread t1" thread get t1
grep -q '"B was here"' <<<"$OUT" && ok "t1 holds B's message" || fail "t1 lacks B's message"

say "Archive t1: both credentials are revoked"
admin "archive t1" thread archive t1
call A "$AUTH_A" "$SID_A" thread_read '{}' 401
call B "$AUTH_B" "$SID_B" thread_read '{}' 401

# agent_lines SESSION PATTERN: how many lines the agent of a provider session
# printed that contain PATTERN (the server logs each line it writes).
agent_lines() {
  grep -F "session=$1 " "$LOG" | grep -F 'msg="provider output"' | grep -cF "$2" || true
}

# wait_agent STEP SESSION PATTERN N: wait up to 10 s until the agent of
# SESSION printed N more lines containing PATTERN than it had so far.
wait_agent() {
  local step=$1 ps=$2 pat=$3 n=$4 base
  base=$(agent_lines "$ps" "$pat")
  for _ in $(seq 100); do
    (( $(agent_lines "$ps" "$pat") >= base + n )) && { ok "$step"; return; }
    sleep 0.1
  done
  fail "$step: agent of $ps printed $(( $(agent_lines "$ps" "$pat") - base )) of $n lines with $pat in 10 s"
}

say "Real agents: two exec instances run examples/agent, A → B → A on thread t2"
exec_config() {
  printf '{"command":"%s","args":["-mcp-config","{mcpConfig}","-interval","100ms"],"configDir":"%s","grace":"2s"}' "$AGENT" "$WORK"
}
admin "instance codex (exec)" instance create codex --driver exec --driver-config "$(exec_config)"
admin "instance claude (exec)" instance create claude --driver exec --driver-config "$(exec_config)"
admin "thread t2 on codex" thread create t2 --instance codex
admin "provider session (t2, codex) starts an agent" provider-session open t2 codex -f providerSessionId
PS_CODEX=$OUT
OK='\"ok\":true' DENIED='\"status\":401'
wait_agent "codex's agent calls thread_read" "$PS_CODEX" "$OK" 3
admin "switch t2 to claude" thread switch t2 claude
admin "provider session (t2, claude) starts a second agent" provider-session open t2 claude -f providerSessionId
PS_CLAUDE=$OUT
wait_agent "claude's agent calls" "$PS_CLAUDE" "$OK" 3
wait_agent "codex's agent still calls (switching revokes nothing)" "$PS_CODEX" "$OK" 3
admin "switch t2 back to codex" thread switch t2 codex
admin "re-open (t2, codex): the same session, no new process" provider-session open t2 codex -f reused
[[ $OUT == true ]] && ok "reused" || fail "re-open of (t2, codex) was not a reuse: $OUT"
admin "release claude's session: its process is stopped" provider-session release "$PS_CLAUDE"
grep -F "session=$PS_CLAUDE " "$LOG" | grep -qF 'msg="provider process exited"' \
  && ok "claude's process exited" || fail "claude's process is still running"
wait_agent "codex's agent still calls" "$PS_CODEX" "$OK" 3
admin "delete t2: every credential of t2 is revoked" thread delete t2
wait_agent "codex's agent now gets 401" "$PS_CODEX" "$DENIED" 2

say "Stop the server (SIGTERM to pid $SERVER_PID)"
kill -TERM "$SERVER_PID"
CODE=0
for _ in $(seq 150); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SERVER_PID" 2>/dev/null; then fail "server still running 15 s after SIGTERM"
else
  wait "$SERVER_PID" || CODE=$?
  [[ $CODE == 0 ]] && ok "server exited 0" || fail "server exited $CODE"
fi
SERVER_PID=
grep -F "session=$PS_CODEX " "$LOG" | grep -qF 'msg="provider process exited"' \
  && ok "codex's agent was stopped with the server" || fail "codex's agent did not exit"
leftover=$(find "$WORK" -name 'mcp-*.json' | wc -l)
[[ $leftover == 0 ]] && ok "no MCP config file left behind" || fail "$leftover MCP config files left behind"

if [[ $FAILED != 0 ]]; then
  echo; echo "demo: some steps deviated; server log:" >&2; cat "$LOG" >&2
  exit 1
fi
echo; echo "demo: every step as expected"

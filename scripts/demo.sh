#!/usr/bin/env bash
# The runtime's story in one command (`make demo`): start a server on free
# loopback ports, drive it with `runtime admin …` and MCP over real HTTP,
# print each step with its HTTP status, and exit non-zero if any step
# deviates from the expected outcome. The server it started is stopped by
# PID (SIGTERM) and must exit 0.
#
# When the agent CLIs pinned in e2e/agents are installed (make test-deps),
# the story is told again with them: Codex, Claude Code and OpenCode (the drivers of
# runtime serve) on one thread, answered by a scripted model on loopback
# (examples/scriptedmodel), each step through `runtime admin …`. Without
# them that part says so and is left out.
#
# Usage: scripts/demo.sh [path/to/runtime [path/to/agent [path/to/scriptedmodel]]]
#        (default: bin/runtime, bin/agent and bin/scriptedmodel, built by `make demo`)
set -euo pipefail

BIN=${1:-bin/runtime}
AGENT=${2:-bin/agent}
MODEL=${3:-bin/scriptedmodel}
for b in "$BIN" "$AGENT" "$MODEL"; do
  [[ -x $b ]] || { echo "demo: $b is not an executable; run make demo" >&2; exit 2; }
done
BIN=$(cd "$(dirname "$BIN")" && pwd)/$(basename "$BIN")
AGENT=$(cd "$(dirname "$AGENT")" && pwd)/$(basename "$AGENT")
MODEL=$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")
CLIS=$(cd "$(dirname "$0")/.." && pwd)/e2e/agents/node_modules/.bin

# The real agents of the story's second telling, by driver kind; each needs
# its CLI in $CLIS.
REAL_AGENTS=(codex claude opencode)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpruntime-demo.XXXXXX")
LOG=$WORK/server.log
SERVER_PID=
MODEL_PID=
cleanup() {
  if [[ -n $MODEL_PID ]]; then kill -TERM "$MODEL_PID" 2>/dev/null || true; fi
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
# The real agents' model key (their instances' apiKeyEnv): the scripted
# model takes any.
export DEMO_MODEL_KEY=demo-model-key-$RANDOM$RANDOM

FAILED=0
if [[ -t 1 ]]; then G=$'\033[32m' R=$'\033[31m' N=$'\033[0m'; else G= R= N=; fi
ok()   { printf '  %sok%s   %s\n' "$G" "$N" "$*"; }
fail() { printf '  %sFAIL%s %s\n' "$R" "$N" "$*"; FAILED=1; }
say()  { printf '\n== %s\n' "$*"; }

"$BIN" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --no-demo --memory >"$LOG" 2>&1 &
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
grep -F "session=$PS_CLAUDE " "$LOG" | grep -F 'msg="provider process exited"' >/dev/null \
  && ok "claude's process exited" || fail "claude's process is still running"
wait_agent "codex's agent still calls" "$PS_CODEX" "$OK" 3
admin "delete t2: every credential of t2 is revoked" thread delete t2
wait_agent "codex's agent now gets 401" "$PS_CODEX" "$DENIED" 2

# The second telling, with real agents. Instances are named after their
# kind with "-agent" ("codex" is the exec instance above).
ms_since() { echo $(( ($(date +%s%N) - $1) / 1000000 )); }

# agent_config KIND: the instance config of a real agent against the model.
agent_config() {
  local kind=$1 dir=$WORK/$1-agent
  mkdir -p "$dir/sessions" "$dir/project" "$dir/home"
  case $kind in
  codex) printf '{"command":"%s","inheritEnv":["PATH"],"env":{"HOME":"%s"},"configDir":"%s","baseURL":"%s/v1","model":"scripted","apiKeyEnv":"DEMO_MODEL_KEY","grace":"3s"}' \
      "$CLIS/codex" "$dir/home" "$dir/sessions" "$MODEL_URL" ;;
  opencode) printf '{"command":"%s","dir":"%s","env":{"npm_config_offline":"true"},"configDir":"%s","baseURL":"%s/v1","model":"scripted","apiKeyEnv":"DEMO_MODEL_KEY","grace":"3s"}' \
      "$CLIS/opencode" "$dir/project" "$dir/sessions" "$MODEL_URL" ;;
  claude) printf '{"command":"%s","dir":"%s","configDir":"%s","baseURL":"%s","model":"scripted","apiKeyEnv":"DEMO_MODEL_KEY","grace":"3s"}' \
      "$CLIS/claude" "$dir/project" "$dir/sessions" "$MODEL_URL" ;;
  *) echo "demo: no configuration for agent kind $kind" >&2; return 1 ;;
  esac
}

# revoked KIND: what an agent tells its model when a call's token is
# revoked (the runtime's 401, in the agent's words).
revoked() {
  case $1 in codex) echo "Authentication required" ;; opencode) echo "unauthorized" ;; claude) echo "rejected the Authorization header" ;; *) echo 401 ;; esac
}

# refused STEP CODE ARGS…: a `runtime admin …` that must fail with CODE.
refused() {
  local step=$1 code=$2; shift 2
  if "$BIN" admin "$@" >/dev/null 2>"$WORK/err"; then fail "$step: succeeded, want $code"
  elif grep -qF ": $code:" "$WORK/err"; then ok "$step: refused $code"
  else fail "$step: $(cat "$WORK/err"), want $code"; fi
}

# turn STEP KIND INPUT: a run of KIND-agent on t3 whose input is its agent's
# turn; sets RUN.
turn() {
  admin "$1" run start t3 "$2-agent" --input "$3" -f runId
  RUN=$OUT
}

# turn_end STEP RUN [OUTCOME]: wait for the turn's end on the event stream
# (`runtime admin events`); EVENTS gets its records, a JSON line each.
turn_end() {
  local step=$1 run=$2 want=${3:-completed}
  if ! EVENTS=$("$BIN" admin events --thread t3 --after 0 --turn "$run" --until turn.ended --timeout 90s 2>"$WORK/err"); then
    fail "$step: $(cat "$WORK/err")"; EVENTS=; return
  fi
  local kinds state
  kinds=$(sed -n 's/.*"kind":"\([^"]*\)".*/\1/p' <<<"$EVENTS" | xargs)
  state=$(tail -n1 <<<"$EVENTS" | sed -n 's/.*"state":"\([^"]*\)".*/\1/p')
  [[ $state == "$want" ]] && ok "$step: $kinds" || fail "$step: ended $state, want $want: $EVENTS"
}

# told STEP WORDS: the turn's last tool result, as its agent reported it
# (what it hands its model), holds WORDS.
told() {
  local line
  line=$(grep -F '"kind":"agent.tool_result"' <<<"$EVENTS" | tail -n1)
  grep -qF -- "$2" <<<"$line" && ok "$1: the agent is told ${2}" || fail "$1: tool result ${line:-none}, want $2"
}

# group_gone STEP SESSION: no process is left of the session's agent (the
# process groups the server's log names for it).
group_gone() {
  local pids left=
  pids=$(grep -F "session=$2 " "$LOG" | grep -E 'msg="(codex app-server|provider process|claude) started"' | sed -n 's/.* pid=\([0-9]*\).*/\1/p')
  [[ -n $pids ]] || { fail "$1: the log names no process of $2"; return; }
  for pid in $pids; do left+=$(ps -e -o pgid=,pid= | awk -v g="$pid" '$1 == g {printf " %s", $2}'); done
  [[ -z $left ]] && ok "$1: no process left (groups $(xargs <<<"$pids"))" || fail "$1: processes$left left"
}

real_agents() {
  local first=${REAL_AGENTS[0]} second=${REAL_AGENTS[1]} kind t0
  "$MODEL" >"$WORK/model.url" 2>"$WORK/model.log" &
  MODEL_PID=$!
  for _ in $(seq 50); do [[ -s $WORK/model.url ]] && break; sleep 0.1; done
  MODEL_URL=$(head -n1 "$WORK/model.url")
  [[ $MODEL_URL == http://127.0.0.1:* ]] && ok "scripted model (pid $MODEL_PID) at $MODEL_URL" || { fail "the scripted model did not start"; return; }

  declare -A PS
  for kind in "${REAL_AGENTS[@]}"; do
    admin "instance $kind-agent (driver $kind)" instance create "$kind-agent" --driver "$kind" --driver-config "$(agent_config "$kind")"
  done
  admin "thread t3 on $first-agent" thread create t3 --instance "$first-agent"
  for kind in "${REAL_AGENTS[@]}"; do
    t0=$(date +%s%N)
    admin "provider session (t3, $kind-agent) starts $kind" provider-session open t3 "$kind-agent" -f providerSessionId
    PS[$kind]=$OUT
    ok "$kind is up, its MCP connection to the runtime too, in $(ms_since "$t0") ms"
  done

  say "$first posts; the run is its turn"
  turn "$first's turn" "$first" 'call thread_post {"text":"from '"$first"'"}'
  turn_end "$first's turn" "$RUN"
  admin "thread t3" thread get t3
  grep -qF '"from '"$first"'"' <<<"$OUT" && ok "t3 holds $first's post" || fail "t3 lacks $first's post"
  [[ $OUT == *'"run": null'* ]] && ok "the run ended with the turn" || fail "t3 still has a run: $OUT"

  say "Switch to $second while $first's turn waits for its model; $first's post is refused"
  turn "$first's slow turn" "$first" 'sleep 4s then call thread_post {"text":"'"$first"', too late"}'
  local late=$RUN
  admin "switch t3 to $second-agent: ends $first's run" thread switch t3 "$second-agent" -f endedRun
  [[ $OUT == "$late" ]] && ok "the switch ended $late" || fail "the switch ended ${OUT:-no run}, want $late"
  turn "$second's turn" "$second" 'call thread_post {"text":"from '"$second"'"}'
  turn_end "$second's turn" "$RUN"
  turn_end "$first's slow turn" "$late"
  told "$first's late post" parent_not_active
  refused "a run of $first-agent" not_current_instance run start t3 "$first-agent" --input 'call thread_read {}'

  say "Back to $first: both agents' sessions are open, both credentials live"
  admin "switch t3 back to $first-agent" thread switch t3 "$first-agent"
  for kind in "$first" "$second"; do
    admin "re-open (t3, $kind-agent)" provider-session open t3 "$kind-agent" -f reused
    [[ $OUT == true ]] && ok "the same session ${PS[$kind]}" || fail "re-open of (t3, $kind-agent) was not a reuse: $OUT"
  done
  turn "$first reads" "$first" 'call thread_read {}'
  turn_end "$first reads" "$RUN"
  told "$first reads" "from $second"

  say "Rotate $first's credential mid-conversation"
  admin "rotate (t3, $first-agent)" thread rotate t3 "$first-agent" -f credentialId
  local cred=$OUT
  turn "$first posts again" "$first" 'call thread_post {"text":"after the rotation"}'
  turn_end "$first posts again" "$RUN"
  admin "thread t3" thread get t3
  grep -qF '"author": "cred:'"$cred"'"' <<<"$OUT" && ok "the post is by the new credential $cred" || fail "no post by $cred: $OUT"

  for kind in "${REAL_AGENTS[@]:2}"; do
    say "$kind takes a turn too"
    admin "switch t3 to $kind-agent" thread switch t3 "$kind-agent"
    turn "$kind's turn" "$kind" 'call thread_post {"text":"from '"$kind"'"}'
    turn_end "$kind's turn" "$RUN"
    admin "thread t3" thread get t3
    grep -qF '"from '"$kind"'"' <<<"$OUT" && ok "t3 holds $kind's post" || fail "t3 lacks $kind's post"
  done

  say "Archive t3 while both agents wait for their model: each one's next call is refused"
  admin "switch t3 to $second-agent" thread switch t3 "$second-agent"
  turn "$second's slow read" "$second" 'sleep 8s then call thread_read {}'
  local late2=$RUN
  admin "switch t3 to $first-agent" thread switch t3 "$first-agent"
  turn "$first's slow read" "$first" 'sleep 4s then call thread_read {}'
  local late1=$RUN
  admin "archive t3" thread archive t3 -f status
  [[ $OUT == archived ]] && ok "t3 is archived" || fail "archive: $OUT"
  turn_end "$first's slow read" "$late1"
  told "$first's read" "$(revoked "$first")"
  turn_end "$second's slow read" "$late2"
  told "$second's read" "$(revoked "$second")"
  refused "a run on t3" thread_archived run start t3 "$first-agent"

  say "Release the agents' sessions: no process is left"
  for kind in "${REAL_AGENTS[@]}"; do
    admin "release $kind's session" provider-session release "${PS[$kind]}"
    group_gone "$kind" "${PS[$kind]}"
  done
  kill -TERM "$MODEL_PID" && wait "$MODEL_PID" && ok "scripted model stopped" || fail "scripted model exited non-zero"
  MODEL_PID=
}

say "Real agents: ${REAL_AGENTS[*]} on thread t3, answered by a scripted model"
missing=()
for kind in "${REAL_AGENTS[@]}"; do [[ -x $CLIS/$kind ]] || missing+=("$kind"); done
if (( ${#missing[@]} > 0 )); then
  echo "  skipped: the agent CLIs ${missing[*]} are not installed in $CLIS (make test-deps installs them)"
else
  real_agents
fi

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
grep -F "session=$PS_CODEX " "$LOG" | grep -F 'msg="provider process exited"' >/dev/null \
  && ok "codex's agent was stopped with the server" || fail "codex's agent did not exit"
leftover=$(find "$WORK" -name 'mcp-*.json' | wc -l)
[[ $leftover == 0 ]] && ok "no MCP config file left behind" || fail "$leftover MCP config files left behind"

if [[ $FAILED != 0 ]]; then
  echo; echo "demo: some steps deviated; server log:" >&2; cat "$LOG" >&2
  exit 1
fi
echo; echo "demo: every step as expected"

#!/usr/bin/env bash
# Measures the real agents under the runtime, against the scripted model
# (examples/scriptedmodel) on loopback: for each agent, N samples (default
# 5) of
#
#   open      POST …/provider-sessions until it answers: the agent started
#             and its MCP connection to the runtime up, tools listed
#   rss       resident memory of the agent's process tree (its process
#             group) after the open, and after the first turns
#   turn      a turn through the runtime: `runtime admin run start --input`
#             until `runtime admin events --until turn.ended` returns (two
#             CLI processes included, a few ms each): a text answer ("hello", the
#             session's first turn, so its warm-up included)
#             and one MCP tool call (thread_post)
#   one-shot  the same CLI's one-shot mode (codex exec, opencode run, claude -p) with
#             the same prompt against the same model: process start, model
#             request, answer, exit
#
# and prints each metric's samples and range. Numbers, not a test: nothing
# here fails on a threshold. Loopback only; everything it starts is stopped
# by PID.
#
# Usage: scripts/measure-agents.sh [N]   (after make build and
#        go build -o bin/scriptedmodel ./examples/scriptedmodel; make test-deps for the CLIs)
set -euo pipefail

N=${1:-5}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=$ROOT/bin/runtime
MODEL=$ROOT/bin/scriptedmodel
CLIS=$ROOT/e2e/agents/node_modules/.bin
AGENTS=(codex claude opencode)
for b in "$BIN" "$MODEL"; do [[ -x $b ]] || { echo "measure: $b missing (make build; go build -o bin/scriptedmodel ./examples/scriptedmodel)" >&2; exit 2; }; done
for a in "${AGENTS[@]}"; do [[ -x $CLIS/$a ]] || { echo "measure: $CLIS/$a missing (make test-deps)" >&2; exit 2; }; done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpruntime-measure.XXXXXX")
LOG=$WORK/server.log
SERVER_PID= MODEL_PID=
cleanup() {
  for p in $SERVER_PID $MODEL_PID; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

export RUNTIME_ADMIN_TOKEN=measure-admin-$RANDOM$RANDOM$RANDOM
export MEASURE_MODEL_KEY=measure-model-key
unset RUNTIME_CONFIG RUNTIME_ADMIN_URL

"$MODEL" >"$WORK/model.url" &
MODEL_PID=$!
for _ in $(seq 50); do [[ -s $WORK/model.url ]] && break; sleep 0.1; done
MODEL_URL=$(head -n1 "$WORK/model.url")

"$BIN" serve --listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --no-demo >"$LOG" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do grep -q 'msg="runtime ready"' "$LOG" && break; sleep 0.1; done
export RUNTIME_ADMIN_URL=$(sed -n 's/.*msg="runtime ready".* admin=\([^ ]*\)\/admin\/v1\/.*/\1/p' "$LOG")
[[ -n $RUNTIME_ADMIN_URL ]] || { cat "$LOG" >&2; exit 1; }
admin() { "$BIN" admin "$@"; }

now() { date +%s%N; }
ms() { echo $(( ($(now) - $1) / 1000000 )); }

# rss_mib PGID…: resident memory of the process groups, MiB.
rss_mib() {
  local kib=0 pid
  for g in "$@"; do
    for pid in $(ps -e -o pgid=,pid= | awk -v g="$g" '$1 == g {print $2}'); do
      kib=$(( kib + $(awk '/^VmRSS:/ {s = $2} END {print s + 0}' "/proc/$pid/status" 2>/dev/null || echo 0) ))
    done
  done
  echo $(( kib / 1024 ))
}

# groups SESSION: the process groups the log names for a session.
groups() { grep -F "session=$1 " "$LOG" | grep -E 'msg="(codex app-server|provider process|claude) started"' | sed -n 's/.* pid=\([0-9]*\).*/\1/p'; }

config() {
  local dir=$WORK/$1
  mkdir -p "$dir/sessions" "$dir/project" "$dir/home"
  case $1 in
  codex) printf '{"command":"%s","inheritEnv":["PATH"],"env":{"HOME":"%s"},"configDir":"%s","baseURL":"%s/v1","model":"scripted","apiKeyEnv":"MEASURE_MODEL_KEY","grace":"3s"}' \
      "$CLIS/codex" "$dir/home" "$dir/sessions" "$MODEL_URL" ;;
  opencode) printf '{"command":"%s","dir":"%s","env":{"npm_config_offline":"true"},"configDir":"%s","baseURL":"%s/v1","model":"scripted","apiKeyEnv":"MEASURE_MODEL_KEY","grace":"3s"}' \
      "$CLIS/opencode" "$dir/project" "$dir/sessions" "$MODEL_URL" ;;
  claude) printf '{"command":"%s","dir":"%s","configDir":"%s","baseURL":"%s","model":"scripted","apiKeyEnv":"MEASURE_MODEL_KEY","grace":"3s"}' \
      "$CLIS/claude" "$dir/project" "$dir/sessions" "$MODEL_URL" ;;
  esac
}

# turn THREAD INSTANCE INPUT → prints the round trip in ms.
turn() {
  local t0 run
  t0=$(now)
  run=$(admin run start "$1" "$2" --input "$3" -f runId)
  admin events --thread "$1" --after 0 --turn "$run" --until turn.ended --timeout 90s >"$WORK/events"
  ms "$t0"
  grep -q '"state":"completed"' "$WORK/events" || { echo "measure: turn $run did not complete: $(cat "$WORK/events")" >&2; touch "$WORK/failed"; }
}

# oneshot KIND PROMPT → prints the one-shot run's time in ms.
oneshot() {
  local kind=$1 prompt=$2 dir t0 out
  dir=$(mktemp -d "$WORK/oneshot.XXXXXX")
  mkdir -p "$dir/home"
  t0=$(now)
  case $kind in
  codex)
    mkdir -p "$dir/home/.codex"
    out=$(cd "$dir" && env -i PATH="$PATH" HOME="$dir/home" CODEX_HOME="$dir/home/.codex" FAKE_MODEL_KEY=dummy \
      "$CLIS/codex" exec --skip-git-repo-check -m scripted -c model_provider=fake \
      -c "model_providers.fake={name=\"fake\",base_url=\"$MODEL_URL/v1\",wire_api=\"responses\",env_key=\"FAKE_MODEL_KEY\"}" \
      "$prompt" </dev/null 2>"$dir/err") ;;
  opencode)
    cat >"$dir/opencode.json" <<EOF
{"provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
  "options": {"baseURL": "$MODEL_URL/v1", "apiKey": "dummy"}, "models": {"scripted": {"name": "scripted", "tool_call": true}}}},
 "model": "fake/scripted", "small_model": "fake/scripted"}
EOF
    out=$(cd "$dir" && env -i PATH="$PATH" HOME="$dir/home" XDG_CONFIG_HOME="$dir/home/.config" XDG_DATA_HOME="$dir/home/.local/share" \
      XDG_CACHE_HOME="$dir/home/.cache" XDG_STATE_HOME="$dir/home/.local/state" npm_config_offline=true \
      OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_DEFAULT_PLUGINS=1 \
      OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_SHARE=1 OPENCODE_DISABLE_CLAUDE_CODE=1 \
      "$CLIS/opencode" run -m fake/scripted "$prompt" </dev/null 2>"$dir/err") ;;
  claude)
    out=$(cd "$dir" && env -i PATH="$PATH" HOME="$dir/home" ANTHROPIC_BASE_URL="$MODEL_URL" ANTHROPIC_API_KEY=dummy \
      DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 \
      "$CLIS/claude" -p "$prompt" --strict-mcp-config </dev/null 2>"$dir/err") ;;
  esac
  ms "$t0"
  grep -q "ok: $prompt" <<<"$out" || { echo "measure: $kind one-shot printed: $out $(tail -5 "$dir/err")" >&2; touch "$WORK/failed"; }
}

declare -A R
add() { R[$1]="${R[$1]:-} $2"; }

for kind in "${AGENTS[@]}"; do
  admin instance create "$kind" --driver "$kind" --driver-config "$(config "$kind")" >/dev/null
  for i in $(seq "$N"); do
    th=m-$kind-$i
    admin thread create "$th" --instance "$kind" >/dev/null
    t0=$(now)
    ps=$(admin provider-session open "$th" "$kind" -f providerSessionId)
    add "$kind open ms" "$(ms "$t0")"
    add "$kind rss after open MiB" "$(rss_mib $(groups "$ps"))"
    add "$kind turn (text) ms" "$(turn "$th" "$kind" hello)"
    add "$kind turn (MCP tool call) ms" "$(turn "$th" "$kind" 'call thread_post {"text":"measured"}')"
    add "$kind rss after turns MiB" "$(rss_mib $(groups "$ps"))"
    admin provider-session release "$ps" >/dev/null
    add "$kind one-shot (text) ms" "$(oneshot "$kind" hello)"
    [[ ! -e $WORK/failed ]] || exit 1
    echo "measure: $kind sample $i done" >&2
  done
done

echo "# $N samples each; $(nproc) cores; $(date -u +%FT%TZ)"
for kind in "${AGENTS[@]}"; do
  for m in "open ms" "rss after open MiB" "turn (text) ms" "turn (MCP tool call) ms" "rss after turns MiB" "one-shot (text) ms"; do
    v=${R["$kind $m"]}
    read -r lo hi < <(tr ' ' '\n' <<<"$v" | grep . | sort -n | awk 'NR==1 {lo=$1} {hi=$1} END {print lo, hi}')
    printf '%-9s %-26s %6s–%-6s  [%s ]\n' "$kind" "$m" "$lo" "$hi" "$v"
  done
done

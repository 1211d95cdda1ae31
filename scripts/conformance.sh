#!/usr/bin/env bash
# The official MCP conformance suite against a server (`make conformance`).
#
# Installs the pinned suite and Node from conformance/package-lock.json when
# conformance/node_modules is missing or stale, builds the bearer proxy
# (conformance/authproxy), then for each run: starts a fresh server
# under test on a free loopback port, reads the one JSON line it prints,
# starts the proxy in front of it with the line's token, runs the suite
# against the proxy, prints the suite's summary and ours, and stops the
# proxy and the server. Exits 1 if any run has a failed check (for the
# 2026-07-28 requirement set: a failed check in a scored scenario), 2 on a
# setup failure.
#
# The server under test is run as `$SERVER -listen 127.0.0.1:PORT` in a
# process group of its own (so `go run` and the program it builds are
# stopped together); it must print
#   {"url":"http://127.0.0.1:PORT/mcp","token":"…","otherToken":"…"}
# on stdout, then serve until SIGTERM. The suite sends no Authorization; the
# proxy adds "Bearer <token>". otherToken is not used by the suite.
#
# Environment:
#   SERVER        the server command, split on spaces (default: go run ./examples/everything)
#   RUNS          the runs, in order (default: "active all 2026-07-28"):
#                   active      conformance 0.1.16, its default (active) suite, 2025-11-25
#                   all         conformance 0.1.16 --suite all
#                   2026-07-28  conformance 0.2.0-alpha.12 --requirements 2026-07-28
#   SCENARIO      run only this scenario in each run (for 2026-07-28 as
#                 --scenario X --spec-version 2026-07-28, unscored)
#   OUT           results directory, kept (default: a new one under $TMPDIR)
#   DUMP=1        the proxy writes the traffic of each run to $OUT/RUN/traffic.jsonl
#   START_TIMEOUT seconds for the server to print its line (default 300: a cold go run builds)
#   RUN_TIMEOUT   seconds for one run of the suite (default 600)
#
# Everything listens on 127.0.0.1. Only processes this script started are
# stopped, by PID (the server by its process group, whose id is its PID),
# when each run ends and on exit or interrupt.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
SERVER=${SERVER:-go run ./examples/everything}
RUNS=${RUNS:-active all 2026-07-28}
SCENARIO=${SCENARIO:-}
DUMP=${DUMP:-}
START_TIMEOUT=${START_TIMEOUT:-300}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mcpruntime-conformance.XXXXXX")}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mcpruntime-conformance-work.XXXXXX") # private: holds the server's line
CONF=$ROOT/conformance
NODE=$CONF/node_modules/.bin/node

say() { printf '\n== %s\n' "$*"; }
die() { echo "conformance: $*" >&2; exit 2; }

server_pid= proxy_pid= suite_pid=
# stop_all stops what this script started, by PID: the suite, the proxy,
# then the server's process group (SIGTERM, then SIGKILL after 10 s).
stop_all() {
  local pid
  for pid in "$suite_pid" "$proxy_pid"; do
    [[ -n $pid ]] && kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "$suite_pid" "$proxy_pid"; do
    [[ -n $pid ]] && wait "$pid" 2>/dev/null || true
  done
  suite_pid= proxy_pid=
  if [[ -n $server_pid ]]; then
    kill -TERM -- "-$server_pid" 2>/dev/null || true
    for _ in $(seq 100); do kill -0 -- "-$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=
  fi
  rm -f "$WORK"/*-server.out # the tokens of the server under test
}
trap 'stop_all; rm -rf "$WORK"' EXIT
trap 'echo "conformance: interrupted" >&2; exit 130' INT TERM

# wait_line FILE PID SECONDS: waits until FILE has a first full line, while
# PID lives; prints it.
wait_line() {
  local file=$1 pid=$2 deadline=$((SECONDS + $3))
  while ((SECONDS < deadline)); do
    if [[ -f $file && $(wc -l <"$file") -ge 1 ]]; then
      head -n 1 "$file"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.1
  done
  return 1
}

# json FIELD: reads a JSON object on stdin and prints its string FIELD.
json() { "$NODE" -e 'const v = JSON.parse(require("fs").readFileSync(0, "utf8"))[process.argv[1]]; if (typeof v !== "string") process.exit(1); console.log(v)' "$1"; }

# The pinned suite and Node, from the lockfile. The stamp records which
# package.json and lockfile node_modules was installed from.
stamp=$(cat "$CONF/package.json" "$CONF/package-lock.json" | sha256sum | cut -d' ' -f1)
if [[ ! -x $NODE || $(cat "$CONF/node_modules/.mcpruntime-stamp" 2>/dev/null) != "$stamp" ]] || ! "$NODE" --version >/dev/null 2>&1; then
  say "npm ci (conformance/node_modules missing or stale)"
  command -v npm >/dev/null || die "npm is needed to install the suite"
  (cd "$CONF" && npm ci --no-audit --no-fund --loglevel=error) || die "npm ci failed"
  echo "$stamp" >"$CONF/node_modules/.mcpruntime-stamp"
fi
node_version=$("$NODE" --version)
[[ ${node_version#v} =~ ^([0-9]+)\. ]] && ((BASH_REMATCH[1] >= 22)) || die "node_modules/.bin/node is $node_version; the suite needs 22 or later"
SUITE_2025=$CONF/node_modules/conformance-2025-11-25/dist/index.js
SUITE_2026=$CONF/node_modules/conformance-2026-07-28/dist/index.js
REQ_2026=$CONF/node_modules/conformance-2026-07-28/requirements/2026-07-28.yaml

mkdir -p "$WORK/bin"
go build -o "$WORK/bin/authproxy" ./conformance/authproxy || die "building the proxy failed"
read -r -a server_cmd <<<"$SERVER"
echo "node $node_version; server: $SERVER; results: $OUT"

free_port() { "$NODE" -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })'; }

failed=0
summary=()
for run in $RUNS; do
  case $run in
    active) suite=$SUITE_2025 args=() what="conformance 0.1.16, active suite (2025-11-25)" req= ;;
    all) suite=$SUITE_2025 args=(--suite all) what="conformance 0.1.16, --suite all (2025-11-25)" req= ;;
    2026-07-28) suite=$SUITE_2026 args=(--requirements 2026-07-28) what="conformance 0.2.0-alpha.12, --requirements 2026-07-28" req=$REQ_2026 ;;
    *) die "unknown run $run (want active, all or 2026-07-28)" ;;
  esac
  if [[ -n $SCENARIO ]]; then
    args=(--scenario "$SCENARIO") req=
    [[ $run == 2026-07-28 ]] && args+=(--spec-version 2026-07-28)
  fi
  dir=$OUT/$run
  rm -rf "$dir" && mkdir -p "$dir/results"
  say "$run: $what"
  started=$SECONDS

  port=$(free_port)
  setsid "${server_cmd[@]}" -listen "127.0.0.1:$port" >"$WORK/$run-server.out" 2>"$dir/server.log" </dev/null &
  server_pid=$!
  if ! line=$(wait_line "$WORK/$run-server.out" "$server_pid" "$START_TIMEOUT"); then
    tail -n 20 "$dir/server.log" >&2
    if kill -0 "$server_pid" 2>/dev/null; then
      die "$run: the server printed no line within ${START_TIMEOUT}s (log: $dir/server.log)"
    fi
    die "$run: the server exited before printing its line (log: $dir/server.log)"
  fi
  url=$(json url <<<"$line") || die "$run: the server's line has no url"
  token=$(json token <<<"$line") || die "$run: the server's line has no token"

  proxy_args=(-target "$url")
  [[ -n $DUMP ]] && proxy_args+=(-dump "$dir/traffic.jsonl")
  AUTHPROXY_TOKEN=$token "$WORK/bin/authproxy" "${proxy_args[@]}" >"$WORK/$run-proxy.out" 2>"$dir/proxy.log" </dev/null &
  proxy_pid=$!
  unset token
  proxy_line=$(wait_line "$WORK/$run-proxy.out" "$proxy_pid" 10) || die "$run: the proxy did not start (log: $dir/proxy.log)"
  proxy_url=$(json url <<<"$proxy_line")
  echo "server pid $server_pid at $url; proxy pid $proxy_pid at $proxy_url"

  # The suite runs in the background so that an interrupt reaches the trap
  # at once; timeout bounds it.
  (cd "$dir" && exec timeout -k 10 "$RUN_TIMEOUT" "$NODE" "$suite" server --url "$proxy_url" "${args[@]}" -o "$dir/results") \
    >"$dir/suite.out" 2>&1 </dev/null &
  suite_pid=$!
  suite_rc=0
  wait "$suite_pid" || suite_rc=$?
  suite_pid=
  stop_all
  elapsed=$((SECONDS - started))

  sed -n '/=== SUMMARY ===/,$p' "$dir/suite.out"
  ((suite_rc == 124)) && echo "conformance: $run: the suite did not finish within ${RUN_TIMEOUT}s" >&2
  echo "-- $run, per checks.json:"
  sum_rc=0
  "$NODE" "$CONF/summarize.mjs" "$dir/results" ${req:+"$req"} >"$dir/summary.txt" || sum_rc=$?
  cat "$dir/summary.txt"
  verdict=pass
  if ((suite_rc != 0 || sum_rc != 0)); then verdict=FAIL failed=1; fi
  summary+=("$run: $verdict, $(grep '^scenarios:' "$dir/summary.txt" || echo 'no result'), suite exit $suite_rc, ${elapsed}s")
done

say "conformance summary ($OUT)"
printf '%s\n' "${summary[@]}"
exit "$failed"

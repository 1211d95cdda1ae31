#!/usr/bin/env bash
# run-peers.sh — the peer benchmark (`make bench-peers`).
#
# Builds cmd/server, cmd/load and cmd/report, then runs every server
# (runtime, gosdk, mcpgo, floor) through the same load generator, one fresh
# server process per load run, the server pinned to CPU 0 and the load to
# CPU 1 (taskset; without it, unpinned). ROUNDS rounds, the server order
# reversed every other round. Prints one table of medians with the
# runtime's ratios, and leaves the raw JSON lines in $OUT/results.jsonl.
#
# Rows, per server and round: calls (2025 sessions) and modern (2026-07-28
# stateless requests) at each of CALLS_SESSIONS; calls at NS_SESSIONS
# sessions over 1 token and over NS_SESSIONS tokens, on a server with the
# runtime's default session caps (64 per namespace: the 1-token row is one
# namespace at its cap); churn and modern-churn with CHURN_LOOPS loops;
# then, except for the floor, idle and revoke.
#
# Knobs (environment): ROUNDS (3), CALLS_DURATION (3s), WARMUP (500ms,
# before the window of calls, modern and both churns), CALLS_SESSIONS
# ("1 16 256"), MODERN (1; 0 skips the modern and modern-churn rows),
# NS_SESSIONS (64; 0 skips those rows), NS_MODES ("calls"; "calls modern"
# adds the 2026-07-28 rows, where 64 is the default bound of one
# namespace's requests in flight), CHURN_LOOPS (16), CHURN_DURATION (3s),
# IDLE_SESSIONS (10000), IDLE_BIG (100000, runtime once; 0 skips),
# REVOKE_TOKENS (64), CLUSTER (1; 0 skips the 3-node rows), IMPLS (the
# servers, "runtime gosdk mcpgo floor"; add runtime-audit, runtime-events
# or runtime-observed for the runtime with its audit trail on, its admin
# event stream followed, or both),
# OUT (a new temporary directory).
#
# Everything listens on 127.0.0.1; every server is killed by its PID when
# its run ends, and on exit.
set -euo pipefail

ROUNDS=${ROUNDS:-3}
CALLS_DURATION=${CALLS_DURATION:-3s}
WARMUP=${WARMUP:-500ms}
CALLS_SESSIONS=${CALLS_SESSIONS:-1 16 256}
MODERN=${MODERN:-1}
NS_SESSIONS=${NS_SESSIONS:-64}
NS_MODES=${NS_MODES:-calls}
CHURN_LOOPS=${CHURN_LOOPS:-16}
CHURN_DURATION=${CHURN_DURATION:-3s}
IDLE_SESSIONS=${IDLE_SESSIONS:-10000}
IDLE_BIG=${IDLE_BIG:-100000}
REVOKE_TOKENS=${REVOKE_TOKENS:-64}
read -r -a IMPLS <<<"${IMPLS:-runtime gosdk mcpgo floor}"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mcpbench.XXXXXX")}
mkdir -p "$OUT"
results=$OUT/results.jsonl
: >"$results"
started=$SECONDS

echo "building into $OUT"
# -mod=mod: the runtime is replaced by ../, so a dependency it gained since
# bench/go.sum was last tidied is resolved instead of failing the build.
(cd "$here" && for cmd in server load report; do go build -mod=mod -o "$OUT/$cmd" "./cmd/$cmd"; done)

# Pin the server to CPU 0 and the load to CPU 1 when possible.
server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ] && taskset -c 1 true 2>/dev/null; then
	server_cpu=(taskset -c 0) load_cpu=(taskset -c 1)
else
	echo "taskset or a second CPU missing: running unpinned" >&2
fi

server_pid=
server_flags=() # for the next start_server only
stop_server() {
	if [ -n "$server_pid" ]; then
		kill "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=
	fi
}
trap stop_server EXIT
trap 'stop_server; exit 130' INT TERM

# start_server IMPL: starts it and sets addr and control.
start_server() {
	local impl=$1 line=
	"${server_cpu[@]}" "$OUT/server" -impl "$impl" "${server_flags[@]}" >"$OUT/server.out" 2>>"$OUT/server-$impl.log" &
	server_pid=$!
	for _ in $(seq 100); do
		line=$(head -n1 "$OUT/server.out")
		[ -n "$line" ] && break
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	# listening ADDR control ADDR
	read -r _ addr _ control <<<"$line"
	if [ -z "${control:-}" ]; then
		echo "server $impl did not start; see $OUT/server-$impl.log" >&2
		stop_server
		return 1
	fi
}

# run IMPL ROUND LOAD-FLAGS...: one load run on a fresh server.
run() {
	local impl=$1 round=$2 out
	shift 2
	start_server "$impl" || return 0
	if out=$(timeout 330 "${load_cpu[@]}" "$OUT/load" -impl "$impl" -round "$round" \
		-addr "$addr" -control "$control" "$@" 2>>"$OUT/load.log"); then
		grep '^{' <<<"$out" >>"$results"
		grep -v '^{' <<<"$out"
	else
		echo "FAILED: $impl $* (see $OUT/load.log)" | tee -a "$OUT/load.log" >&2
	fi
	stop_server
}

# run_default_caps IMPL ROUND LOAD-FLAGS...: run on a server with the
# runtime's default session caps instead of the raised ones (the peers
# have none).
run_default_caps() {
	server_flags=(-max-sessions 0 -max-sessions-per-namespace 0)
	run "$@"
	server_flags=()
}

reversed=()
for ((i = ${#IMPLS[@]} - 1; i >= 0; i--)); do reversed+=("${IMPLS[i]}"); done

for round in $(seq "$ROUNDS"); do
	order=("${IMPLS[@]}")
	if [ $((round % 2)) -eq 0 ]; then
		order=("${reversed[@]}")
	fi
	echo "== round $round of $ROUNDS: ${order[*]}"
	for impl in "${order[@]}"; do
		for n in $CALLS_SESSIONS; do
			run "$impl" "$round" -mode calls -sessions "$n" -duration "$CALLS_DURATION" -warmup "$WARMUP"
			if [ "$MODERN" != 0 ]; then
				run "$impl" "$round" -mode modern -sessions "$n" -duration "$CALLS_DURATION" -warmup "$WARMUP"
			fi
		done
		if [ "$NS_SESSIONS" -gt 0 ]; then
			for mode in $NS_MODES; do
				for tokens in 1 "$NS_SESSIONS"; do
					run_default_caps "$impl" "$round" -mode "$mode" -sessions "$NS_SESSIONS" -tokens "$tokens" -duration "$CALLS_DURATION" -warmup "$WARMUP"
				done
			done
		fi
		run "$impl" "$round" -mode churn -sessions "$CHURN_LOOPS" -duration "$CHURN_DURATION" -warmup "$WARMUP"
		if [ "$MODERN" != 0 ]; then
			run "$impl" "$round" -mode modern-churn -sessions "$CHURN_LOOPS" -duration "$CHURN_DURATION" -warmup "$WARMUP"
		fi
		if [ "$impl" != floor ]; then # the floor holds no sessions and has no streams
			run "$impl" "$round" -mode idle -sessions "$IDLE_SESSIONS"
			run "$impl" "$round" -mode revoke -sessions "$REVOKE_TOKENS" -stream-wait 1s
		fi
	done
done
if [ "$IDLE_BIG" -gt 0 ]; then
	echo "== runtime holding $IDLE_BIG idle sessions"
	run runtime 1 -mode idle -sessions "$IDLE_BIG" -max-time 5m
fi

echo
echo "Medians of $ROUNDS rounds with their min–max (max over rounds where marked); a ratio is the median of the per-round ratios, with their min–max."
echo "$(nproc) CPUs, $(go version | cut -d' ' -f3-), $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - started)) s"
echo
"$OUT/report" "$results"
echo
echo "raw results: $results"

if [ "${CLUSTER:-1}" != 0 ]; then
	# The 3-node row (SPEC §5d): no peer runs on several nodes with
	# principal-bound sessions, so it has no ratio. Three runtime nodes in
	# one process on an embedded etcd (tests/cluster, in the tests/ module).
	echo
	echo "== 3 nodes (tests/cluster): 2026-07-28 tools/call through the home node and a forwarding node, 16 callers; failover (a home stopped dead until a survivor serves its thread); revoke, healthy and one node paused"
	(cd "$here/../tests/cluster" && go test -run '^$' -bench 'ClusterCalls' -benchtime=5000x -count="$ROUNDS" . &&
		go test -run '^$' -bench 'Failover' -benchtime=3x . &&
		go test -run '^$' -bench 'Revoke/healthy' -benchtime=200x -count=1 . &&
		go test -run '^$' -bench 'Revoke/one-paused' -benchtime=10x -count=1 .) 2>&1 | tee "$OUT/cluster.txt" | grep -E '^Benchmark|[0-9] ns/op'
fi

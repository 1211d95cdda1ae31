#!/usr/bin/env bash
# run-peers.sh — the peer benchmark (`make bench-peers`).
#
# Builds cmd/server, cmd/load and cmd/report, and the shipped binary
# (../cmd/runtime) when a binary row runs, then runs every server (runtime,
# gosdk, mcpgo, floor, and the shipped `runtime serve` as binary and
# binary-raised) through the same load generator, one fresh server process
# per load run, the server pinned to CPU 0 and the load to CPU 1 (taskset;
# without it, unpinned; the shipped binary is a child of cmd/server and
# inherits its CPU). ROUNDS rounds, the server order reversed every other
# round. Prints one table of medians with the runtime's ratios, and leaves
# the raw JSON lines in $OUT/results.jsonl.
#
# Rows, per server and round: calls (2025 sessions) and modern (2026-07-28
# stateless requests) at each of CALLS_SESSIONS; calls at NS_SESSIONS
# sessions over 1 token and over NS_SESSIONS tokens, on a server with the
# runtime's default session caps (64 per namespace: the 1-token row is one
# namespace at its cap); churn and modern-churn with CHURN_LOOPS loops;
# then, except for the floor, idle and revoke (binary, whose default cap
# of 64 sessions per namespace the idle run's 100 per token would pass,
# has no idle row; binary-raised has).
#
# Tools: every call row calls one tool. The servers in this process call
# TOOL; the shipped binary has no echo and calls runtime_capabilities, one
# of its read built-ins. When binary rows run on another tool than TOOL,
# the call rows (calls, modern, the namespace rows, modern-churn) of the
# servers in SAME_TOOL run on runtime_capabilities too, so that the binary
# is compared with the embedded runtime, the floor and mcp-go on the same
# call (the runtime then serves its built-ins only, as the binary does;
# the peers and the floor serve a stand-in of the same result).
#
# The shipped binary: binary is `runtime serve` with its default flags but
# for what a benchmark must set (loopback listeners on ports it picks, the
# admin token in its environment, and its durable state directory in a
# temporary directory, as users run it: not --memory); binary-raised is the
# same with --max-sessions and --sessions-per-namespace raised as the
# embedded runtime's. Tokens are read-only client grants of its admin API,
# allocations come from its /metrics; it cannot be made to collect garbage,
# so its idle row has RSS but no live heap.
#
# Knobs (environment): ROUNDS (3), CALLS_DURATION (3s), WARMUP (500ms,
# before the window of calls, modern and both churns), CALLS_SESSIONS
# ("1 16 256"), MODERN (1; 0 skips the modern and modern-churn rows),
# NS_SESSIONS (64; 0 skips those rows), NS_MODES ("calls"; "calls modern"
# adds the 2026-07-28 rows, where 64 is the default bound of one
# namespace's requests in flight), CHURN_LOOPS (16), CHURN_DURATION (3s),
# IDLE_SESSIONS (10000), IDLE_BIG (100000, runtime once; 0 skips),
# REVOKE_TOKENS (64), CLUSTER (1; 0 skips the 3-node rows), IMPLS (the
# servers, "runtime gosdk mcpgo floor binary binary-raised"; add
# runtime-audit, runtime-events or runtime-observed for the runtime with
# its audit trail on, its admin event stream followed, or both, and
# runtime-stalled for its audit trail on and an event stream whose reader
# never reads), TOOL
# (echo, or runtime_capabilities: then every row is on the binary's tool),
# SAME_TOOL ("runtime mcpgo floor"; "" runs no extra rows), BINARY_ARGS
# (more flags of the shipped binary's runtime serve, for both binary rows,
# such as "--memory" or "--no-oauth", to find where a gap comes from),
# OUT (a new temporary directory).
#
# Everything listens on 127.0.0.1; every server is killed by its PID when
# its run ends, and on exit (cmd/server ends the shipped binary by its PID).
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
read -r -a IMPLS <<<"${IMPLS:-runtime gosdk mcpgo floor binary binary-raised}"
TOOL=${TOOL:-echo}
BINARY_TOOL=runtime_capabilities # the shipped binary has no echo
SAME_TOOL=${SAME_TOOL-runtime mcpgo floor}
read -r -a BINARY_ARGS <<<"${BINARY_ARGS:-}"

case "$TOOL" in
echo | "$BINARY_TOOL") ;;
*)
	echo "TOOL=$TOOL: the servers serve echo or $BINARY_TOOL" >&2
	exit 2
	;;
esac

is_binary() { [ "$1" = binary ] || [ "$1" = binary-raised ]; }

# Binary rows run, on another tool than the others: SAME_TOOL's servers
# run their call rows on the binary's tool too.
same_tool=0
for impl in "${IMPLS[@]}"; do
	if is_binary "$impl" && [ "$TOOL" != "$BINARY_TOOL" ]; then same_tool=1; fi
done

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
for impl in "${IMPLS[@]}"; do
	if is_binary "$impl"; then
		# The shipped binary, as make build builds it.
		(cd "$here/.." && go build -o "$OUT/runtime" ./cmd/runtime)
		break
	fi
done

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

# start_server IMPL TOOL: starts it serving TOOL (the shipped binary: its
# built-ins) and sets addr and control.
start_server() {
	local impl=$1 tool=$2 line=
	local flags=("${server_flags[@]}")
	if is_binary "$impl"; then
		flags+=(-binary "$OUT/runtime")
		for a in "${BINARY_ARGS[@]}"; do flags+=(-binary-arg "$a"); done
	else
		flags+=(-tool "$tool")
	fi
	# Emptied here, not by the new server's redirection alone: head must
	# never read the line of the server before, whose ports are closed.
	: >"$OUT/server.out"
	"${server_cpu[@]}" "$OUT/server" -impl "$impl" "${flags[@]}" >>"$OUT/server.out" 2>>"$OUT/server-$impl.log" &
	server_pid=$!
	for _ in $(seq 300); do
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

# run IMPL ROUND TOOL LOAD-FLAGS...: one load run on a fresh server, its
# calls on TOOL.
run() {
	local impl=$1 round=$2 tool=$3 out
	shift 3
	start_server "$impl" "$tool" || return 0
	if out=$(timeout 330 "${load_cpu[@]}" "$OUT/load" -impl "$impl" -round "$round" -tool "$tool" \
		-addr "$addr" -control "$control" "$@" 2>>"$OUT/load.log"); then
		grep '^{' <<<"$out" >>"$results"
		grep -v '^{' <<<"$out"
	else
		echo "FAILED: $impl $* (see $OUT/load.log)" | tee -a "$OUT/load.log" >&2
	fi
	stop_server
}

# run_default_caps IMPL ROUND TOOL LOAD-FLAGS...: run on a server with the
# runtime's default session caps instead of the raised ones (the peers
# have none; binary-raised is then binary).
run_default_caps() {
	server_flags=(-max-sessions 0 -max-sessions-per-namespace 0)
	run "$@"
	server_flags=()
}

# call_rows IMPL ROUND TOOL: the rows whose figures are TOOL's calls:
# calls and modern at each of CALLS_SESSIONS, the namespace rows,
# modern-churn.
call_rows() {
	local impl=$1 round=$2 tool=$3 n mode tokens
	for n in $CALLS_SESSIONS; do
		run "$impl" "$round" "$tool" -mode calls -sessions "$n" -duration "$CALLS_DURATION" -warmup "$WARMUP"
		if [ "$MODERN" != 0 ]; then
			run "$impl" "$round" "$tool" -mode modern -sessions "$n" -duration "$CALLS_DURATION" -warmup "$WARMUP"
		fi
	done
	if [ "$NS_SESSIONS" -gt 0 ]; then
		for mode in $NS_MODES; do
			for tokens in 1 "$NS_SESSIONS"; do
				run_default_caps "$impl" "$round" "$tool" -mode "$mode" -sessions "$NS_SESSIONS" -tokens "$tokens" -duration "$CALLS_DURATION" -warmup "$WARMUP"
			done
		done
	fi
	if [ "$MODERN" != 0 ]; then
		run "$impl" "$round" "$tool" -mode modern-churn -sessions "$CHURN_LOOPS" -duration "$CHURN_DURATION" -warmup "$WARMUP"
	fi
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
		tool=$TOOL
		if is_binary "$impl"; then tool=$BINARY_TOOL; fi
		call_rows "$impl" "$round" "$tool"
		if [ "$same_tool" = 1 ] && ! is_binary "$impl" && [[ " $SAME_TOOL " == *" $impl "* ]]; then
			call_rows "$impl" "$round" "$BINARY_TOOL"
		fi
		run "$impl" "$round" "$tool" -mode churn -sessions "$CHURN_LOOPS" -duration "$CHURN_DURATION" -warmup "$WARMUP"
		if [ "$impl" != floor ] && [ "$impl" != binary ]; then # the floor holds no sessions; binary's caps evict (see above)
			run "$impl" "$round" "$tool" -mode idle -sessions "$IDLE_SESSIONS"
		fi
		if [ "$impl" != floor ]; then # the floor has no streams
			run "$impl" "$round" "$tool" -mode revoke -sessions "$REVOKE_TOKENS" -stream-wait 1s
		fi
	done
done
if [ "$IDLE_BIG" -gt 0 ]; then
	echo "== runtime holding $IDLE_BIG idle sessions"
	run runtime 1 "$TOOL" -mode idle -sessions "$IDLE_BIG" -max-time 5m
fi

echo
echo "Medians of $ROUNDS rounds with their min–max (max over rounds where marked); a ratio is the median of the per-round ratios, with their min–max."
echo "$(nproc) CPUs, $(go version | cut -d' ' -f3-), $(date -u +%Y-%m-%dT%H:%MZ), $((SECONDS - started)) s"
for impl in "${IMPLS[@]}"; do
	if is_binary "$impl"; then
		echo "binary: \`runtime serve\` built from ../cmd/runtime, its default flags but loopback ports, \$RUNTIME_ADMIN_TOKEN and a temporary --state-dir${BINARY_ARGS[*]:+, and ${BINARY_ARGS[*]}}; binary-raised: the same with --max-sessions and --sessions-per-namespace raised as the embedded runtime's."
		break
	fi
done
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

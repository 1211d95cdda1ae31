#!/usr/bin/env bash
# profile.sh — CPU and allocation profiles of one benchmark server under
# `calls` load, from net/http/pprof on its control listener.
#
#   bash bench/profile.sh [IMPL [SESSIONS]]     (defaults: runtime 256)
#
# Environment: MODE (calls, the load's mode: calls or churn), TOOL (echo,
# the tool served and called: echo or runtime_capabilities),
# PROFILE_SECONDS (20, the CPU profile's length), OUT (a new
# temporary directory). Writes cpu.pb.gz, allocs.pb.gz and the `go tool
# pprof -top` listings (cpu.txt, cpu-cum.txt, alloc_space.txt,
# alloc_objects.txt) to OUT, and prints the load's result line, which has
# the server's allocations per call over the measured window.
#
# The server is pinned to CPU 0 and the load to CPU 1 when taskset is
# there; both listen on 127.0.0.1; the server is killed by PID on exit.
set -euo pipefail

impl=${1:-runtime}
sessions=${2:-256}
secs=${PROFILE_SECONDS:-20}
mode=${MODE:-calls}
tool=${TOOL:-echo}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mcpprof.XXXXXX")}
mkdir -p "$OUT"
command -v curl >/dev/null || { echo "profile.sh needs curl" >&2; exit 1; }
case "$impl" in
binary | binary-raised)
	echo "profile.sh: the shipped binary serves no pprof; profile the embedded runtime (runtime) instead" >&2
	exit 2
	;;
esac

(cd "$here" && go build -mod=mod -o "$OUT/server" ./cmd/server && go build -mod=mod -o "$OUT/load" ./cmd/load)

server_cpu=() load_cpu=()
if command -v taskset >/dev/null && [ "$(nproc)" -ge 2 ] && taskset -c 1 true 2>/dev/null; then
	server_cpu=(taskset -c 0) load_cpu=(taskset -c 1)
fi

server_pid= load_pid=
cleanup() {
	for pid in $load_pid $server_pid; do
		kill "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
}
trap cleanup EXIT

"${server_cpu[@]}" "$OUT/server" -impl "$impl" -tool "$tool" >"$OUT/server.out" 2>"$OUT/server.log" &
server_pid=$!
for _ in $(seq 100); do
	[ -s "$OUT/server.out" ] && break
	sleep 0.1
done
read -r _ addr _ control <"$OUT/server.out"

# Load for the profile plus margins: 2 s warm-up, 2 s before the first
# snapshot, 2 s after the last.
"${load_cpu[@]}" "$OUT/load" -impl "$impl" -addr "$addr" -control "$control" \
	-mode "$mode" -tool "$tool" -sessions "$sessions" -warmup 2s -duration "$((secs + 4))s" >"$OUT/load.out" &
load_pid=$!
sleep 4
curl -fsS -o "$OUT/cpu.pb.gz" "http://$control/debug/pprof/profile?seconds=$secs"
curl -fsS -o "$OUT/allocs.pb.gz" "http://$control/debug/pprof/allocs"
wait "$load_pid"
load_pid=

pprof() { go tool pprof -top -nodecount=60 "$@" "$OUT/server" 2>/dev/null; }
pprof "$OUT/cpu.pb.gz" >"$OUT/cpu.txt"
pprof -cum "$OUT/cpu.pb.gz" >"$OUT/cpu-cum.txt"
pprof -sample_index=alloc_space "$OUT/allocs.pb.gz" >"$OUT/alloc_space.txt"
pprof -sample_index=alloc_objects "$OUT/allocs.pb.gz" >"$OUT/alloc_objects.txt"

grep -v '^{' "$OUT/load.out"
for f in cpu cpu-cum alloc_space alloc_objects; do
	echo
	echo "== $f (first 25 lines; all in $OUT/$f.txt)"
	head -n 25 "$OUT/$f.txt"
done

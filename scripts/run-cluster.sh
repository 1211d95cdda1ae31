#!/usr/bin/env bash
# run-cluster.sh — three runtime nodes and a development etcd on loopback
# (`make run-cluster`), to try several nodes on one machine (SPEC §5d,
# docs/cluster.md). Node nK serves MCP on 127.0.0.1:73K1, its admin API on
# 73K2 and its internal listener on 73K3; etcd listens on 127.0.0.1:2379.
# Node n1 runs the demo (thread demo, its credential in
# $DIR/n1/demo-authorization); every node authenticates it, and forwards its
# requests to n1. Ctrl-C stops everything; the files are in $DIR.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR=${DIR:-$(mktemp -d "${TMPDIR:-/tmp}/mcpcluster.XXXXXX")}
mkdir -p "$DIR/bin"
echo "building into $DIR/bin"
(cd "$root" && go build -o "$DIR/bin/runtime" ./cmd/runtime)
(cd "$root/tests/cluster" && go build -o "$DIR/bin/devetcd" ./cmd/devetcd)

pids=()
cleanup() {
	for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

head -c 48 /dev/urandom | base64 >"$DIR/cluster-secret"
chmod 600 "$DIR/cluster-secret"

"$DIR/bin/devetcd" -listen 127.0.0.1:2379 -peer 127.0.0.1:2380 &
pids+=($!)
for _ in $(seq 100); do
	if (exec 3<>/dev/tcp/127.0.0.1/2379) 2>/dev/null; then break; fi
	sleep 0.1
done

for k in 1 2 3; do
	mkdir -p "$DIR/n$k"
	demo=--no-demo
	[ "$k" = 1 ] && demo=--demo
	"$DIR/bin/runtime" serve \
		--etcd http://127.0.0.1:2379 --node "n$k" --cluster-secret-file "$DIR/cluster-secret" \
		--listen "127.0.0.1:73${k}1" --admin-listen "127.0.0.1:73${k}2" --internal-listen "127.0.0.1:73${k}3" \
		--admin-token-file "$DIR/n$k/admin-token" "$demo" 2>"$DIR/n$k/log" &
	pids+=($!)
done
echo "etcd on 127.0.0.1:2379; nodes n1 n2 n3 on 127.0.0.1:7311 7321 7331 (MCP), 7312 7322 7332 (admin); logs in $DIR/nK/log"
echo "Ctrl-C stops everything."
wait -n "${pids[@]}" || true
echo "a process exited; stopping the others (see the logs in $DIR)" >&2

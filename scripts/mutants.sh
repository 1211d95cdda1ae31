#!/usr/bin/env bash
# Mutant score: build the runtime with each deliberate bug in
# scripts/mutants/*.mut, one at a time, and run the test suite against it.
# The tree is never edited: each mutant is a patched copy of one file in a
# temp dir, handed to the compiler with `go test -overlay`.
#
# usage: scripts/mutants.sh [mutant-file...]   (default: all)
# env:   MUTANT_JOBS (parallel mutants, default 2), MUTANT_TIMEOUT (s, default 300)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
JOBS="${MUTANT_JOBS:-2}"
TIMEOUT="${MUTANT_TIMEOUT:-300}"
# The suite every mutant runs: the runtime, its transport, its actors and
# the property machines. The agent drivers' packages (each drives a real
# CLI, a minute apiece) run only for a mutant in their own package.
BASE_PKGS=(./ ./transport/ ./actors/client/ ./actors/provider/ ./actors/provider/agentproc/ ./actors/provider/execdriver/ ./actors/session/ ./actors/thread/ ./proptest/)

# run_one MUTANT OUTDIR: apply, test, and write OUTDIR/<name>.result as
# "status<TAB>detail".
run_one() {
	local mut="$1" out="$2"
	local name dir target pkgdir
	name="$(basename "$mut" .mut)"
	dir="$out/$name"
	mkdir -p "$dir"
	if ! target="$(python3 scripts/mutants/apply.py "$mut" "$root" "$dir/mutated.go" 2>"$dir/apply.err")"; then
		printf 'INVALID\t%s\n' "$(head -1 "$dir/apply.err")" >"$out/$name.result"
		return 0
	fi
	printf '{"Replace":{"%s":"%s"}}\n' "$root/$target" "$dir/mutated.go" >"$dir/overlay.json"
	pkgdir="./$(dirname "$target")/"
	[ "$pkgdir" = "././" ] && pkgdir=./
	# The mutated file's own package first, on its own: most mutants die
	# there, and then the rest of the suite (the property machines, two
	# minutes) need not run. Once it passes, the other packages at once.
	local rest=()
	for p in "${BASE_PKGS[@]}"; do
		[ "$p" = "$pkgdir" ] || rest+=("$p")
	done
	local rc=0
	if grep -q '^suite: cluster$' "$mut"; then
		# The multi-node suite: its own module, which builds the runtime's
		# files from ../ (the overlay's absolute paths reach them).
		(cd tests/cluster && RAPID_NOFAILFILE=true timeout "$TIMEOUT" "$GO" test -count=1 -overlay="$dir/overlay.json" -timeout "$((TIMEOUT - 10))s" ./...) >"$dir/test.log" 2>&1 || rc=$?
	else
		RAPID_NOFAILFILE=true timeout "$TIMEOUT" "$GO" test -count=1 -overlay="$dir/overlay.json" -timeout "$((TIMEOUT - 10))s" "$pkgdir" >"$dir/test.log" 2>&1 || rc=$?
		if [ "$rc" -eq 0 ]; then
			RAPID_NOFAILFILE=true timeout "$TIMEOUT" "$GO" test -count=1 -overlay="$dir/overlay.json" -timeout "$((TIMEOUT - 10))s" "${rest[@]}" >>"$dir/test.log" 2>&1 || rc=$?
		fi
	fi
	if [ "$rc" -eq 0 ]; then
		printf 'SURVIVED\t-\n' >"$out/$name.result"
		return 0
	fi
	if grep -qE '\[build failed\]|\[setup failed\]|^# ' "$dir/test.log"; then
		printf 'INVALID\tbuild failed: %s (see %s)\n' "$(grep -m1 -E '\.go:[0-9]+:[0-9]+: ' "$dir/test.log" || echo '?')" "$dir/test.log" >"$out/$name.result"
		return 0
	fi
	# The killers: the top-level tests that failed, the quickest three
	# first, each with its time (a kill near a test's hang bound is a hang
	# detected, not an assertion), and how many more; a test binary's own
	# timeout names the tests it caught running.
	local killers hung
	killers="$(grep -oE '^--- FAIL: [^ ]+ \([0-9.]+s\)' "$dir/test.log" | sed 's/^--- FAIL: //' | awk '!seen[$1]++' |
		sort -t'(' -k2 -g | awk 'NR <= 3 { printf "%s%s", (NR > 1 ? ", " : ""), $0 } END { if (NR > 3) printf " +%d more", NR - 3 }' || true)"
	hung="$(awk '/^[[:space:]]*running tests:$/ { f = 1; next } f && /^\t/ { sub(/^\t+/, ""); print; next } { f = 0 }' "$dir/test.log" | head -3 | sed ':a;N;$!ba;s/\n/, /g' || true)"
	if [ -n "$hung" ]; then
		killers="${killers:+$killers; }hung: $hung"
	fi
	if [ -z "$killers" ]; then
		if [ "$rc" -eq 124 ]; then
			killers="timeout after ${TIMEOUT}s"
		else
			killers="$(grep -E '^(panic:|FAIL|fatal error:)' "$dir/test.log" | head -2 | paste -sd' ' - || true)"
			killers="${killers:-exit $rc}"
		fi
	fi
	printf 'KILLED\t%s\n' "$killers" >"$out/$name.result"
}

# --check: every mutant still applies, its text found exactly once (no
# test runs, nothing is built: a mutant that applies but no longer
# compiles shows as INVALID in a run). `make lint` runs it, so a change
# that moves a mutant's text fails CI instead of the next `make mutants`.
if [ "${1:-}" = "--check" ]; then
	shift
	[ $# -gt 0 ] || set -- scripts/mutants/*.mut
	exec python3 scripts/mutants/apply.py --check "$root" "$@"
fi

if [ "${1:-}" = "--one" ]; then
	run_one "$2" "$3"
	exit 0
fi

if [ $# -gt 0 ]; then
	mutants=("$@")
else
	mutants=(scripts/mutants/*.mut)
fi
out="$(mktemp -d "${TMPDIR:-/tmp}/mutants.XXXXXX")"
start=$SECONDS
echo "mutants: ${#mutants[@]} mutants, $JOBS at a time, logs in $out"
# The unmutated tree must pass every suite a mutant runs, or the mutants
# of a failing package would look killed: the base packages, each mutated
# file's own package (an agent driver's needs its CLI: make test-deps), and
# the multi-node suite when a mutant names it.
base=("${BASE_PKGS[@]}" ./memdb/) cluster=0
for mut in "${mutants[@]}"; do
	if grep -q '^suite: cluster$' "$mut"; then
		cluster=1
		continue
	fi
	pkgdir="./$(dirname "$(sed -n 's/^file: *//p' "$mut")")/"
	[ "$pkgdir" = "././" ] && pkgdir=./
	case " ${base[*]} " in
	*" $pkgdir "*) ;;
	*) base+=("$pkgdir") ;;
	esac
done
# Each test binary gets a mutant's bound; the whole baseline, more
# packages than any one mutant runs, three times that.
baseline_ok=1
timeout "$((TIMEOUT * 3))" "$GO" test -count=1 -timeout "$((TIMEOUT - 10))s" "${base[@]}" >"$out/baseline.log" 2>&1 || baseline_ok=0
if [ "$baseline_ok" -eq 1 ] && [ "$cluster" -eq 1 ]; then
	(cd tests/cluster && timeout "$TIMEOUT" "$GO" test -count=1 -timeout "$((TIMEOUT - 10))s" ./...) >>"$out/baseline.log" 2>&1 || baseline_ok=0
fi
if [ "$baseline_ok" -eq 0 ]; then
	echo "mutants: the unmutated suite fails; see $out/baseline.log" >&2
	grep -E '^(--- FAIL|FAIL|panic:)|\[build failed\]' "$out/baseline.log" | head -10 >&2 || true
	exit 1
fi
echo "baseline: suite passes unmutated ($((SECONDS - start))s)"
printf '%s\n' "${mutants[@]}" | xargs -P "$JOBS" -I{} bash "$root/scripts/mutants.sh" --one {} "$out"

killed=0 survived=0 invalid=0
printf '\n%-42s %-9s %s\n' MUTANT RESULT "KILLED BY"
for mut in "${mutants[@]}"; do
	name="$(basename "$mut" .mut)"
	IFS=$'\t' read -r status detail <"$out/$name.result" || { status=INVALID detail="no result"; }
	case "$status" in
	KILLED) killed=$((killed + 1)); printf '%-42s %-9s %s\n' "$name" killed "$detail" ;;
	SURVIVED) survived=$((survived + 1)); printf '%-42s %-9s %s\n' "$name" SURVIVED "$detail" ;;
	*) invalid=$((invalid + 1)); printf '%-42s %-9s %s\n' "$name" INVALID "$detail" ;;
	esac
done
echo
echo "time: $((SECONDS - start))s"
if [ "$invalid" -gt 0 ]; then
	echo "mutants: $invalid invalid (pattern gone or does not compile): fix their definitions"
fi
echo "mutants: $killed killed, $survived survived"
[ "$survived" -eq 0 ] && [ "$invalid" -eq 0 ]

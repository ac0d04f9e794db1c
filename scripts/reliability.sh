#!/bin/sh
# The long reliability run: the reliability suite's long versions
# (every crash point of every scenario, a 400-step crash torture, strace
# faults stepped across every call of each syscall, 2000 random keys), then
# every fuzz target for FUZZTIME each, one at a time (the machine has two
# cores). Ends with one summary line; exits non-zero on any violation or
# test failure.
#
#   scripts/reliability.sh               # FUZZTIME=60s
#   FUZZTIME=5m scripts/reliability.sh
#   FUZZTIME=0 scripts/reliability.sh    # no fuzzing
set -u
cd "$(dirname "$0")/.." || exit 2
FUZZTIME=${FUZZTIME:-60s}
work=$(mktemp -d "${TMPDIR:-/tmp}/idem-reliability.XXXXXX") || exit 2
trap 'rm -rf "$work"' EXIT
stats=$work/stats
: >"$stats"
failed=0

echo "== reliability suite, long versions"
if ! IDEM_RELIABILITY=long IDEM_RELIABILITY_STATS=$stats go test -v -count=1 -timeout 60m \
	-run '^(TestBadLedgers|TestReadOnlyLedgers|TestLedgerModes|TestHostileInput|TestFaultInjection|TestCrashPoints|TestCrashTorture)$' \
	./internal/e2e >"$work/suite.log" 2>&1; then
	failed=$((failed + 1))
	grep -a -E -- '--- FAIL|VIOLATION' "$work/suite.log" | head -40
fi
tail -n 1 "$work/suite.log"
grep -a -E 'faults_test.go:[0-9]+: phases hit' "$work/suite.log" | sed 's/^ *faults_test.go:[0-9]*: /  strace /'
if grep -a -q -- '--- SKIP: TestFaultInjection' "$work/suite.log"; then
	echo "  (strace fault injection skipped: no strace or no ptrace here)"
fi

fuzzexecs=0
targets=0
if [ "$FUZZTIME" != 0 ]; then
	for pkg in $(go list ./...); do
		for fz in $(go test -list '^Fuzz' "$pkg" 2>/dev/null | grep '^Fuzz'); do
			targets=$((targets + 1))
			log=$work/fuzz-$fz.log
			if go test -run "^$fz\$" -fuzz "^$fz\$" -fuzztime "$FUZZTIME" "$pkg" >"$log" 2>&1; then
				result=ok
			else
				result=FAILED
				failed=$((failed + 1))
			fi
			n=$(grep -a -o 'execs: [0-9]*' "$log" | tail -n 1 | grep -o '[0-9]*')
			n=${n:-0}
			fuzzexecs=$((fuzzexecs + n))
			printf '  %-24s %-40s %12s execs  %s\n' "$fz" "${pkg#github.com/idemhq/idem}" "$n" "$result"
			if [ "$result" = FAILED ]; then
				grep -a -E -A8 -- '--- FAIL|panic:|failing input' "$log" | head -20
			fi
		done
	done
fi

awk -v fz="$fuzzexecs" -v targets="$targets" -v failed="$failed" '
	{ for (i = 2; i <= NF; i++) { split($i, kv, "="); sum[kv[1]] += kv[2] } }
	END {
		printf "reliability: faults injected %d, crashes survived %d, inputs tried %d (+%d fuzz executions over %d targets), violations found %d, failed steps %d\n",
			sum["faults"], sum["crashes"], sum["inputs"], fz, targets, sum["violations"], failed
	}' "$stats"
violations=$(awk '{ for (i = 2; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "violations") v += kv[2] } } END { print v + 0 }' "$stats")
[ "$failed" -eq 0 ] && [ "$violations" -eq 0 ]

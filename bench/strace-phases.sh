#!/usr/bin/env bash
# bench/strace-phases.sh: the system calls of one run of idem, counted per
# step between the points of its -tags phases build (internal/probe marks
# each with a failing write(-1, POINT) when IDEM_PHASE_STRACE is set).
#
#   bench/strace-phases.sh [IDEM_ARGS...]   # default: a fresh key, /bin/true
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/out
mkdir -p "$out/work"
CGO_ENABLED=0 go build -tags phases -o "$out/idem-phases" .
ledger=$out/work/strace.db
"$out/idem-phases" --ledger "$ledger" run --key strace-warm -- /bin/true
[ $# -gt 0 ] || set -- --ledger "$ledger" run --key "strace-$RANDOM$RANDOM" -- /bin/true
trace=$out/work/strace.txt
IDEM_PHASE_STRACE=1 strace -f -qq -o "$trace" "$out/idem-phases" "$@" >/dev/null
# Each line is "PID syscall(...": count them by the point that follows;
# the child's (after its exec) are the command's, not idem's.
awk '
	/execve\(/ && NR > 1 { child[$1] = 1 }
	child[$1] { next }
	/write\(-1, "/ { match($0, /write\(-1, "[^"]*"/); p = substr($0, RSTART + 11, RLENGTH - 12)
		printf "  %-20s %4d system calls\n", p, n; n = 0; next }
	/^[0-9]+ +[a-z_0-9]+\(/ { n++ }
	END { printf "  %-20s %4d system calls\n", "(after exit)", n }
' "$trace"

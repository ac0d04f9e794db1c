#!/usr/bin/env bash
# bench/abba.sh: two builds of idem compared directly, for a change smaller
# than what bench/run.sh's rounds can show (a round's ratio moves by 0.05 to
# 0.1 with the floor measured in it). It times a fresh run of /bin/true and a
# replay of 10 KB on a ledger of 1000 records, each in A B B A and then
# B A A B order (timeit interleaves the four), and prints for each order the
# mean of NEW's two medians minus the mean of OLD's two: drift across the
# loop falls on both builds alike.
#
#   bench/abba.sh OLD NEW             # e.g. a build of the commit before, and the tree's
#   N=600 bench/abba.sh OLD NEW       # runs of each command (default 400)
#   FILL_OLD=PATH bench/abba.sh OLD NEW
#                                     # OLD's bench/cmd/fill, when its ledger
#                                     # schema differs from the tree's
#
# Build both the same way (CGO_ENABLED=0 go build), as bench/run.sh does.
# Both are copied by cp first: how fast a program starts here depends on its
# file's history in the page cache (bench/RESULTS.md). Scratch files go to
# bench/out/abba/.
set -euo pipefail

if [[ $# -ne 2 ]]; then
	echo "usage: bench/abba.sh OLD NEW" >&2
	exit 2
fi
old=$(realpath "$1")
new=$(realpath "$2")
cd "$(dirname "$0")/.."
n=${N:-400}
dir=bench/out/abba
rm -rf "$dir"
mkdir -p "$dir"
go build -o "$dir/timeit" ./bench/cmd/timeit
go build -o "$dir/fill" ./bench/cmd/fill
cp "$old" "$dir/A"
cp "$new" "$dir/B"
head -c 10240 /dev/urandom >"$dir/10k.bin"
export NO_COLOR=1
unset IDEM_LEDGER

fill_A=${FILL_OLD:-$dir/fill}
fill_B=$dir/fill
for b in A B; do
	fill=fill_$b
	"${!fill}" -n 1000 "$dir/$b.db" >/dev/null
	"$dir/$b" --ledger "$dir/$b.db" run --key replay-10k -- cat "$dir/10k.bin" >/dev/null
	"$dir/$b" --ledger "$dir/$b.db" run --key replay-10k -- cat "$dir/10k.bin" 2>/dev/null | cmp -s - "$dir/10k.bin" ||
		{ echo "abba: build $b does not replay the recorded output" >&2; exit 1; }
done

# measure WHAT ORDER...: one timeit loop of the four commands in ORDER
# (e.g. A B B A), and the difference of the means of the medians.
measure() {
	local what=$1
	shift
	local cmds=() names=() i=0
	for b in "$@"; do
		i=$((i + 1))
		names+=("$b$i")
		case $what in
		run) cmds+=("$dir/$b --ledger $dir/$b.db run --key run-$b$i-{n} -- /bin/true") ;;
		replay) cmds+=("$dir/$b --ledger $dir/$b.db run --key replay-10k -- cat $dir/10k.bin") ;;
		esac
	done
	"$dir/timeit" -n "$n" -names "$(IFS=,; echo "${names[*]}")" "${cmds[@]}" 2>/dev/null |
		awk -v what="$what" -v order="$*" '
			$2 == "median" {
				b = substr($1, 1, 1); ms = $3; sub(/ms$/, "", ms)
				sum[b] += ms; cnt[b]++; faults[b] = faults[b] " " $11
				line = line sprintf("  %s %s", $1, $3)
			}
			END {
				d = sum["B"] / cnt["B"] - sum["A"] / cnt["A"]
				printf "%-7s %s: NEW - OLD %+.3f ms (medians:%s; faults A%s, B%s)\n", what, order, d, line, faults["A"], faults["B"]
			}'
}

echo "# abba: OLD $1 (A) against NEW $2 (B), $n runs of each command"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
for what in run replay; do
	measure "$what" A B B A
	measure "$what" B A A B
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# bench/run.sh: build idem and print every figure of the performance goals
# (bench/RESULTS.md lists them), as medians over repeated runs and as differences and ratios
# against the bare command measured in the same run (runs interleaved).
#
#   bench/run.sh            # everything (about 2 minutes, 1.5 GiB of scratch)
#   QUICK=1 bench/run.sh    # fewer runs, 100k records instead of 1M
#   IDEM=/path/idem IDEM_PHASES=/path/idem-phases FILL=/path/fill QUICK=1 bench/run.sh
#                           # another build of idem (and its -tags phases
#                           # build and bench/cmd/fill), e.g. an earlier
#                           # commit's, for before/after
#
# For a change smaller than a round's spread, bench/abba.sh OLD NEW compares
# two builds directly.
#
# Needs only Go, /bin/sh, cat and the tools it builds from bench/cmd.
# Scratch files go to bench/out/ (ignored by git); the report is printed and
# kept in bench/out/report.md.
set -euo pipefail

cd "$(dirname "$0")/.."
out=bench/out
work=$out/work
mkdir -p "$work"
report=$out/report.md
results=$out/results.txt
: >"$results"
exec > >(tee "$report") 2>&1

quick=${QUICK:-}
runs=400    # runs of each command for the start-up figures
big=1000000 # records in the big ledgers
stream_runs=9
if [[ -n $quick ]]; then
	runs=100
	big=100000
	stream_runs=3
fi

# A static binary: with cgo (the default when a C compiler is around), pflag's
# import of net links libc dynamically, which costs ~0.8 ms per start.
echo "# idem benchmarks"
echo
echo "building: CGO_ENABLED=0 go build -o $out/idem ."
CGO_ENABLED=0 go build -o "$out/idem" .
go build -o "$out/timeit" ./bench/cmd/timeit
go build -o "$out/fill" ./bench/cmd/fill
go build -o "$out/contend" ./bench/cmd/contend
go build -o "$out/purgebench" ./bench/cmd/purgebench
go build -o "$out/goals" ./bench/cmd/goals
go build -o "$out/fsynclat" ./bench/cmd/fsynclat
CGO_ENABLED=0 go build -o "$out/floor" ./bench/cmd/floor
CGO_ENABLED=0 go build -o "$out/baseline" ./bench/cmd/baseline
# The physical floor: the same durable steps in C, no SQL and no runtime.
gcc -O2 -static -o "$out/cfloor" bench/cfloor/cfloor.c
# idem and the floor with their points compiled in (internal/probe), for
# the breakdown of a run's time.
CGO_ENABLED=0 go build -tags phases -o "$out/idem-phases" .
CGO_ENABLED=0 go build -tags phases -o "$out/floor-phases" ./bench/cmd/floor
# The least a program that keeps idem's contract can do, with and without
# the checks against other programs and users on the host: the lower
# bound under idem (and its build with the points).
CGO_ENABLED=0 go build -o "$out/least" ./bench/cmd/least
CGO_ENABLED=0 go build -tags phases -o "$out/least-phases" ./bench/cmd/least
# IDEM and IDEM_PHASES measure other builds of idem (an earlier commit's,
# for a before-and-after) with this script's harness and floors.
[ -n "${IDEM:-}" ] && cp "$IDEM" "$out/idem"
[ -n "${IDEM_PHASES:-}" ] && cp "$IDEM_PHASES" "$out/idem-phases"
# FILL: that build's bench/cmd/fill, which writes ledgers of its schema.
[ -n "${FILL:-}" ] && cp "$FILL" "$out/fill"
idem=$out/idem
# Every measured program is written once more by cp, so that all have the
# same history in the page cache, on which how fast a program starts
# depends: here a run of idem from the file the Go linker wrote (through
# a memory map) takes 0.4 to 0.9 ms longer than one from a copy written
# by cp, and one from a file read back from the disk 0.7 ms longer.
for p in idem idem-phases floor floor-phases baseline cfloor least least-phases; do
	cp "$out/$p" "$out/$p.copy" && mv "$out/$p.copy" "$out/$p"
done
timeit=$out/timeit

echo
echo "## machine"
echo
echo "- $(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "- memory: $(awk '/MemTotal/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "- kernel: $(uname -r); file system of bench/out: $(df -T "$out" | awk 'NR==2 {print $2}')"
echo "- $(go version)"
echo "- $("$out/fsynclat" "$work")"
echo "- load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "- idem: $(stat -c %s "$idem") bytes; backends linked in: sqlite (modernc)$(go version -m "$idem" | grep -q jackc/pgx && echo ', postgres (pgx)')"

export NO_COLOR=1
unset IDEM_LEDGER

section() {
	echo
	echo "## $1"
	echo
	echo '```'
}
endsection() {
	echo '```'
}

# ---------------------------------------------------------------------------
section "start-up (no ledger is opened)"
"$timeit" -n "$runs" -results "$results" -names true,idem-version,idem-help,idem-key \
	/bin/true "$idem --version" "$idem --help" "$idem key a b c"
endsection
section "start-up against a Go program that links only cobra and modernc (bench/cmd/baseline)"
"$timeit" -n "$runs" -results "$results" -names baseline-version,idem-version,key-vs-base,help-vs-base \
	"$out/baseline --version" "$idem --version" "$idem key a b c" "$idem --help"
endsection
echo "(key-vs-base and help-vs-base: idem key and idem --help against the same baseline, whose"
echo "--help prints nothing: idem's is 53 lines, every command with its summary and the exit codes)"

# ---------------------------------------------------------------------------
section "run overhead: idem run --key <unique> -- /bin/true vs /bin/true"
rm -rf "$work"/run.db* "$work"/floor.db* "$work"/least.db* "$work"/leastc.db* "$work/cfloor"
mkdir "$work/cfloor"
"$idem" --ledger "$work/run.db" run --key bench-warm -- /bin/true
"$out/floor" "$work/floor.db" bench-warm /bin/true
"$out/least" "$work/least.db" bench-warm /bin/true
"$out/least" --checks "$work/leastc.db" bench-warm /bin/true
"$timeit" -n "$runs" -results "$results" -names bare-true,cfloor-true,floor-true,least-true,least-checks-true,run-true \
	/bin/true "$out/cfloor $work/cfloor run-{n} /bin/true" "$out/floor $work/floor.db run-{n} /bin/true" \
	"$out/least $work/least.db run-{n} /bin/true" "$out/least --checks $work/leastc.db run-{n} /bin/true" \
	"$idem --ledger $work/run.db run --key run-{n} -- /bin/true"
endsection
echo "(cfloor-true: bench/cfloor, the same durable steps in C with a file per key, fsynced: the"
echo "physical floor. floor-true: bench/cmd/floor as it was when the start-up bars were set, the same"
echo "flow in Go, linked with modernc, pgx and cobra: what a Go program doing this pays here."
echo "least-true: bench/cmd/least, the least a Go program that keeps idem's contract does for a run;"
echo "least-checks-true: the same with the checks against other programs and users on the host too:"
echo "the lower bound under idem)"

# ---------------------------------------------------------------------------
section "where a run's time goes: the points of idem run and of the floor"
rm -rf "$work"/runp.db* "$work"/floorp.db* "$work/cfloorp"
mkdir "$work/cfloorp"
"$out/idem-phases" --ledger "$work/runp.db" run --key bench-warm -- /bin/true
"$out/floor-phases" "$work/floorp.db" bench-warm /bin/true
"$timeit" -n "$runs" -phases -names bare-true,cfloor-phases,floor-phases,run-phases /bin/true \
	"$out/cfloor $work/cfloorp run-{n} /bin/true" "$out/floor-phases $work/floorp.db run-{n} /bin/true" \
	"$out/idem-phases --ledger $work/runp.db run --key run-{n} -- /bin/true"
endsection
echo "(builds of idem and of the floor with -tags phases: each notes the wall clock at the points"
echo "internal/probe names and writes them at exit; main is reached after exec, the runtime and package"
echo "init; reaped is when wait4 returned. Their totals differ a little from the builds above: the"
echo "writing of the points, and another binary layout.)"

# ---------------------------------------------------------------------------
section "replay of a recorded 10 KB output vs cat of the same 10 KB"
head -c 10240 /dev/urandom >"$work/10k.bin"
rm -f "$work"/replay1k.db* "$work"/replaybig.db*
"$out/fill" -n 1000 "$work/replay1k.db"
"$out/fill" -n "$big" "$work/replaybig.db"
for db in replay1k replaybig; do
	"$idem" --ledger "$work/$db.db" run --key replay-10k -- cat "$work/10k.bin" >/dev/null
done
rm -rf "$work"/floorr.db* "$work"/leastr.db* "$work"/leastcr.db* "$work/cfloorr"
mkdir "$work/cfloorr"
"$out/floor" "$work/floorr.db" replay-10k cat "$work/10k.bin" >/dev/null
"$out/cfloor" "$work/cfloorr" replay-10k cat "$work/10k.bin" >/dev/null
"$out/least" --fill 999 "$work/leastr.db"
"$out/least" --fill 999 "$work/leastcr.db"
"$out/least" "$work/leastr.db" replay-10k cat "$work/10k.bin" >/dev/null
"$out/least" --checks "$work/leastcr.db" replay-10k cat "$work/10k.bin" >/dev/null
"$timeit" -n "$runs" -allow-fail -results "$results" \
	-names cat-10k,cfloor-replay,floor-replay,least-replay,least-checks-replay,replay-1k,replay-big \
	"cat $work/10k.bin" "$out/cfloor $work/cfloorr replay-10k cat $work/10k.bin" \
	"$out/floor $work/floorr.db replay-10k cat $work/10k.bin" \
	"$out/least $work/leastr.db replay-10k cat $work/10k.bin" \
	"$out/least --checks $work/leastcr.db replay-10k cat $work/10k.bin" \
	"$idem --ledger $work/replay1k.db run --key replay-10k -- cat $work/10k.bin" \
	"$idem --ledger $work/replaybig.db run --key replay-10k -- cat $work/10k.bin"
endsection
echo "(replay-big: a ledger of $big records; the replayed record is the last one written. floor-replay:"
echo "the floor on a key it has, whose reservation is refused: open, one failed insert, exit; it writes"
echo "no output. cfloor-replay: reads the recorded code back. least-replay and least-checks-replay:"
echo "bench/cmd/least's replay (reads the record and output, counts the replay, writes the output),"
echo "on a ledger of 1000 records as replay-1k's, without and with those checks)"

section "where a replay's time goes: the points of a replay and of the floor's refused reservation"
"$out/idem-phases" --ledger "$work/replay1k.db" run --key replay-10k -- cat "$work/10k.bin" >/dev/null
"$timeit" -n "$runs" -phases -allow-fail -names cat-10k,cfloor-phases,floor-phases,replay-phases "cat $work/10k.bin" \
	"$out/cfloor $work/cfloorr replay-10k cat $work/10k.bin" \
	"$out/floor-phases $work/floorr.db replay-10k cat $work/10k.bin" \
	"$out/idem-phases --ledger $work/replay1k.db run --key replay-10k -- cat $work/10k.bin"
endsection

section "where least's time goes beyond the floor's, and idem's beyond least --checks: the points of each"
rm -f "$work"/leastp.db* "$work"/leastpr.db*
"$out/least-phases" "$work/leastp.db" bench-warm /bin/true
"$out/least-phases" --fill 999 "$work/leastpr.db"
"$out/least-phases" "$work/leastpr.db" replay-10k cat "$work/10k.bin" >/dev/null
"$timeit" -n "$runs" -phases -names bare-true,floor-phases,least-phases /bin/true \
	"$out/floor-phases $work/floorp.db runl-{n} /bin/true" "$out/least-phases $work/leastp.db runl-{n} /bin/true"
"$timeit" -n "$runs" -phases -allow-fail -names cat-10k,floor-phases,least-phases "cat $work/10k.bin" \
	"$out/floor-phases $work/floorr.db replay-10k cat $work/10k.bin" \
	"$out/least-phases $work/leastpr.db replay-10k cat $work/10k.bin"
"$timeit" -n "$runs" -phases -names bare-true,least-checks-phases,run-phases /bin/true \
	"$out/least-phases --checks $work/leastc.db runl-{n} /bin/true" \
	"$out/idem-phases --ledger $work/runp.db run --key runl-{n} -- /bin/true"
"$timeit" -n "$runs" -phases -allow-fail -names cat-10k,least-checks-phases,replay-phases "cat $work/10k.bin" \
	"$out/least-phases --checks $work/leastcr.db replay-10k cat $work/10k.bin" \
	"$out/idem-phases --ledger $work/replay1k.db run --key replay-10k -- cat $work/10k.bin"
endsection
echo "(least's points: main, ledger-files, ledger-connected, opened, after-reserve, after-child-start,"
echo "after-child-exit, after-finish, exit, reaped; idem's and the floor's as above. Each table of"
echo "steps compares the last two commands. A step's median difference is not a difference of"
echo "medians: the rows do not add up to the difference of the totals)"

# ---------------------------------------------------------------------------
section "contention: n simultaneous runs (batch wall time, outcomes, real executions)"
has_wait=
if "$idem" run --help 2>&1 | grep -q -- '--wait'; then
	has_wait=1
fi
for n in 32 128; do
	rm -f "$work"/contend.db*
	"$idem" --ledger "$work/contend.db" run --key bench-warm -- /bin/true
	"$out/contend" -idem "$idem" -ledger "$work/contend.db" -n "$n" -batches 3 2>>"$results"
	"$out/contend" -idem "$idem" -ledger "$work/contend.db" -n "$n" -batches 3 -same 2>>"$results"
	if [[ -n $has_wait ]]; then
		"$out/contend" -idem "$idem" -ledger "$work/contend.db" -n "$n" -batches 3 -same -wait 2>>"$results"
	fi
done
endsection

# ---------------------------------------------------------------------------
section "streaming: 1 GiB through idem run -- cat vs cat | cat (both cross one pipe)"
gib=$((1 << 30))
mib100=$((100 << 20))
if [[ ! -f $work/1g.bin || $(stat -c %s "$work/1g.bin") -ne $gib ]]; then
	head -c "$gib" /dev/zero | tr '\0' 'x' >"$work/1g.bin"
fi
head -c "$mib100" "$work/1g.bin" >"$work/100m.bin"
sync "$work/1g.bin" "$work/100m.bin" # no writeback while timing
rm -f "$work"/stream.db*
"$idem" --ledger "$work/stream.db" run --key bench-warm -- /bin/true
cat "$work/1g.bin" >/dev/null # into the page cache
"$timeit" -n "$stream_runs" -warmup 1 -results "$results" -names cat-pipe-cat,idem-cat,idem-cat-no-output \
	"sh:cat $work/1g.bin | cat >/dev/null" \
	"sh:$idem --ledger $work/stream.db run --key stream-{n} -- cat $work/1g.bin >/dev/null" \
	"sh:$idem --ledger $work/stream.db run --no-output --key stream-{n} -- cat $work/1g.bin >/dev/null"
endsection
echo "(idem-cat stores the first 16 MiB of output durably, as a run does by default; idem-cat-no-output"
echo "stores none. cat | cat is bimodal on a 2-core VM: fast when both cats share a core, 2-3x slower"
echo "when each wakes the other across cores through the 64 KiB pipe. The peak RSS of an sh: command"
echo "is the largest of the shell's and its children's.)"
section "peak RSS of idem run -- cat at 100 MiB and at 1 GiB of output (default --max-output 16MiB)"
"$timeit" -n "$stream_runs" -warmup 1 -results "$results" -names rss-100m,rss-1g \
	"sh:$idem --ledger $work/stream.db run --key rss-{n} -- cat $work/100m.bin >/dev/null" \
	"sh:$idem --ledger $work/stream.db run --key rss-{n} -- cat $work/1g.bin >/dev/null"
endsection

# ---------------------------------------------------------------------------
section "purge of $big expired records while runs go on"
if "$idem" purge --help >/dev/null 2>&1; then
	rm -f "$work"/purge.db*
	"$out/fill" -n "$big" -expired "$work/purge.db"
	"$out/purgebench" -idem "$idem" -ledger "$work/purge.db" 2>>"$results"
else
	echo "idem purge is not there yet: skipped"
fi
endsection

# ---------------------------------------------------------------------------
echo
echo "## goals"
echo
"$out/goals" -results "$results" -records "$big"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

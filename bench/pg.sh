#!/usr/bin/env bash
# bench/pg.sh: per-run overhead of a PostgreSQL ledger, directly and through
# PgBouncer (transaction mode), against SQLite and the bare command, in one
# interleaved timeit run: `idem run` of /bin/true with a fresh key, and a
# replay of a recorded key.
#
#   PG=postgres://... PGB=postgres://... bench/pg.sh   # N=200 runs each
#
# PG and PGB default to IDEM_TEST_POSTGRES and IDEM_TEST_PGBOUNCER (the test
# set-up in CONTRIBUTING.md). BASE=path/to/an/older/idem adds that build's
# fresh runs and replays, direct and through PgBouncer, to the same
# interleaved run (before and after, against one load); its ledger is a
# schema of its own, idem_bench_base. The ledger goes to a schema of its own
# (IDEM_LEDGER_SCHEMA=idem_bench), dropped first and afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench/out
work=$out/work
mkdir -p "$work"
pg=${PG:-${IDEM_TEST_POSTGRES:?set PG or IDEM_TEST_POSTGRES}}
pgb=${PGB:-${IDEM_TEST_PGBOUNCER:?set PGB or IDEM_TEST_PGBOUNCER}}
n=${N:-200}
CGO_ENABLED=0 go build -o "$out/idem" .
CGO_ENABLED=0 go build -o "$out/idem-net" ./cmd/idem-net # idem hands it the PostgreSQL ledger
go build -o "$out/timeit" ./bench/cmd/timeit
# As in bench/run.sh: every measured program is written once more by cp,
# so that all have the same history in the page cache.
for p in idem idem-net; do
	cp "$out/$p" "$out/$p.copy" && mv "$out/$p.copy" "$out/$p"
done
if [ -n "${BASE:-}" ]; then
	cp "$BASE" "$out/idem-pg-base" && BASE=$out/idem-pg-base
fi
idem=$out/idem
db=$work/pg-bench.db
export NO_COLOR=1 IDEM_LEDGER_SCHEMA=idem_bench
unset IDEM_LEDGER
# The run-lock files of these throwaway ledgers (one per schema made) go
# to a state directory of the benchmark's, not the user's.
export XDG_STATE_HOME=$PWD/$work/state
rm -rf "$XDG_STATE_HOME" && mkdir -p "$XDG_STATE_HOME"
drop() { psql -qX "$pg" -c 'DROP SCHEMA IF EXISTS idem_bench CASCADE' -c 'DROP SCHEMA IF EXISTS idem_bench_base CASCADE' 2>/dev/null; }
drop
trap drop EXIT
rm -f "$db"*
# Made on purpose: the test database may hold other ledgers beside it.
"$idem" --ledger "$pg" schema --apply
for l in "$db" "$pg" "$pgb"; do
	"$idem" --ledger "$l" run --key "replay:$(echo "$l" | cksum | cut -c1-8)" -- /bin/true
done
names=true,sqlite-fresh,pg-fresh,pgbouncer-fresh,via-idem-pg-fresh,sqlite-replay,pg-replay,pgbouncer-replay,via-idem-pg-replay
base=()
if [ -n "${BASE:-}" ]; then
	IDEM_LEDGER_SCHEMA=idem_bench_base "$BASE" --ledger "$pg" schema --apply
	for l in "$pg" "$pgb"; do
		IDEM_LEDGER_SCHEMA=idem_bench_base "$BASE" --ledger "$l" run --key "replay:base:$(echo "$l" | cksum | cut -c1-8)" -- /bin/true
	done
	names=$names,base-pg-fresh,base-pgbouncer-fresh,base-pg-replay,base-pgbouncer-replay
	b="env IDEM_LEDGER_SCHEMA=idem_bench_base $BASE"
	base=("$b --ledger $pg run --key fresh:bd:{n} -- /bin/true"
		"$b --ledger $pgb run --key fresh:bb:{n} -- /bin/true"
		"$b --ledger $pg run --key replay:base:$(echo "$pg" | cksum | cut -c1-8) -- /bin/true"
		"$b --ledger $pgb run --key replay:base:$(echo "$pgb" | cksum | cut -c1-8) -- /bin/true")
fi
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
# pg-*: idem-net run, what a fleet host calls; via-idem-*: idem run, which
# hands the invocation to idem-net (an exec: idem's own start, then
# idem-net's).
net=$out/idem-net
"$out/timeit" -n "$n" -names "$names" \
	/bin/true \
	"$idem --ledger $db run --key fresh:s:{n} -- /bin/true" \
	"$net --ledger $pg run --key fresh:d:{n} -- /bin/true" \
	"$net --ledger $pgb run --key fresh:b:{n} -- /bin/true" \
	"$idem --ledger $pg run --key fresh:i:{n} -- /bin/true" \
	"$idem --ledger $db run --key replay:$(echo "$db" | cksum | cut -c1-8) -- /bin/true" \
	"$net --ledger $pg run --key replay:$(echo "$pg" | cksum | cut -c1-8) -- /bin/true" \
	"$net --ledger $pgb run --key replay:$(echo "$pgb" | cksum | cut -c1-8) -- /bin/true" \
	"$idem --ledger $pg run --key replay:$(echo "$pg" | cksum | cut -c1-8) -- /bin/true" \
	"${base[@]}"

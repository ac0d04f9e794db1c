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
# interleaved run (before and after, against one load); its ledger is in a
# database of its own, idem_bench_base (made if missing), so that it is
# started as the others are, with no wrapper (`env` would add a program
# start: 0.8 ms here). The ledgers go to a schema of their own
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
# in_db DSN DB: the URL DSN with its database replaced by DB.
in_db() { sed -E "s#/[^/?]+(\?|\$)#/$2\1#" <<<"$1"; }
drop() {
	psql -qX "$pg" -c 'DROP SCHEMA IF EXISTS idem_bench CASCADE' 2>/dev/null
	if [ -n "${BASE:-}" ]; then psql -qX "$(in_db "$pg" idem_bench_base)" -c 'DROP SCHEMA IF EXISTS idem_bench CASCADE' 2>/dev/null; fi
}
if [ -n "${BASE:-}" ] && ! psql -qXAt "$pg" -c "SELECT 1 FROM pg_database WHERE datname = 'idem_bench_base'" | grep -q 1; then
	psql -qX "$pg" -c 'CREATE DATABASE idem_bench_base'
fi
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
	bpg=$(in_db "$pg" idem_bench_base) bpgb=$(in_db "$pgb" idem_bench_base)
	"$BASE" --ledger "$bpg" schema --apply
	for l in "$bpg" "$bpgb"; do
		"$BASE" --ledger "$l" run --key "replay:base:$(echo "$l" | cksum | cut -c1-8)" -- /bin/true
	done
	names=$names,base-pg-fresh,base-pgbouncer-fresh,base-pg-replay,base-pgbouncer-replay
	base=("$BASE --ledger $bpg run --key fresh:bd:{n} -- /bin/true"
		"$BASE --ledger $bpgb run --key fresh:bb:{n} -- /bin/true"
		"$BASE --ledger $bpg run --key replay:base:$(echo "$bpg" | cksum | cut -c1-8) -- /bin/true"
		"$BASE --ledger $bpgb run --key replay:base:$(echo "$bpgb" | cksum | cut -c1-8) -- /bin/true")
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

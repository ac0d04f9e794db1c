-- Migration 4 of the SQLite ledger: recorded output moves out of the
-- records row into a table of its own, written once, by the outcome. Runs
-- and replays update a record's row (its lease, its counters); with the
-- output in that row, SQLite wrote the whole row again at each update, so
-- a replay of an 8 MB output wrote 16 MB, and could not replay on a full
-- disk. A record has a row here only when its output is not empty; a
-- record without one stored empty output (or none, with --no-output: see
-- records.output_stored).
-- Not additive: an idem that knows only v3 would read and write output in
-- records, so the compatibility version becomes 4.
CREATE TABLE outputs (
    key    TEXT PRIMARY KEY,
    stdout BLOB NOT NULL,
    stderr BLOB NOT NULL
);
INSERT INTO outputs (key, stdout, stderr)
    SELECT key, coalesce(stdout, x''), coalesce(stderr, x'') FROM records
    WHERE length(stdout) > 0 OR length(stderr) > 0;
UPDATE records SET stdout = NULL, stderr = NULL WHERE stdout IS NOT NULL OR stderr IS NOT NULL;

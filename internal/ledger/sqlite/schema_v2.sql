-- Migration 2 of the SQLite ledger (additive: an idem that knows only v1
-- keeps working, and leaves these columns at their defaults): why a run
-- failed at a glance, where and as whom it ran, counters for metrics, and
-- the indexes that keep every listing and purge selector proportional to
-- the rows it returns.

-- The class of the attempt that set exit_code, and the last non-empty line
-- of its stderr (at most 200 bytes): a listing's reason column.
ALTER TABLE records ADD COLUMN class TEXT;
ALTER TABLE records ADD COLUMN reason TEXT;
-- Working directory and user name of the invocation that reserved it last.
ALTER TABLE records ADD COLUMN run_cwd TEXT;
ALTER TABLE records ADD COLUMN run_user TEXT;
-- The record's counters (see ledger.Counters; replays is v1's column):
-- runs by outcome, attempts by class. Bumped by the statements that
-- already write the record, so they cost no statement of their own.
ALTER TABLE records ADD COLUMN runs_succeeded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN runs_failed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN runs_retryable INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_success INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_transient INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_permanent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_abandoned INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_interrupted INTEGER NOT NULL DEFAULT 0;
ALTER TABLE records ADD COLUMN att_timeout INTEGER NOT NULL DEFAULT 0;

-- The end of each attempt's stderr (at most 4 KiB; NULL with --no-output).
ALTER TABLE attempts ADD COLUMN stderr_tail BLOB;

-- What records held when purge or TTL expiry removed them, so the sums
-- metrics report never go down. Written only by those rare paths.
CREATE TABLE totals (
    shard           INTEGER PRIMARY KEY,
    replays         INTEGER NOT NULL DEFAULT 0,
    runs_succeeded  INTEGER NOT NULL DEFAULT 0,
    runs_failed     INTEGER NOT NULL DEFAULT 0,
    runs_retryable  INTEGER NOT NULL DEFAULT 0,
    att_success     INTEGER NOT NULL DEFAULT 0,
    att_transient   INTEGER NOT NULL DEFAULT 0,
    att_permanent   INTEGER NOT NULL DEFAULT 0,
    att_abandoned   INTEGER NOT NULL DEFAULT 0,
    att_interrupted INTEGER NOT NULL DEFAULT 0,
    att_timeout     INTEGER NOT NULL DEFAULT 0,
    purged          INTEGER NOT NULL DEFAULT 0,
    expired         INTEGER NOT NULL DEFAULT 0
);

-- inspect --status and purge --status, newest first (rowid breaks ties).
-- It costs a run about 50-75 us (its page is written at the reservation
-- and at the outcome); an index on (status, key) cost 200 us more and was
-- left out: --status with --prefix reads the prefix's keys instead.
CREATE INDEX records_status_outcome ON records (status, coalesce(finished_ms, created_ms));

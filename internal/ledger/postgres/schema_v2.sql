-- Migration 2 of the PostgreSQL ledger (additive: an idem that knows only
-- v1 keeps working, and leaves these columns at their defaults): why a run
-- failed at a glance, where and as whom it ran, counters for metrics, and
-- the indexes that keep every listing and purge selector proportional to
-- the rows it returns.

-- The class of the attempt that set exit_code, and the last non-empty line
-- of its stderr (at most 200 bytes): a listing's reason column.
ALTER TABLE records
    ADD COLUMN class text,
    ADD COLUMN reason text,
    -- Working directory and user name of the invocation that reserved it last.
    ADD COLUMN run_cwd text,
    ADD COLUMN run_user text,
    -- The record's counters (see ledger.Counters; replays is v1's column):
    -- runs by outcome, attempts by class. Bumped by the statements that
    -- already write the record: no statement of their own, and no row that
    -- every host of a fleet updates.
    ADD COLUMN runs_succeeded bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_failed bigint NOT NULL DEFAULT 0,
    ADD COLUMN runs_retryable bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_success bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_transient bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_permanent bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_abandoned bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_interrupted bigint NOT NULL DEFAULT 0,
    ADD COLUMN att_timeout bigint NOT NULL DEFAULT 0;

-- The end of each attempt's stderr (at most 4 KiB; NULL with --no-output).
ALTER TABLE attempts ADD COLUMN stderr_tail bytea;

-- What records held when purge or TTL expiry removed them, so the sums
-- metrics report never go down. Written only by those rare paths, each to
-- one of 16 rows picked at random, so concurrent purges and expiries on
-- several hosts seldom wait for one another.
CREATE TABLE totals (
    shard           integer PRIMARY KEY CHECK (shard >= 0 AND shard < 16),
    replays         bigint NOT NULL DEFAULT 0,
    runs_succeeded  bigint NOT NULL DEFAULT 0,
    runs_failed     bigint NOT NULL DEFAULT 0,
    runs_retryable  bigint NOT NULL DEFAULT 0,
    att_success     bigint NOT NULL DEFAULT 0,
    att_transient   bigint NOT NULL DEFAULT 0,
    att_permanent   bigint NOT NULL DEFAULT 0,
    att_abandoned   bigint NOT NULL DEFAULT 0,
    att_interrupted bigint NOT NULL DEFAULT 0,
    att_timeout     bigint NOT NULL DEFAULT 0,
    purged          bigint NOT NULL DEFAULT 0,
    expired         bigint NOT NULL DEFAULT 0
);

-- inspect --status and purge --status, newest first (seq breaks ties). It
-- costs a run about 50-75 us (its page is written at the reservation and
-- at the outcome); an index on (status, key) cost 200 us more and was left
-- out: --status with --prefix reads the prefix's keys instead.
CREATE INDEX records_status_outcome ON records (status, (coalesce(finished, created)), seq);

-- Migration 1 of the PostgreSQL ledger. It lives in a schema of its own
-- (idem); names here are unqualified because the connection's search_path
-- is that schema. It is applied with the migrations after it in one
-- transaction, under an advisory lock, so hosts starting at once create the
-- schema exactly once. Later changes are migrations of their own (see the
-- ledger package doc); this file is never edited.
-- Times are timestamptz from the server's clock; durations are milliseconds.

-- The schema versions this database holds: version, the write version (the
-- last migration applied), and, once a migration makes them differ, a
-- column compat, the compatibility version (without it, compat = version).
-- An idem refuses, without changing anything, a ledger whose compatibility
-- version is newer than what it knows.
CREATE TABLE meta (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   integer NOT NULL,
    created   timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Fencing tokens for the whole ledger. A sequence only grows (a rolled back
-- transaction does not give its value back), so a purged and re-created key
-- never reuses a token.
CREATE SEQUENCE tokens AS bigint;

CREATE TABLE records (
    key              text COLLATE "C" PRIMARY KEY,  -- byte order, as in SQLite; prefix scans use the index
    seq              bigint GENERATED ALWAYS AS IDENTITY, -- insertion order (SQLite's rowid): breaks ties in List
    fingerprint      text NOT NULL,
    command          jsonb NOT NULL,             -- JSON array: the argv, for people
    status           text NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'retryable')),
    attempts         integer NOT NULL,           -- attempts started, across invocations
    max_attempts     integer NOT NULL,
    exit_code        integer,                    -- last ended attempt's code; NULL before any ended
    exit_source      text NOT NULL DEFAULT 'child',
    token            bigint NOT NULL,            -- fencing token of the current (or last) owner
    owner_host       text NOT NULL DEFAULT '',
    owner_boot_id    text NOT NULL DEFAULT '',
    owner_pidns      bigint NOT NULL DEFAULT 0,
    owner_pid        integer NOT NULL DEFAULT 0,
    owner_start      bigint NOT NULL DEFAULT 0,  -- field 22 of /proc/PID/stat
    child_pgid       integer NOT NULL DEFAULT 0,
    child_start      bigint NOT NULL DEFAULT 0,
    lease_expires    timestamptz,                -- NULL: no lease (the record has an outcome)
    created          timestamptz NOT NULL,       -- when this record was first reserved
    started          timestamptz NOT NULL,       -- when the current/last invocation reserved it
    updated          timestamptz NOT NULL,
    finished         timestamptz,                -- the outcome's time; NULL while in progress
    duration_ms      bigint,                     -- run time of the invocation that recorded the outcome
    ttl_ms           bigint NOT NULL DEFAULT 0,  -- 0: never expires
    expires          timestamptz,                -- finished + ttl; NULL: never
    replays          bigint NOT NULL DEFAULT 0,
    last_replay      timestamptz,
    output_stored    boolean NOT NULL DEFAULT true, -- false: --no-output
    stdout           bytea,
    stderr           bytea,
    stdout_truncated boolean NOT NULL DEFAULT false,
    stderr_truncated boolean NOT NULL DEFAULT false
);
-- Outcome time (creation while in progress): inspect's order and purge --older-than.
CREATE INDEX records_outcome ON records ((coalesce(finished, created)), seq);
CREATE INDEX records_expires ON records (expires) WHERE expires IS NOT NULL;

CREATE TABLE attempts (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key         text COLLATE "C" NOT NULL REFERENCES records (key) ON DELETE CASCADE,
    n           integer NOT NULL,                -- 1-based within the record's budget
    token       bigint NOT NULL,
    host        text NOT NULL DEFAULT '',
    pid         integer NOT NULL DEFAULT 0,
    started     timestamptz NOT NULL,
    ended       timestamptz,
    exit_code   integer,
    class       text,                            -- success, transient, permanent, abandoned, interrupted, timeout
    delay_ms    bigint                           -- backoff slept before the next attempt
);
CREATE INDEX attempts_key ON attempts (key, id);

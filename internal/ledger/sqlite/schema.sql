-- Migration 1 of the SQLite ledger: the schema a new file gets, in the same
-- BEGIN IMMEDIATE transaction as the migrations after it and the version
-- markers (application_id, user_version). Later changes are migrations of
-- their own (see the ledger package doc); this file is never edited.
-- Times are Unix milliseconds (UTC), durations milliseconds.

-- One ledger-wide counter that only grows: fencing tokens are drawn from it,
-- so a purged and re-created key never reuses a token.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('token', 0);

CREATE TABLE records (
    key              TEXT NOT NULL UNIQUE,
    fingerprint      TEXT NOT NULL,
    command          TEXT NOT NULL,              -- JSON array: the argv, for people
    status           TEXT NOT NULL CHECK (status IN ('in_progress', 'succeeded', 'failed', 'retryable')),
    attempts         INTEGER NOT NULL,           -- attempts started, across invocations
    max_attempts     INTEGER NOT NULL,
    exit_code        INTEGER,                    -- last ended attempt's code; NULL before any ended
    exit_source      TEXT NOT NULL DEFAULT 'child',
    token            INTEGER NOT NULL,           -- fencing token of the current (or last) owner
    owner_host       TEXT NOT NULL DEFAULT '',
    owner_boot_id    TEXT NOT NULL DEFAULT '',
    owner_pidns      INTEGER NOT NULL DEFAULT 0,
    owner_pid        INTEGER NOT NULL DEFAULT 0,
    owner_start      INTEGER NOT NULL DEFAULT 0, -- field 22 of /proc/PID/stat
    child_pgid       INTEGER NOT NULL DEFAULT 0,
    child_start      INTEGER NOT NULL DEFAULT 0,
    lease_expires_ms INTEGER NOT NULL DEFAULT 0,
    created_ms       INTEGER NOT NULL,           -- when this record was first reserved
    started_ms       INTEGER NOT NULL,           -- when the current/last invocation reserved it
    updated_ms       INTEGER NOT NULL,
    finished_ms      INTEGER,                    -- the outcome's time; NULL while in progress
    duration_ms      INTEGER,                    -- run time of the invocation that recorded the outcome
    ttl_ms           INTEGER NOT NULL DEFAULT 0, -- 0: never expires
    expires_ms       INTEGER,                    -- finished_ms + ttl_ms; NULL: never
    replays          INTEGER NOT NULL DEFAULT 0,
    last_replay_ms   INTEGER,
    output_stored    INTEGER NOT NULL DEFAULT 1, -- 0: --no-output
    stdout           BLOB,
    stderr           BLOB,
    stdout_truncated INTEGER NOT NULL DEFAULT 0,
    stderr_truncated INTEGER NOT NULL DEFAULT 0
);
-- Outcome time (creation while in progress): inspect's order and purge --older-than.
CREATE INDEX records_outcome ON records (coalesce(finished_ms, created_ms));
CREATE INDEX records_expires ON records (expires_ms) WHERE expires_ms IS NOT NULL;

CREATE TABLE attempts (
    id          INTEGER PRIMARY KEY,
    key         TEXT NOT NULL,
    n           INTEGER NOT NULL,                -- 1-based within the record's budget
    token       INTEGER NOT NULL,
    host        TEXT NOT NULL DEFAULT '',
    pid         INTEGER NOT NULL DEFAULT 0,
    started_ms  INTEGER NOT NULL,
    ended_ms    INTEGER,
    exit_code   INTEGER,
    class       TEXT,                            -- success, transient, permanent, abandoned, interrupted, timeout
    delay_ms    INTEGER                          -- backoff slept before the next attempt
);
CREATE INDEX attempts_key ON attempts (key, id);

-- Migration 6 of the SQLite ledger (additive): the run guard. secret keys
-- the tag of every run marker (IDEM_RUN), so that a process of another
-- user cannot pass for one of a run's; lock_dev and lock_ino name the run
-- lock file the ledger is bound to (0: none yet), so that a lock file
-- deleted or replaced while a run's process still holds the old one is
-- not given up for a new one. Older idems leave this table alone.
CREATE TABLE run_guard (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    secret    BLOB NOT NULL,
    lock_dev  INTEGER NOT NULL DEFAULT 0,
    lock_ino  INTEGER NOT NULL DEFAULT 0
);
INSERT INTO run_guard (singleton, secret) VALUES (1, randomblob(32));

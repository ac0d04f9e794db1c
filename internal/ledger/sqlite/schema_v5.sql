-- Migration 5 of the SQLite ledger (additive): each key group's last
-- success, kept when purge removes the records it came from, so that
-- idem_last_success_timestamp_seconds keeps the group after housekeeping
-- (purge --older-than 30d) and its staleness alert can still fire. A group
-- is the key up to its first ':' (the whole key without one); metrics
-- groups these again by its --group-separator. Older idems leave the
-- table alone: their purges keep nothing, as before.
CREATE TABLE last_success (
    grp         TEXT PRIMARY KEY,
    finished_ms INTEGER NOT NULL
) WITHOUT ROWID;

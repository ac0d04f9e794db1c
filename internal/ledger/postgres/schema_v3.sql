-- Migration 3 of the PostgreSQL ledger (additive): each key group's last
-- success, kept when purge removes the records it came from, so that
-- idem_last_success_timestamp_seconds keeps the group after housekeeping
-- (purge --older-than 30d) and its staleness alert can still fire. A group
-- is the key up to its first ':' (the whole key without one); metrics
-- groups these again by its --group-separator. Written only by purge;
-- older idems leave it alone.
CREATE TABLE last_success (
    grp      text COLLATE "C" PRIMARY KEY,
    finished timestamptz NOT NULL
);

-- A migration of the SQLite ledger (additive): a durable high-water mark
-- for fencing tokens. Reservations commit with synchronous=NORMAL, so a
-- power cut can take the token counter back below tokens that commands
-- were already given. No token above mark is handed out; mark is raised a
-- block at a time in a transaction committed with synchronous=FULL, and
-- the first reservation of a boot other than boot_id (the one that wrote
-- mark) moves the counter past mark first. Older idems leave this table
-- alone and draw from counters as before; a newer one raises mark past
-- whatever they drew.
CREATE TABLE token_mark (
    singleton INTEGER PRIMARY KEY CHECK (singleton = 1),
    mark      INTEGER NOT NULL,
    boot_id   TEXT NOT NULL
);
INSERT INTO token_mark (singleton, mark, boot_id) SELECT 1, value, '' FROM counters WHERE name = 'token';

-- Events are keyed by a sequence number (the rowid) instead of their text id. A new event's
-- id (a UUIDv7) carries its sequence number in its last 62 bits, so a lookup by id is a
-- rowid lookup, and no separate index on id is written at every commit: SQLite appends to a
-- rowid table cheaply, while an index filled in key order rewrites its rightmost pages and
-- their parents on most commits (about half the pages a small group commit wrote).
-- Rows from before this migration keep their ids and are found through events_legacy_id,
-- a partial index that new rows (legacy NULL) never touch.
CREATE TABLE events_v2 (
    seq          INTEGER PRIMARY KEY,
    id           TEXT NOT NULL,
    legacy       INTEGER,
    org_id       INTEGER NOT NULL,
    signal_key   TEXT NOT NULL,
    type         TEXT NOT NULL,
    service      TEXT,
    environment  TEXT,
    status       TEXT,
    dedup_key    TEXT,
    occurred_at  INTEGER NOT NULL,
    received_at  INTEGER NOT NULL,
    body         TEXT NOT NULL
);
INSERT INTO events_v2 (seq, id, legacy, org_id, signal_key, type, service, environment, status,
                       dedup_key, occurred_at, received_at, body)
    SELECT rowid, id, 1, org_id, signal_key, type, service, environment, status, dedup_key,
           occurred_at, received_at, body
    FROM events ORDER BY rowid;
DROP TABLE events;
ALTER TABLE events_v2 RENAME TO events;
CREATE UNIQUE INDEX events_legacy_id ON events (id) WHERE legacy = 1;
-- New events carry the newest times, so an ascending time index takes them at its right
-- edge; queries read it backwards for newest first.
CREATE INDEX events_by_time ON events (org_id, occurred_at, id);
-- A resolve looks up the newest alert with its dedupKey: the index serves filter and order.
CREATE INDEX events_by_dedup ON events (org_id, dedup_key, occurred_at, id)
    WHERE dedup_key IS NOT NULL;

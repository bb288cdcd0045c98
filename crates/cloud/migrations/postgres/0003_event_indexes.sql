-- New events carry the newest times, so an ascending time index takes them at its right edge
-- (the B-tree's cheap append path); queries read it backwards for newest first.
DROP INDEX events_by_time;
CREATE INDEX events_by_time ON events (org_id, occurred_at, id);
-- A resolve looks up the newest alert with its dedupKey: the index serves filter and order.
DROP INDEX events_by_dedup;
CREATE INDEX events_by_dedup ON events (org_id, dedup_key, occurred_at, id)
    WHERE dedup_key IS NOT NULL;

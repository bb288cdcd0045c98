-- Correlation's candidates (the deployments and changes of an environment around an alert)
-- leave the events' indexes: a partial index took one B-tree insert per deployment, which a
-- stream of deployments paid on every event. The writer instead adds one row per org,
-- environment, hour of event time and group commit, whose entries list each event's time and
-- sequence number (the rowid) as a JSON array of [occurred_at, seq]; readers fetch the events
-- by sequence number (docs/operations.md, "Storage").
CREATE TABLE change_hours (
    org_id       INTEGER NOT NULL,
    environment  TEXT NOT NULL,
    hour         INTEGER NOT NULL,
    first_seq    INTEGER NOT NULL,
    entries      TEXT NOT NULL,
    PRIMARY KEY (org_id, environment, hour, first_seq)
) WITHOUT ROWID;
INSERT INTO change_hours (org_id, environment, hour, first_seq, entries)
    SELECT org_id, environment, occurred_at / 3600000000, min(seq),
           json_group_array(json_array(occurred_at, seq))
    FROM events
    WHERE type IN ('deployment', 'change') AND environment IS NOT NULL
    GROUP BY org_id, environment, occurred_at / 3600000000;
DROP INDEX events_changes;

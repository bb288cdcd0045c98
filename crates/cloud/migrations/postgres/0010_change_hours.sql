-- Correlation's candidates (the deployments and changes of an environment around an alert)
-- leave the events' indexes: the partial index took one B-tree insert (and its WAL record) per
-- deployment, which a stream of deployments paid on every event. The writers instead add one
-- row per org, environment, hour of event time and group commit, whose entries list each
-- event's time and id as a JSON array of [occurred_at, id]; readers fetch the events by id
-- (docs/operations.md, "Storage").
CREATE TABLE change_hours (
    org_id       BIGINT NOT NULL,
    environment  TEXT NOT NULL,
    hour         BIGINT NOT NULL,
    first_id     TEXT NOT NULL,
    entries      TEXT NOT NULL,
    PRIMARY KEY (org_id, environment, hour, first_id)
);
INSERT INTO change_hours (org_id, environment, hour, first_id, entries)
    SELECT org_id, environment, occurred_at / 3600000000, min(id),
           json_agg(json_build_array(occurred_at, id))::text
    FROM events
    WHERE type IN ('deployment', 'change') AND environment IS NOT NULL
    GROUP BY org_id, environment, occurred_at / 3600000000;
DROP INDEX events_changes;

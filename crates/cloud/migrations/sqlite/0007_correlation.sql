-- Correlation (docs/correlation.md): the suspects of an alert are the deployments and changes
-- of its environment shortly before it. A partial index holds those only, so alerts and
-- custom events never write it.
CREATE INDEX events_changes ON events (org_id, environment, occurred_at, id)
    WHERE type IN ('deployment', 'change');

-- The services view: the newest deployment of each service in each environment. A small side
-- table that the writer updates once per service and environment per group commit, instead of
-- an index over every deployment.
CREATE TABLE deploy_heads (
    org_id       INTEGER NOT NULL REFERENCES orgs(id),
    service      TEXT NOT NULL,
    environment  TEXT NOT NULL,
    occurred_at  INTEGER NOT NULL,
    event_id     TEXT NOT NULL,
    PRIMARY KEY (org_id, service, environment)
) WITHOUT ROWID;
INSERT INTO deploy_heads (org_id, service, environment, occurred_at, event_id)
    SELECT org_id, service, environment, occurred_at, id FROM (
        SELECT org_id, service, environment, occurred_at, id, ROW_NUMBER() OVER (
            PARTITION BY org_id, service, environment ORDER BY occurred_at DESC, id DESC) AS n
        FROM events
        WHERE type = 'deployment' AND service IS NOT NULL AND environment IS NOT NULL)
    WHERE n = 1;

-- Declared service dependencies: "service depends on depends_on", the same in every environment.
CREATE TABLE service_dependencies (
    org_id      INTEGER NOT NULL REFERENCES orgs(id),
    service     TEXT NOT NULL,
    depends_on  TEXT NOT NULL,
    PRIMARY KEY (org_id, service, depends_on)
);

-- Confirmed causes: an alert that a person says a deployment caused (change fail rate).
CREATE TABLE alert_causes (
    org_id         INTEGER NOT NULL REFERENCES orgs(id),
    alert_id       TEXT NOT NULL,
    deployment_id  TEXT NOT NULL,
    confirmed_at   INTEGER NOT NULL,
    PRIMARY KEY (org_id, alert_id)
);
CREATE INDEX alert_causes_by_deployment ON alert_causes (org_id, deployment_id);

-- The cloud's own audit (who created, revoked or changed what, when, from where), org webhooks
-- for Bridge release notifications with their delivery queue, and each user's choice of an
-- in-dashboard release notice.
CREATE TABLE audit_log (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id   INTEGER REFERENCES orgs(id),
    at       INTEGER NOT NULL,
    actor    TEXT NOT NULL,
    address  TEXT NOT NULL,
    action   TEXT NOT NULL,
    target   TEXT NOT NULL
);
CREATE INDEX audit_by_org ON audit_log (org_id, id);

-- The signing secret is kept as is: the cloud signs every delivery with it (as Stripe does),
-- so it cannot be a one-way hash. It grants nothing on this service.
CREATE TABLE webhooks (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id        INTEGER NOT NULL REFERENCES orgs(id),
    url           TEXT NOT NULL,
    secret        TEXT NOT NULL,
    release_seen  TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    removed_at    INTEGER
);
-- One live webhook per org.
CREATE UNIQUE INDEX webhooks_by_org ON webhooks (org_id) WHERE removed_at IS NULL;

-- One row per notification and webhook; next_attempt_at is NULL once delivered or given up.
CREATE TABLE webhook_deliveries (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    webhook_id       INTEGER NOT NULL REFERENCES webhooks(id),
    dedup            TEXT NOT NULL,
    body             TEXT NOT NULL,
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  INTEGER,
    delivered_at     INTEGER,
    last_error       TEXT,
    created_at       INTEGER NOT NULL,
    UNIQUE (webhook_id, dedup)
);
CREATE INDEX deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE next_attempt_at IS NOT NULL;

ALTER TABLE users ADD COLUMN release_notices INTEGER NOT NULL DEFAULT 0;


-- When a bridge last tried to connect with this token after it was revoked: the dashboard
-- shows such a bridge as unauthorized (still running somewhere, refused).
ALTER TABLE bridge_tokens ADD COLUMN refused_at INTEGER;

-- Organisations, their credentials, and the events they send.
CREATE TABLE orgs (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    slug        TEXT NOT NULL UNIQUE,
    created_at  INTEGER NOT NULL
);

CREATE TABLE signal_keys (
    key         TEXT PRIMARY KEY,
    org_id      INTEGER NOT NULL REFERENCES orgs(id),
    name        TEXT,
    created_at  INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id          TEXT PRIMARY KEY,
    org_id      INTEGER NOT NULL REFERENCES orgs(id),
    name        TEXT,
    secret_hash BLOB NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE TABLE bridge_tokens (
    id          TEXT PRIMARY KEY,
    org_id      INTEGER NOT NULL REFERENCES orgs(id),
    bridge_name TEXT NOT NULL,
    secret_hash BLOB NOT NULL,
    created_at  INTEGER NOT NULL,
    revoked_at  INTEGER
);
CREATE INDEX bridge_tokens_by_bridge ON bridge_tokens (org_id, bridge_name);

CREATE TABLE events (
    id           TEXT PRIMARY KEY,
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
CREATE INDEX events_by_time ON events (org_id, occurred_at DESC, id DESC);
CREATE INDEX events_by_dedup ON events (org_id, dedup_key) WHERE dedup_key IS NOT NULL;

CREATE TABLE idempotency (
    signal_key  TEXT NOT NULL,
    idem_key    TEXT NOT NULL,
    response    TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    PRIMARY KEY (signal_key, idem_key)
);

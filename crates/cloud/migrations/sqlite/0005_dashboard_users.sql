-- Dashboard people: users (one org each, unique email), one-time set-password links and
-- server-side sessions. Secrets are stored as SHA-256 hashes, passwords as Argon2id strings.
CREATE TABLE users (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    org_id         INTEGER NOT NULL REFERENCES orgs(id),
    email          TEXT NOT NULL UNIQUE,
    role           TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    password_hash  TEXT,
    created_at     INTEGER NOT NULL
);

CREATE TABLE password_links (
    token_hash  BLOB PRIMARY KEY,
    user_id     INTEGER NOT NULL REFERENCES users(id),
    expires_at  INTEGER NOT NULL,
    used_at     INTEGER
);

CREATE TABLE sessions (
    id_hash       BLOB PRIMARY KEY,
    user_id       INTEGER NOT NULL REFERENCES users(id),
    csrf          TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    last_seen_at  INTEGER NOT NULL,
    revoked_at    INTEGER
);
CREATE INDEX sessions_by_user ON sessions (user_id);

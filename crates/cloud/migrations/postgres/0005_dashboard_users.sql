-- Dashboard people: users (one org each, unique email), one-time set-password links and
-- server-side sessions. Secrets are stored as SHA-256 hashes, passwords as Argon2id strings.
CREATE TABLE users (
    id             BIGSERIAL PRIMARY KEY,
    org_id         BIGINT NOT NULL REFERENCES orgs(id),
    email          TEXT NOT NULL UNIQUE,
    role           TEXT NOT NULL CHECK (role IN ('admin', 'member')),
    password_hash  TEXT,
    created_at     BIGINT NOT NULL
);

CREATE TABLE password_links (
    token_hash  BYTEA PRIMARY KEY,
    user_id     BIGINT NOT NULL REFERENCES users(id),
    expires_at  BIGINT NOT NULL,
    used_at     BIGINT
);

CREATE TABLE sessions (
    id_hash       BYTEA PRIMARY KEY,
    user_id       BIGINT NOT NULL REFERENCES users(id),
    csrf          TEXT NOT NULL,
    created_at    BIGINT NOT NULL,
    last_seen_at  BIGINT NOT NULL,
    revoked_at    BIGINT
);
CREATE INDEX sessions_by_user ON sessions (user_id);

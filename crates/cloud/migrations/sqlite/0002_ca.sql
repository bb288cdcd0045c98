-- The internal CA, shared by every cloud process on this database (first start wins).
CREATE TABLE ca (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    cert_pem    TEXT NOT NULL,
    key_pem     TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

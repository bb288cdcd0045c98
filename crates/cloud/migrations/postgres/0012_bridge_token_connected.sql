-- When a bridge last opened a tunnel with the token (µs), apart from its last use (which
-- `bridge check` makes too): the dashboard tells a bridge that was connected and is now
-- reconnecting from one whose token was only checked.
ALTER TABLE bridge_tokens ADD COLUMN connected_at BIGINT;
-- Tokens used before this release: their last use stands for a connection, as it did.
UPDATE bridge_tokens SET connected_at = last_used_at WHERE last_used_at IS NOT NULL;

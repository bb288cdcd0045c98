-- Key management: API keys and signal keys can be revoked; every credential records when it
-- was last used (at most about once per 30 s, when a server reads it into its cache).
ALTER TABLE api_keys ADD COLUMN revoked_at INTEGER;
ALTER TABLE api_keys ADD COLUMN last_used_at INTEGER;
ALTER TABLE signal_keys ADD COLUMN revoked_at INTEGER;
ALTER TABLE signal_keys ADD COLUMN last_used_at INTEGER;
ALTER TABLE bridge_tokens ADD COLUMN last_used_at INTEGER;

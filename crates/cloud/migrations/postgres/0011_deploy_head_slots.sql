-- deploy_heads keeps one row per (org, service, environment) and writer slot: each group-commit
-- writer upserts only its own rows. With one row per pair, every group of deployments locked
-- the same rows until its commit's fsync, so the two writers waited for each other
-- (pg_stat_activity: Lock/transactionid; docs/benchmarks.md). The head of a pair is the newest
-- of its rows.
ALTER TABLE deploy_heads ADD COLUMN slot SMALLINT NOT NULL DEFAULT 0;
ALTER TABLE deploy_heads DROP CONSTRAINT deploy_heads_pkey;
ALTER TABLE deploy_heads ADD PRIMARY KEY (org_id, service, environment, slot);

-- PostgreSQL's deploy_heads gains a row per writer slot in this migration, so that its two
-- group-commit writers never wait for each other's row locks. SQLite has a single writer:
-- nothing to do. Kept in step with the PostgreSQL migrations' numbers.
SELECT 1;

-- SQLite's correlation index loses its text id in this migration; PostgreSQL's keeps it (its
-- planner needs it to read the newest candidates in order, and its ingest does not pay for it
-- as SQLite's does). Kept in step with the SQLite migrations' numbers.
SELECT 1;

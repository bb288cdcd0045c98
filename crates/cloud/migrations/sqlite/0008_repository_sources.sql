-- What changed in a deploy (docs/correlation.md, "Commits of a deployment"): which Git source
-- behind which bridge holds each repository named by the org's events.
CREATE TABLE repository_sources (
    org_id      INTEGER NOT NULL REFERENCES orgs(id),
    repository  TEXT NOT NULL,
    bridge      TEXT NOT NULL,
    source      TEXT NOT NULL,
    path        TEXT NOT NULL,
    updated_at  INTEGER NOT NULL,
    PRIMARY KEY (org_id, repository)
);

-- The commits a deployment brought, as listed once through the bridge: the list (JSON), where
-- it was read (bridge/source/path: a list from an earlier mapping is not used), the previous
-- deployment's commit it was listed from (a late, closer deployment lists it again), and its
-- oldest commit's time, which the change lead time counts from (when the list is exact).
CREATE TABLE deployment_commits (
    org_id           INTEGER NOT NULL REFERENCES orgs(id),
    deployment_id    TEXT NOT NULL,
    repository       TEXT NOT NULL,
    source           TEXT NOT NULL,
    previous_sha     TEXT,
    commits          TEXT NOT NULL,
    first_commit_at  INTEGER,
    listed_at        INTEGER NOT NULL,
    PRIMARY KEY (org_id, deployment_id)
);

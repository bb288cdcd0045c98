//! What "what changed in a deploy" stores: which Git source holds each repository of the org,
//! and the commits each deployment brought, listed once and kept.

use sqlx::Row;

use super::{StorageError, Store, StoredEvent, now_micros, on_db, on_writer};

/// Where a repository's commits are read: a Git source behind one of the org's bridges.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RepositorySource {
    /// The repository as events name it (`acme/api`).
    pub repository: String,
    /// The bridge.
    pub bridge: String,
    /// The bridge's Git source (its `sources` entry's name).
    pub source: String,
    /// The repository's path under the source's URL (`acme/api.git`).
    pub path: String,
}

/// What each field of a [`RepositorySource`] must be, for error messages.
pub const REPOSITORY_RULES: [(&str, &str); 4] = [
    (
        "repository",
        "the repository as your events name it (1 to 1024 bytes, as events allow), e.g. \"acme/api\"",
    ),
    ("bridge", tunnel::BRIDGE_NAME_RULE),
    (
        "source",
        "the name of a sources entry of the bridge's config (1-63 characters of letters, digits, '-', '_' or '.', not only dots)",
    ),
    (
        "path",
        "the repository's path under the source's url, e.g. \"acme/api.git\": 1 to 400 bytes of segments joined by single '/' (no leading one), each of letters, digits, '-', '_', '.' or '~' and neither '.' nor '..'",
    ),
];

impl RepositorySource {
    /// `bridge/source/path`: where the commits are read.
    pub fn place(&self) -> String {
        format!("{}/{}/{}", self.bridge, self.source, self.path)
    }

    /// The fields that break [`REPOSITORY_RULES`], each with its rule: the API and the
    /// dashboard's form check mappings alike.
    pub fn problems(&self) -> Vec<(&'static str, &'static str)> {
        let ok = [
            !self.repository.trim().is_empty()
                && self.repository.len() <= crate::signals::validate::MAX_SHORT,
            tunnel::is_valid_bridge_name(&self.bridge),
            tunnel::is_valid_resource_name(&self.source),
            is_repository_path(&self.path),
        ];
        REPOSITORY_RULES
            .into_iter()
            .zip(ok)
            .filter(|(_, ok)| !ok)
            .map(|(rule, _)| rule)
            .collect()
    }
}

fn is_repository_path(path: &str) -> bool {
    (1..=400).contains(&path.len())
        && path.split('/').all(|segment| {
            !segment.is_empty()
                && segment != "."
                && segment != ".."
                && segment
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~'))
        })
}

/// The commits listed for one deployment.
#[derive(Debug, Clone)]
pub struct ListedCommits {
    /// The previous deployment's commit they were listed from (`None`: no previous one).
    pub previous_sha: Option<String>,
    /// The commits, as `GET /v1/deployments/{id}/commits` answers them (a JSON array).
    pub commits: String,
    /// The repository they were listed from.
    pub repository: String,
    /// Where ([`RepositorySource::place`]): a list from an earlier mapping is not used.
    pub source: String,
}

/// True for what may be a commit id: 7 to 40 hex digits (SHA-1, abbreviated or whole), or 64
/// (SHA-256); never an option to git. Only whole ids can be fetched by id: an abbreviated one
/// must be on a branch or tag.
pub fn is_commit_id(sha: &str) -> bool {
    ((7..=40).contains(&sha.len()) || sha.len() == 64) && sha.bytes().all(|b| b.is_ascii_hexdigit())
}

impl Store {
    /// The org's repository mappings, by repository.
    pub async fn repository_sources(
        &self,
        org_id: i64,
    ) -> Result<Vec<RepositorySource>, StorageError> {
        let sql = "SELECT repository, bridge, source, path FROM repository_sources \
                   WHERE org_id = $1";
        let mut sources: Vec<RepositorySource> = on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| RepositorySource {
                repository: r.get(0),
                bridge: r.get(1),
                source: r.get(2),
                path: r.get(3),
            })
            .collect());
        // By bytes on both databases (PostgreSQL's ORDER BY follows its collation).
        sources.sort_by(|a, b| a.repository.cmp(&b.repository));
        Ok(sources)
    }

    /// The Git source mapped to `repository`, if any.
    pub async fn repository_source(
        &self,
        org_id: i64,
        repository: &str,
    ) -> Result<Option<RepositorySource>, StorageError> {
        let sql = "SELECT bridge, source, path FROM repository_sources \
                   WHERE org_id = $1 AND repository = $2";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
        .bind(org_id)
        .bind(repository)
        .fetch_optional(pool)
        .await?
        .map(|r| RepositorySource {
            repository: repository.to_string(),
            bridge: r.get(0),
            source: r.get(1),
            path: r.get(2),
        })))
    }

    /// Maps `source.repository` to its Git source (replacing an earlier mapping), and forgets
    /// the commits listed through the earlier one.
    pub async fn set_repository_source(
        &self,
        org_id: i64,
        source: &RepositorySource,
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO repository_sources (org_id, repository, bridge, source, path, updated_at) \
                   VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (org_id, repository) DO UPDATE SET \
                   bridge = excluded.bridge, source = excluded.source, path = excluded.path, \
                   updated_at = excluded.updated_at";
        on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(sql)
                .bind(org_id)
                .bind(&source.repository)
                .bind(&source.bridge)
                .bind(&source.source)
                .bind(&source.path)
                .bind(now_micros())
                .execute(&mut *tx)
                .await?;
            sqlx::query("DELETE FROM deployment_commits WHERE org_id = $1 AND repository = $2")
                .bind(org_id)
                .bind(&source.repository)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// Removes the mapping of `repository`, and the commits listed through it; false when
    /// there was none.
    pub async fn remove_repository_source(
        &self,
        org_id: i64,
        repository: &str,
    ) -> Result<bool, StorageError> {
        let removed = on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            let removed = sqlx::query("DELETE FROM repository_sources WHERE org_id = $1 AND repository = $2")
                .bind(org_id)
                .bind(repository)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            sqlx::query("DELETE FROM deployment_commits WHERE org_id = $1 AND repository = $2")
                .bind(org_id)
                .bind(repository)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            removed
        });
        Ok(removed > 0)
    }

    /// The newest successful (or status-less) deployment of `service` in `environment` before
    /// `(at, id)` that names a commit of `repository` (a `sha` that [`is_commit_id`]: one
    /// that names a branch, such as `main`, cannot start a list): where a deployment's commits
    /// start. Looks at the 200 newest such deployments of the 400 days before it.
    pub async fn previous_deployment(
        &self,
        org_id: i64,
        (service, environment, repository): (&str, &str, &str),
        (at, id): (i64, &str),
    ) -> Result<Option<StoredEvent>, StorageError> {
        let names_commit = |e: &StoredEvent| {
            let body: serde_json::Value = serde_json::from_str(&e.body).unwrap_or_default();
            let text = |k: &str| body.get(k).and_then(serde_json::Value::as_str);
            text("sha").is_some_and(is_commit_id) && text("repository") == Some(repository)
        };
        let scope = (service, environment);
        self.previous_deployment_by_hours(org_id, scope, (at, id), 200, names_commit)
            .await
    }

    /// The commits listed earlier for `deployment_id`.
    pub async fn listed_commits(
        &self,
        org_id: i64,
        deployment_id: &str,
    ) -> Result<Option<ListedCommits>, StorageError> {
        let sql = "SELECT previous_sha, commits, repository, source FROM deployment_commits \
                   WHERE org_id = $1 AND deployment_id = $2";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
        .bind(org_id)
        .bind(deployment_id)
        .fetch_optional(pool)
        .await?
        .map(|r| ListedCommits {
            previous_sha: r.get(0),
            commits: r.get(1),
            repository: r.get(2),
            source: r.get(3),
        })))
    }

    /// Keeps the commits listed for `deployment_id`, and when the oldest was made (µs).
    pub async fn keep_commits(
        &self,
        org_id: i64,
        deployment_id: &str,
        listed: &ListedCommits,
        first_commit_at: Option<i64>,
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO deployment_commits \
                   (org_id, deployment_id, repository, previous_sha, commits, first_commit_at, listed_at, source) \
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (org_id, deployment_id) DO UPDATE SET \
                   repository = excluded.repository, previous_sha = excluded.previous_sha, commits = excluded.commits, \
                   source = excluded.source, \
                   first_commit_at = excluded.first_commit_at, listed_at = excluded.listed_at";
        on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(deployment_id)
            .bind(&listed.repository)
            .bind(&listed.previous_sha)
            .bind(&listed.commits)
            .bind(first_commit_at)
            .bind(now_micros())
            .bind(&listed.source)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(())
    }

    /// When the oldest commit of each of the org's listed deployments was made (µs), by
    /// deployment id: the change lead time counts from it.
    pub async fn first_commit_times(
        &self,
        org_id: i64,
    ) -> Result<Vec<(String, i64)>, StorageError> {
        let sql = "SELECT d.deployment_id, d.first_commit_at FROM deployment_commits d \
                   JOIN repository_sources r ON r.org_id = d.org_id AND r.repository = d.repository \
                   WHERE d.org_id = $1 AND d.first_commit_at IS NOT NULL \
                   AND d.source = r.bridge || '/' || r.source || '/' || r.path";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect()))
    }

    /// The orgs that map at least one repository, and when any mapping last changed (µs):
    /// the commit lister's cue to look again.
    pub async fn repository_source_orgs(&self) -> Result<(Vec<i64>, i64), StorageError> {
        let (orgs, changed) = on_db!(&self.db, pool => (
            sqlx::query_scalar("SELECT DISTINCT org_id FROM repository_sources ORDER BY org_id")
                .fetch_all(pool)
                .await?,
            sqlx::query_scalar::<_, Option<i64>>("SELECT max(updated_at) FROM repository_sources")
                .fetch_one(pool)
                .await?,
        ));
        Ok((orgs, changed.unwrap_or(0)))
    }
}

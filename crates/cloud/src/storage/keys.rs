//! Credentials as an operator manages them: list an org's API keys, signal keys and bridge
//! tokens (never their secrets), revoke one, and record when each was last used.

use sqlx::Row;

use super::{Arg, Args, StorageError, Store, now_micros, on_db};

/// One credential as `list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// Its public id: `sigapi_…`, `sigkey_…` (the signal key itself: an address, not a
    /// secret) or `sigbrt_…`.
    pub id: String,
    /// Its label (a bridge token's is the bridge's name).
    pub name: Option<String>,
    /// When it was made (µs since the epoch).
    pub created_at: i64,
    /// When a server last read it for a request (µs), if ever.
    pub last_used_at: Option<i64>,
    /// When a bridge last opened a tunnel with it (µs), if ever: bridge tokens only (`bridge
    /// check` uses a token without opening one).
    pub connected_at: Option<i64>,
}

/// The kinds of credential an org has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credential {
    /// `sigapi_…`
    ApiKey,
    /// `sigkey_…`
    SignalKey,
    /// `sigbrt_…`
    BridgeToken,
}

impl Credential {
    /// The live credentials of this kind of `org_id`, oldest first.
    fn list_sql(self) -> &'static str {
        match self {
            Credential::ApiKey => {
                "SELECT 'sigapi_' || id, name, created_at, last_used_at, CAST(NULL AS BIGINT) \
                 FROM api_keys \
                 WHERE org_id = $1 AND revoked_at IS NULL ORDER BY created_at, id"
            }
            Credential::SignalKey => {
                "SELECT key, name, created_at, last_used_at, CAST(NULL AS BIGINT) FROM signal_keys \
                 WHERE org_id = $1 AND revoked_at IS NULL ORDER BY created_at, key"
            }
            Credential::BridgeToken => {
                "SELECT 'sigbrt_' || id, bridge_name, created_at, last_used_at, connected_at \
                 FROM bridge_tokens \
                 WHERE org_id = $1 AND revoked_at IS NULL ORDER BY created_at, id"
            }
        }
    }
}

/// An organisation as `cloud org list` shows it.
#[derive(Debug, Clone)]
pub struct OrgRow {
    /// Its slug, which the CLI and the API name it by.
    pub slug: String,
    /// Its id: what a bridge's audit records call `org`.
    pub id: i64,
    /// When it was made (µs).
    pub created_at: i64,
}

impl Store {
    /// Every organisation, by slug.
    pub async fn orgs(&self) -> Result<Vec<OrgRow>, StorageError> {
        let sql = "SELECT slug, id, created_at FROM orgs ORDER BY slug";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| OrgRow { slug: r.get(0), id: r.get(1), created_at: r.get(2) })
            .collect()))
    }

    /// The org's live credentials of one kind.
    pub async fn credentials(
        &self,
        org_id: i64,
        kind: Credential,
    ) -> Result<Vec<KeyInfo>, StorageError> {
        let sql = kind.list_sql();
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| KeyInfo {
                id: r.get(0),
                name: r.get(1),
                created_at: r.get(2),
                last_used_at: r.get(3),
                connected_at: r.get(4),
            })
            .collect()))
    }

    /// Revokes one API key (by its bare id) or signal key of the org; returns whether one was.
    pub async fn revoke_key(
        &self,
        org_id: i64,
        kind: Credential,
        id: &str,
    ) -> Result<bool, StorageError> {
        let sql = match kind {
            Credential::ApiKey => {
                "UPDATE api_keys SET revoked_at = $1 \
                 WHERE org_id = $2 AND id = $3 AND revoked_at IS NULL"
            }
            Credential::SignalKey => {
                "UPDATE signal_keys SET revoked_at = $1 \
                 WHERE org_id = $2 AND key = $3 AND revoked_at IS NULL"
            }
            Credential::BridgeToken => {
                "UPDATE bridge_tokens SET revoked_at = $1 \
                 WHERE org_id = $2 AND id = $3 AND revoked_at IS NULL"
            }
        };
        let args = vec![Arg::Int(now_micros()), Arg::Int(org_id), Arg::Text(id)];
        Ok(self.execute(sql, Args(args)).await? > 0)
    }

    /// Records that a credential was used now (`id` bare for API keys and bridge tokens).
    pub async fn touch(&self, kind: Credential, id: &str) -> Result<(), StorageError> {
        let sql = match kind {
            Credential::ApiKey => "UPDATE api_keys SET last_used_at = $1 WHERE id = $2",
            Credential::SignalKey => "UPDATE signal_keys SET last_used_at = $1 WHERE key = $2",
            Credential::BridgeToken => "UPDATE bridge_tokens SET last_used_at = $1 WHERE id = $2",
        };
        let args = vec![Arg::Int(now_micros()), Arg::Text(id)];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// Records that a bridge opened a tunnel with this token now.
    pub async fn bridge_token_connected(&self, id: &str) -> Result<(), StorageError> {
        let sql = "UPDATE bridge_tokens SET connected_at = $1 WHERE id = $2";
        let args = vec![Arg::Int(now_micros()), Arg::Text(id)];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// Records that a bridge presented this revoked token (its secret was right).
    pub async fn bridge_token_refused(&self, id: &str) -> Result<(), StorageError> {
        let sql = "UPDATE bridge_tokens SET refused_at = $1 WHERE id = $2";
        let args = vec![Arg::Int(now_micros()), Arg::Text(id)];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// The org's bridges refused since `since` (µs) for presenting a revoked token, with the
    /// latest refusal: (bridge name, refused at).
    pub async fn refused_bridges(
        &self,
        org_id: i64,
        since: i64,
    ) -> Result<Vec<(String, i64)>, StorageError> {
        let sql = "SELECT bridge_name, max(refused_at) FROM bridge_tokens \
                   WHERE org_id = $1 AND refused_at >= $2 GROUP BY bridge_name ORDER BY bridge_name";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(since)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
            .collect()))
    }

    /// How many API keys and signal keys are revoked, and the latest revocation (0 when
    /// none): a server that sees either change drops its cached keys, so a revocation made by
    /// another process (the CLI) takes effect within a poll. The count changes with every
    /// revocation, even one stamped earlier than the latest by a host whose clock is behind.
    pub async fn last_revocation(&self) -> Result<(i64, i64), StorageError> {
        let sql = "SELECT (SELECT count(revoked_at) FROM api_keys) + \
                   (SELECT count(revoked_at) FROM signal_keys), \
                   coalesce((SELECT max(revoked_at) FROM api_keys), 0), \
                   coalesce((SELECT max(revoked_at) FROM signal_keys), 0)";
        Ok(on_db!(&self.db, pool => {
            let row = sqlx::query(sql).fetch_one(pool).await?;
            (row.get::<i64, _>(0), row.get::<i64, _>(1).max(row.get::<i64, _>(2)))
        }))
    }
}

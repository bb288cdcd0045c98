//! Credentials as authentication reads and creates them: API keys, signal keys and bridge
//! tokens (stored as hashes of their secret parts), and the internal CA that signs bridges'
//! client certificates.

use sqlx::Row;

use super::{Arg, Args, Db, StorageError, Store, now_micros, on_db};

/// An API key as stored: only the hash of its secret part.
#[derive(Debug, Clone)]
pub struct ApiKeyRow {
    /// The org the key acts for.
    pub org_id: i64,
    /// SHA-256 of the key's secret part.
    pub secret_hash: Vec<u8>,
}

/// A bridge token as stored: only the hash of its secret part.
#[derive(Debug, Clone)]
pub struct BridgeTokenRow {
    /// The org the bridge belongs to.
    pub org_id: i64,
    /// The bridge this token opens tunnels for.
    pub bridge_name: String,
    /// SHA-256 of the token's secret part.
    pub secret_hash: Vec<u8>,
    /// Set once the token was revoked.
    pub revoked: bool,
}

impl Store {
    /// Stores a new signal key for an org.
    pub async fn create_signal_key(
        &self,
        org_id: i64,
        key: &str,
        name: Option<&str>,
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO signal_keys (key, org_id, name, created_at) VALUES ($1, $2, $3, $4)";
        let args = vec![
            Arg::Text(key),
            Arg::Int(org_id),
            Arg::OptText(name),
            Arg::Int(now_micros()),
        ];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// The org that owns a signal key.
    pub async fn signal_key_org(&self, key: &str) -> Result<Option<i64>, StorageError> {
        let sql = "SELECT org_id FROM signal_keys WHERE key = $1 AND revoked_at IS NULL";
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(key).fetch_optional(pool).await?
            .map(|r| r.get::<i64, _>(0))),
        )
    }

    /// Stores a new API key (its hash only).
    pub async fn create_api_key(
        &self,
        org_id: i64,
        id: &str,
        name: Option<&str>,
        secret_hash: &[u8],
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO api_keys (id, org_id, name, secret_hash, created_at) \
                   VALUES ($1, $2, $3, $4, $5)";
        let args = vec![
            Arg::Text(id),
            Arg::Int(org_id),
            Arg::OptText(name),
            Arg::Bytes(secret_hash),
            Arg::Int(now_micros()),
        ];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// Looks an API key up by its public id.
    pub async fn api_key(&self, id: &str) -> Result<Option<ApiKeyRow>, StorageError> {
        let sql = "SELECT org_id, secret_hash FROM api_keys WHERE id = $1 AND revoked_at IS NULL";
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(id).fetch_optional(pool).await?
            .map(|r| ApiKeyRow { org_id: r.get(0), secret_hash: r.get(1) })),
        )
    }

    /// Stores a new bridge token (its hash only).
    pub async fn create_bridge_token(
        &self,
        org_id: i64,
        id: &str,
        bridge_name: &str,
        secret_hash: &[u8],
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO bridge_tokens (id, org_id, bridge_name, secret_hash, created_at) \
                   VALUES ($1, $2, $3, $4, $5)";
        let args = vec![
            Arg::Text(id),
            Arg::Int(org_id),
            Arg::Text(bridge_name),
            Arg::Bytes(secret_hash),
            Arg::Int(now_micros()),
        ];
        self.execute(sql, Args(args)).await.map(drop)
    }

    /// Revokes every live token of a bridge, or only the one whose id is `only` (a rotation:
    /// the new token's instances stay connected); returns how many were revoked.
    pub async fn revoke_bridge_tokens(
        &self,
        org_id: i64,
        bridge_name: &str,
        only: Option<&str>,
    ) -> Result<u64, StorageError> {
        let mut args = vec![
            Arg::Int(now_micros()),
            Arg::Int(org_id),
            Arg::Text(bridge_name),
        ];
        let sql = match only {
            None => {
                "UPDATE bridge_tokens SET revoked_at = $1 \
                 WHERE org_id = $2 AND bridge_name = $3 AND revoked_at IS NULL"
            }
            Some(id) => {
                args.push(Arg::Text(id));
                "UPDATE bridge_tokens SET revoked_at = $1 \
                 WHERE org_id = $2 AND bridge_name = $3 AND revoked_at IS NULL AND id = $4"
            }
        };
        self.execute(sql, Args(args)).await
    }

    /// Looks a bridge token up by its public id.
    pub async fn bridge_token(&self, id: &str) -> Result<Option<BridgeTokenRow>, StorageError> {
        let sql = "SELECT org_id, bridge_name, secret_hash, revoked_at FROM bridge_tokens \
                   WHERE id = $1";
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(id).fetch_optional(pool).await?
            .map(|r| BridgeTokenRow {
                org_id: r.get(0),
                bridge_name: r.get(1),
                secret_hash: r.get(2),
                revoked: r.get::<Option<i64>, _>(3).is_some(),
            })),
        )
    }

    /// The internal CA: stores (`cert`, `key`) unless one is stored already, and returns the
    /// stored pair (the first process to start wins; the rest share its CA).
    pub async fn ca_get_or_insert(
        &self,
        cert: &str,
        key: &str,
    ) -> Result<(String, String), StorageError> {
        let sql = "INSERT INTO ca (id, cert_pem, key_pem, created_at) VALUES (1, $1, $2, $3) \
                   ON CONFLICT DO NOTHING";
        let args = vec![Arg::Text(cert), Arg::Text(key), Arg::Int(now_micros())];
        self.execute(sql, Args(args)).await?;
        let sql = "SELECT cert_pem, key_pem FROM ca WHERE id = 1";
        Ok(match &self.db {
            Db::Sqlite { write, .. } => {
                let r = sqlx::query(sql).fetch_one(write).await?;
                (r.get(0), r.get(1))
            }
            Db::Postgres(pool) => {
                let r = sqlx::query(sql).fetch_one(pool).await?;
                (r.get(0), r.get(1))
            }
        })
    }

    /// Tokens of a bridge: `(all, not revoked)`; `(0, 0)` for a bridge this org never had.
    pub async fn bridge_tokens_count(
        &self,
        org_id: i64,
        bridge_name: &str,
    ) -> Result<(i64, i64), StorageError> {
        let sql = "SELECT COUNT(*), COUNT(CASE WHEN revoked_at IS NULL THEN 1 END) \
            FROM bridge_tokens WHERE org_id = $1 AND bridge_name = $2";
        Ok(
            on_db!(&self.db, pool => sqlx::query_as(sql).bind(org_id).bind(bridge_name)
            .fetch_one(pool).await?),
        )
    }
}

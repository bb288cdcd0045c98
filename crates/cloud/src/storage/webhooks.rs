//! Org webhooks for Bridge release notifications, and their delivery queue: a notification is
//! a row per webhook, claimed by the sender when due and rescheduled with back-off until it is
//! delivered or given up. Rows survive restarts, so nothing queued is lost.

use sqlx::Row;

use super::{StorageError, Store, now_micros, on_db, on_writer};

/// An org's webhook. Its `Debug` hides the signing secret and the URL's path and query (a
/// chat service's webhook URL is itself a secret).
#[derive(Clone)]
pub struct Webhook {
    /// Row id.
    pub id: i64,
    /// The org's id.
    pub org_id: i64,
    /// The org's slug.
    pub org: String,
    /// Where notifications are POSTed.
    pub url: String,
    /// The signing secret (`whsec_…`).
    pub secret: String,
    /// The newest bridge release this webhook was told about (or that was current when it was
    /// made).
    pub release_seen: String,
    /// When it was made (µs).
    pub created_at: i64,
}

impl std::fmt::Debug for Webhook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Webhook")
            .field("id", &self.id)
            .field("org_id", &self.org_id)
            .field("org", &self.org)
            .field("url", &redacted_url(&self.url))
            .field("secret", &"***")
            .field("release_seen", &self.release_seen)
            .field("created_at", &self.created_at)
            .finish()
    }
}

/// `url`'s scheme and host, the rest shown as `/***`.
fn redacted_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(u) => format!("{}://{}/***", u.scheme(), u.host_str().unwrap_or_default()),
        Err(_) => "***".to_string(),
    }
}

/// A notification to deliver (or delivered).
#[derive(Debug, Clone)]
pub struct Delivery {
    /// Row id.
    pub id: i64,
    /// The webhook's id.
    pub webhook_id: i64,
    /// The JSON body.
    pub body: String,
    /// Attempts made so far.
    pub attempts: i64,
    /// When it was delivered (µs).
    pub delivered_at: Option<i64>,
    /// Next attempt (µs); `None` once delivered or given up.
    pub next_attempt_at: Option<i64>,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// When it was queued (µs).
    pub created_at: i64,
}

const WEBHOOK_COLUMNS: &str =
    "w.id, w.org_id, o.slug, w.url, w.secret, w.release_seen, w.created_at";
const DELIVERY_COLUMNS: &str =
    "id, webhook_id, body, attempts, delivered_at, next_attempt_at, last_error, created_at";

macro_rules! webhook_from {
    ($r:expr) => {
        Webhook {
            id: $r.get(0),
            org_id: $r.get(1),
            org: $r.get(2),
            url: $r.get(3),
            secret: $r.get(4),
            release_seen: $r.get(5),
            created_at: $r.get(6),
        }
    };
}

macro_rules! delivery_from {
    ($r:expr) => {
        Delivery {
            id: $r.get(0),
            webhook_id: $r.get(1),
            body: $r.get(2),
            attempts: $r.get(3),
            delivered_at: $r.get(4),
            next_attempt_at: $r.get(5),
            last_error: $r.get(6),
            created_at: $r.get(7),
        }
    };
}

impl Store {
    /// Sets the org's webhook, replacing any previous one (whose queued deliveries stop).
    pub async fn set_webhook(
        &self,
        org_id: i64,
        url: &str,
        secret: &str,
        release: &str,
    ) -> Result<i64, StorageError> {
        let now = now_micros();
        let stop = "UPDATE webhook_deliveries SET next_attempt_at = NULL, last_error = 'webhook replaced' \
                    WHERE next_attempt_at IS NOT NULL AND webhook_id IN \
                    (SELECT id FROM webhooks WHERE org_id = $1 AND removed_at IS NULL)";
        let remove = "UPDATE webhooks SET removed_at = $1 WHERE org_id = $2 AND removed_at IS NULL";
        let insert = "INSERT INTO webhooks (org_id, url, secret, release_seen, created_at) \
                      VALUES ($1, $2, $3, $4, $5) RETURNING id";
        // One transaction: a unique index allows one live webhook per org, so two admins
        // saving at once end with one of the two, never both.
        Ok(on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query(stop).bind(org_id).execute(&mut *tx).await?;
            sqlx::query(remove).bind(now).bind(org_id).execute(&mut *tx).await?;
            let id = sqlx::query(insert)
                .bind(org_id)
                .bind(url)
                .bind(secret)
                .bind(release)
                .bind(now)
                .fetch_one(&mut *tx)
                .await?
                .get::<i64, _>(0);
            tx.commit().await?;
            id
        }))
    }

    /// Removes the org's webhook; its URL when there was one (for the audit record).
    pub async fn remove_webhook(&self, org_id: i64) -> Result<Option<String>, StorageError> {
        let now = now_micros();
        let stop = "UPDATE webhook_deliveries SET next_attempt_at = NULL, last_error = 'webhook removed' \
                    WHERE next_attempt_at IS NOT NULL AND webhook_id IN \
                    (SELECT id FROM webhooks WHERE org_id = $1 AND removed_at IS NULL)";
        on_writer!(&self.db, pool => sqlx::query(stop).bind(org_id).execute(pool).await?.rows_affected());
        let sql = "UPDATE webhooks SET removed_at = $1 WHERE org_id = $2 AND removed_at IS NULL \
                   RETURNING url";
        Ok(on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(now)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
            .map(|r| r.get::<String, _>(0))))
    }

    /// Every org's live webhook.
    pub async fn webhooks(&self) -> Result<Vec<Webhook>, StorageError> {
        let sql = format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks w JOIN orgs o ON o.id = w.org_id \
             WHERE w.removed_at IS NULL ORDER BY w.id"
        );
        Ok(
            on_db!(&self.db, pool => sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| webhook_from!(r))
            .collect()),
        )
    }

    /// The org's live webhook.
    pub async fn webhook(&self, org_id: i64) -> Result<Option<Webhook>, StorageError> {
        let sql = format!(
            "SELECT {WEBHOOK_COLUMNS} FROM webhooks w JOIN orgs o ON o.id = w.org_id \
             WHERE w.org_id = $1 AND w.removed_at IS NULL"
        );
        Ok(
            on_db!(&self.db, pool => sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(org_id)
            .fetch_optional(pool)
            .await?
            .map(|r| webhook_from!(r))),
        )
    }

    /// Records that a webhook was told about `release`.
    pub async fn webhook_release_seen(&self, id: i64, release: &str) -> Result<(), StorageError> {
        let sql = "UPDATE webhooks SET release_seen = $1 WHERE id = $2";
        on_writer!(&self.db, pool => sqlx::query(sql).bind(release).bind(id).execute(pool).await?.rows_affected());
        Ok(())
    }

    /// Queues a notification for a webhook, due now, unless one with the same `dedup` key was
    /// queued for it before, or delivered to an earlier webhook of its org (a receiver whose
    /// webhook was set again, to rotate its secret, hears of nothing twice); true when queued.
    /// One that an earlier webhook never got (it was replaced first) goes to this one.
    pub async fn queue_delivery(
        &self,
        webhook_id: i64,
        dedup: &str,
        body: &str,
    ) -> Result<bool, StorageError> {
        let sql = "INSERT INTO webhook_deliveries (webhook_id, dedup, body, next_attempt_at, created_at) \
                   SELECT $1, $2, $3, $4, $4 WHERE NOT EXISTS (SELECT 1 FROM webhook_deliveries d \
                   JOIN webhooks w ON w.id = d.webhook_id \
                   WHERE w.org_id = (SELECT org_id FROM webhooks WHERE id = $1) \
                   AND d.dedup = $2 AND d.delivered_at IS NOT NULL) \
                   ON CONFLICT (webhook_id, dedup) DO NOTHING";
        let n = on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(webhook_id)
            .bind(dedup)
            .bind(body)
            .bind(now_micros())
            .execute(pool)
            .await?
            .rows_affected());
        Ok(n > 0)
    }

    /// Deliveries due now, oldest first.
    /// `skip`: webhooks whose deliveries wait (the notifier has enough attempts to them under
    /// way), so that one webhook's backlog does not fill `limit`.
    pub async fn due_deliveries(
        &self,
        limit: i64,
        skip: &[i64],
    ) -> Result<Vec<Delivery>, StorageError> {
        // Row ids, numbers the notifier holds: nothing a caller wrote goes into the text.
        let skipped: String = skip
            .iter()
            .map(|id| format!(" AND webhook_id <> {id}"))
            .collect();
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE next_attempt_at IS NOT NULL AND next_attempt_at <= $1{skipped} \
             ORDER BY next_attempt_at LIMIT $2"
        );
        Ok(
            on_db!(&self.db, pool => sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(now_micros())
            .bind(limit)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| delivery_from!(r))
            .collect()),
        )
    }

    /// Claims a due delivery for one attempt: moves its next attempt `lease` µs ahead, if it is
    /// still due at `due` (the time read). False when another process claimed it first, so
    /// several `cloud` processes on one database never send the same delivery at once.
    pub async fn claim_delivery(
        &self,
        id: i64,
        due: i64,
        lease: i64,
    ) -> Result<bool, StorageError> {
        let sql = "UPDATE webhook_deliveries SET next_attempt_at = $1 \
                   WHERE id = $2 AND next_attempt_at = $3";
        let n = on_writer!(&self.db, pool => sqlx::query(sql)
            .bind(now_micros() + lease)
            .bind(id)
            .bind(due)
            .execute(pool)
            .await?
            .rows_affected());
        Ok(n == 1)
    }

    /// Records an attempt: delivered (`error` None), or failed and due again at `retry_at`
    /// (None: given up).
    pub async fn delivery_attempted(
        &self,
        id: i64,
        error: Option<&str>,
        retry_at: Option<i64>,
    ) -> Result<(), StorageError> {
        match error {
            None => {
                let sql = "UPDATE webhook_deliveries SET attempts = attempts + 1, delivered_at = $1, \
                           next_attempt_at = NULL, last_error = NULL WHERE id = $2";
                on_writer!(&self.db, pool => sqlx::query(sql)
                    .bind(now_micros())
                    .bind(id)
                    .execute(pool)
                    .await?
                    .rows_affected());
            }
            // A delivery stopped meanwhile (its webhook removed or replaced: no next attempt)
            // keeps that reason and stays stopped.
            Some(error) => {
                let sql = "UPDATE webhook_deliveries SET attempts = attempts + 1, \
                           next_attempt_at = CASE WHEN next_attempt_at IS NULL THEN NULL ELSE $1 END, \
                           last_error = CASE WHEN next_attempt_at IS NULL THEN last_error ELSE $2 END \
                           WHERE id = $3";
                on_writer!(&self.db, pool => sqlx::query(sql)
                    .bind(retry_at)
                    .bind(error)
                    .bind(id)
                    .execute(pool)
                    .await?
                    .rows_affected());
            }
        }
        Ok(())
    }

    /// The org's newest deliveries, newest first.
    pub async fn recent_deliveries(
        &self,
        org_id: i64,
        limit: i64,
    ) -> Result<Vec<Delivery>, StorageError> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM webhook_deliveries \
             WHERE webhook_id IN (SELECT id FROM webhooks WHERE org_id = $1) \
             ORDER BY id DESC LIMIT $2"
        );
        Ok(
            on_db!(&self.db, pool => sqlx::query(sqlx::AssertSqlSafe(sql.clone()))
            .bind(org_id)
            .bind(limit)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(|r| delivery_from!(r))
            .collect()),
        )
    }
}

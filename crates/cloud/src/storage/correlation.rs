//! What correlation reads: the deployments and changes around an alert, when an alert first
//! fired, the org's declared service dependencies, and confirmed causes.

use sqlx::Row;

use super::records::event_from_row;
use super::{Actor, StorageError, Store, StoredEvent, now_micros, on_db, on_writer};

/// Most candidates read for one alert: the newest win.
pub const MAX_CANDIDATES: i64 = 2_000;

/// How far back an earlier firing of an alert is looked for (by dedupKey, or service and title).
pub const TITLE_LOOKBACK_MICROS: i64 = 7 * 86_400_000_000;

impl Store {
    /// The org's deployments and changes in `[from, to]` (µs), in `environment` (any when
    /// `None`), newest first, at most [`MAX_CANDIDATES`].
    pub async fn changes_between(
        &self,
        org_id: i64,
        environment: Option<&str>,
        from: i64,
        to: i64,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        // One environment: from the record of deployments and changes by hour.
        if let Some(env) = environment {
            let limit = MAX_CANDIDATES as usize;
            return self.changes_by_hours(org_id, env, (from, to), limit).await;
        }
        let any_env = "SELECT id, occurred_at, received_at, body FROM events \
                       WHERE org_id = $1 AND type IN ('deployment', 'change') \
                       AND occurred_at >= $2 AND occurred_at <= $3 \
                       ORDER BY occurred_at DESC, id DESC LIMIT $4";
        Ok(on_db!(&self.db, pool => sqlx::query(any_env)
            .bind(org_id)
            .bind(from)
            .bind(to)
            .bind(MAX_CANDIDATES)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(event_from_row)
            .collect()))
    }

    /// When the org's first alert with `dedup_key` in `[from, before)` (µs) fired, if one did.
    pub async fn first_alert_by_key(
        &self,
        org_id: i64,
        dedup_key: &str,
        from: i64,
        before: i64,
    ) -> Result<Option<i64>, StorageError> {
        let sql = "SELECT min(occurred_at) FROM events WHERE org_id = $1 AND dedup_key = $2 \
                   AND occurred_at >= $3 AND occurred_at < $4 AND type = 'alert'";
        self.time_by_key(sql, org_id, dedup_key, (from, before))
            .await
    }

    /// The one time `sql` selects with `$1` the org, `$2` the dedupKey and `$3`, `$4` the span.
    async fn time_by_key(
        &self,
        sql: &'static str,
        org_id: i64,
        dedup_key: &str,
        (from, before): (i64, i64),
    ) -> Result<Option<i64>, StorageError> {
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(dedup_key)
            .bind(from)
            .bind(before)
            .fetch_one(pool)
            .await?
            .get::<Option<i64>, _>(0)))
    }

    /// When the incident of an alert at `before` with `dedup_key` began: the first triggered
    /// alert of that key in `[from, before)` (µs) after the key's latest resolve there (an
    /// alert that fires and resolves every day is a new incident each day).
    pub async fn incident_start(
        &self,
        org_id: i64,
        dedup_key: &str,
        from: i64,
        before: i64,
    ) -> Result<Option<i64>, StorageError> {
        let sql = "SELECT min(occurred_at) FROM events WHERE org_id = $1 AND dedup_key = $2 \
                   AND type = 'alert' AND status = 'triggered' AND occurred_at < $4 \
                   AND occurred_at > COALESCE((SELECT max(occurred_at) FROM events \
                   WHERE org_id = $1 AND dedup_key = $2 AND type = 'alert' \
                   AND status = 'resolved' AND occurred_at >= $3 AND occurred_at < $4), $3 - 1)";
        self.time_by_key(sql, org_id, dedup_key, (from, before))
            .await
    }

    /// Up to `limit` of the org's alerts of `service` in `[from, before)` (µs) after `after`
    /// (the `(occurred_at, id)` of the last one read, or `(from, "")` for the first page),
    /// oldest first: the caller matches titles (alerts without a `dedupKey`) a page at a time.
    pub async fn alerts_of_service(
        &self,
        org_id: i64,
        service: &str,
        after: (i64, &str),
        before: i64,
        limit: i64,
    ) -> Result<Vec<StoredEvent>, StorageError> {
        let sql = "SELECT id, occurred_at, received_at, body FROM events \
                   WHERE org_id = $1 AND (occurred_at > $2 OR (occurred_at = $2 AND id > $5)) \
                   AND occurred_at < $3 AND type = 'alert' AND service = $4 \
                   ORDER BY occurred_at, id LIMIT $6";
        Ok(on_db!(&self.db, pool => sqlx::query(sql)
            .bind(org_id)
            .bind(after.0)
            .bind(before)
            .bind(service)
            .bind(after.1)
            .bind(limit)
            .fetch_all(pool)
            .await?
            .into_iter()
            .map(event_from_row)
            .collect()))
    }

    /// The services `service` depends on, by name.
    pub async fn dependencies(
        &self,
        org_id: i64,
        service: &str,
    ) -> Result<Vec<String>, StorageError> {
        let sql = "SELECT depends_on FROM service_dependencies \
                   WHERE org_id = $1 AND service = $2";
        let mut names: Vec<String> = on_db!(&self.db, pool => sqlx::query_scalar(sql)
            .bind(org_id)
            .bind(service)
            .fetch_all(pool)
            .await?);
        // Sorted here, by bytes, as the PUT answers: PostgreSQL's ORDER BY would follow the
        // database's collation (`Zeta` after `alpha` under en_US), SQLite's never does.
        names.sort();
        Ok(names)
    }

    /// Replaces the services `service` depends on.
    pub async fn set_dependencies(
        &self,
        org_id: i64,
        service: &str,
        depends_on: &[String],
    ) -> Result<(), StorageError> {
        on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            sqlx::query("DELETE FROM service_dependencies WHERE org_id = $1 AND service = $2")
                .bind(org_id)
                .bind(service)
                .execute(&mut *tx)
                .await?;
            for d in depends_on {
                sqlx::query("INSERT INTO service_dependencies (org_id, service, depends_on) VALUES ($1, $2, $3)")
                    .bind(org_id)
                    .bind(service)
                    .bind(d)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// Records that `deployment_id` caused `alert_id` (replacing an earlier confirmation),
    /// audited as `actor`'s; the same confirmation again changes and audits nothing.
    pub async fn confirm_cause(
        &self,
        org_id: i64,
        alert_id: &str,
        deployment_id: &str,
        actor: &Actor,
    ) -> Result<(), StorageError> {
        let sql = "INSERT INTO alert_causes (org_id, alert_id, deployment_id, confirmed_at) \
                   VALUES ($1, $2, $3, $4) ON CONFLICT (org_id, alert_id) \
                   DO UPDATE SET deployment_id = excluded.deployment_id, confirmed_at = excluded.confirmed_at \
                   WHERE alert_causes.deployment_id <> excluded.deployment_id";
        let object = cause_object(alert_id, deployment_id);
        let action = "alert.confirm_cause";
        // The change and its audit entry commit together: the same confirmation again changes
        // nothing and is not audited again, so a retry must not find the one without the other.
        let changed = on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            let at = now_micros();
            let changed = sqlx::query(sql)
                .bind(org_id)
                .bind(alert_id)
                .bind(deployment_id)
                .bind(at)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            if changed > 0 {
                sqlx::query(super::audit::AUDIT_INSERT)
                    .bind(org_id)
                    .bind(at)
                    .bind(&actor.who)
                    .bind(&actor.address)
                    .bind(action)
                    .bind(&object)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            changed
        });
        if changed > 0 {
            super::audit::log_audit(org_id, actor, action, &object);
        }
        Ok(())
    }

    /// Withdraws the confirmed cause of `alert_id` (audited as `actor`'s): the deployment it
    /// named, `None` when there was none.
    pub async fn withdraw_cause(
        &self,
        org_id: i64,
        alert_id: &str,
        actor: &Actor,
    ) -> Result<Option<String>, StorageError> {
        let sql = "DELETE FROM alert_causes WHERE org_id = $1 AND alert_id = $2 \
                   RETURNING deployment_id";
        let action = "alert.withdraw_cause";
        // As in confirm_cause: a withdrawal whose audit entry failed is not made, so that the
        // caller's retry finds the cause still there and withdraws it audited.
        let withdrawn: Option<String> = on_writer!(&self.db, pool => {
            let mut tx = pool.begin().await?;
            let withdrawn: Option<String> = sqlx::query_scalar(sql)
                .bind(org_id)
                .bind(alert_id)
                .fetch_optional(&mut *tx)
                .await?;
            if let Some(deployment_id) = &withdrawn {
                sqlx::query(super::audit::AUDIT_INSERT)
                    .bind(org_id)
                    .bind(now_micros())
                    .bind(&actor.who)
                    .bind(&actor.address)
                    .bind(action)
                    .bind(cause_object(alert_id, deployment_id))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            withdrawn
        });
        if let Some(deployment_id) = &withdrawn {
            super::audit::log_audit(
                org_id,
                actor,
                action,
                &cause_object(alert_id, deployment_id),
            );
        }
        Ok(withdrawn)
    }

    /// The deployment confirmed as the cause of `alert_id`, if any.
    pub async fn cause_of(
        &self,
        org_id: i64,
        alert_id: &str,
    ) -> Result<Option<String>, StorageError> {
        let sql = "SELECT deployment_id FROM alert_causes WHERE org_id = $1 AND alert_id = $2";
        Ok(on_db!(&self.db, pool => sqlx::query_scalar(sql)
            .bind(org_id)
            .bind(alert_id)
            .fetch_optional(pool)
            .await?))
    }

    /// Every deployment (id) confirmed as the cause of some alert of the org.
    pub async fn confirmed_causes(&self, org_id: i64) -> Result<Vec<String>, StorageError> {
        let sql = "SELECT DISTINCT deployment_id FROM alert_causes WHERE org_id = $1";
        Ok(on_db!(&self.db, pool => sqlx::query_scalar(sql)
            .bind(org_id)
            .fetch_all(pool)
            .await?))
    }
}

/// How the audit names a confirmed or withdrawn cause: `ALERT_ID <- DEPLOYMENT_ID`.
fn cause_object(alert_id: &str, deployment_id: &str) -> String {
    format!("{alert_id} <- {deployment_id}")
}

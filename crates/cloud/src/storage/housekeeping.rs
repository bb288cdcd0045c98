//! What the store deletes as it ages: `Idempotency-Key` answers older than [`IDEMPOTENCY_KEPT`]
//! (a sender retries within minutes; kept for ever, the table would grow with every request
//! that carries a key).

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{StorageError, Store, now_micros, on_writer};

/// How long an `Idempotency-Key`'s first answer is kept (docs/api.md).
pub const IDEMPOTENCY_KEPT: Duration = Duration::from_secs(24 * 3600);
/// How often old keys are looked for.
const EVERY: Duration = Duration::from_secs(600);
/// Keys deleted per statement: a short write each, so that ingestion never waits long.
const BATCH: i64 = 5_000;

impl Store {
    /// Deletes old idempotency keys at start, then every few minutes until `stop` (a `serve`
    /// restarted more often than that still prunes).
    pub async fn keep_tidy(self, stop: CancellationToken) {
        loop {
            let before = now_micros() - IDEMPOTENCY_KEPT.as_micros() as i64;
            let pruned = tokio::select! {
                () = stop.cancelled() => return,
                pruned = self.prune_idempotency(before) => pruned,
            };
            match pruned {
                Ok(0) => {}
                Ok(n) => tracing::debug!(keys = n, "old idempotency keys deleted"),
                Err(e) => self.background_failure(&e, "cannot delete old idempotency keys"),
            }
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(EVERY) => {}
            }
        }
    }

    /// Deletes the idempotency keys stored before `before` (µs), in short batches; how many.
    pub async fn prune_idempotency(&self, before: i64) -> Result<u64, StorageError> {
        let sql = "DELETE FROM idempotency WHERE (signal_key, idem_key) IN \
                   (SELECT signal_key, idem_key FROM idempotency WHERE created_at < $1 LIMIT $2)";
        let mut total = 0;
        loop {
            let deleted = on_writer!(&self.db, pool => sqlx::query(sql)
                .bind(before)
                .bind(BATCH)
                .execute(pool)
                .await?
                .rows_affected());
            total += deleted;
            if deleted < BATCH as u64 {
                return Ok(total);
            }
        }
    }
}

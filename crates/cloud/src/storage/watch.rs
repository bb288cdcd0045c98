//! Telling the operator when the database stops answering and when it answers again, with
//! why: requests only see a pool that timed out, which names neither the database nor the
//! cause (a refused connection, a failed login, a full disk).

use std::time::Duration;

use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use super::{Db, Store, on_db};

/// How often the database is asked.
const EVERY: Duration = Duration::from_secs(5);
/// How long a question or a new connection may take.
const WITHIN: Duration = Duration::from_secs(3);

impl Store {
    /// Asks the database every few seconds until `stop`; logs once when it stops answering
    /// (the cause, read by a connection of its own, and where it is) and once when it answers
    /// again.
    pub async fn watch(self, stop: CancellationToken) {
        let mut answering = true;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep(EVERY) => {}
            }
            let answer = tokio::select! {
                () = stop.cancelled() => return,
                answer = self.question() => answer,
            };
            self.answering
                .store(answer.is_ok(), std::sync::atomic::Ordering::Relaxed);
            match (answer, answering) {
                (Err(cause), true) => {
                    answering = false;
                    tracing::error!(database = %self.target, cause = %cause, "the database does not answer: requests that need it get 503 until it does; check that it runs and that this host reaches it");
                }
                (Ok(()), false) => {
                    answering = true;
                    tracing::info!(database = %self.target, "the database answers again");
                }
                _ => {}
            }
        }
    }

    /// One question to the database; on PostgreSQL a pool that times out is asked why by a
    /// connection of the watch's own. A database that takes that connection answers: the
    /// pool's connections were only busy.
    async fn question(&self) -> Result<(), String> {
        let asked = async {
            on_db!(&self.db, pool => sqlx::query("SELECT 1").execute(pool).await.map(drop))
        };
        let cause = match tokio::time::timeout(WITHIN, asked).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {} s", WITHIN.as_secs()),
        };
        let Db::Postgres(pool) = &self.db else {
            return Err(cause);
        };
        let options = pool.connect_options();
        match tokio::time::timeout(WITHIN, sqlx::PgConnection::connect_with(&options)).await {
            Ok(Ok(connection)) => {
                let _ = connection.close().await;
                Ok(())
            }
            Ok(Err(e)) => Err(format!("a new connection fails: {e}")),
            Err(_) => Err(format!(
                "a new connection is not made within {} s",
                WITHIN.as_secs()
            )),
        }
    }
}

//! Durable storage on SQLite (embedded default) or PostgreSQL.
//!
//! Both backends share one schema shape and the same SQL text: queries use `$1`-style
//! parameters, which SQLite also accepts, and the [`on_db!`] macro expands each query once per
//! backend so the compiler checks both. Event writes go through the group-commit
//! [`writer`](self::writer): many concurrent requests share one transaction and one fsync
//! (on SQLite, a dedicated thread with its own connection: [`sqlite_writer`](self::sqlite_writer)).

mod audit;
mod backend;
mod change_hours;
mod checks;
mod correlation;
mod credentials;
mod error;
mod group;
mod housekeeping;
mod ids;
mod keys;
mod migrations;
mod records;
mod repositories;
mod sqlite_writer;
mod users;
mod watch;
mod webhooks;
mod writer;

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row};

pub use audit::{Actor, AuditEntry};
use backend::private_files;
pub use backend::{Backend, OpenMode, ServeLock, redact_url};
pub use correlation::{MAX_CANDIDATES, TITLE_LOOKBACK_MICROS};
pub use credentials::{ApiKeyRow, BridgeTokenRow};
pub use error::StorageError;
pub use group::{InsertOutcome, WriteBatch};
pub use keys::{Credential, KeyInfo};
pub use records::{EventQuery, NewEvent, StoredEvent};
pub use repositories::{ListedCommits, REPOSITORY_RULES, RepositorySource, is_commit_id};
pub use users::{Role, Session, User};
pub use webhooks::{Delivery, Webhook};

use crate::metrics::Metrics;

use checks::{APPLIED, not_behind, postgres_not_foreign, sqlite_created, sqlite_not_foreign};
use migrations::{POSTGRES_MIGRATIONS, SQLITE_MIGRATIONS};

/// The two connection pools, one per backend.
#[derive(Clone)]
pub(crate) enum Db {
    Sqlite { read: SqlitePool, write: SqlitePool },
    Postgres(PgPool),
}

/// Runs the same query code against whichever backend is open.
macro_rules! on_db {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            crate::storage::Db::Sqlite { read: $pool, .. } => $body,
            crate::storage::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_db;

/// Runs `$body` with `$pool` bound to the pool that writes (SQLite's single writer).
macro_rules! on_writer {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            crate::storage::Db::Sqlite { write: $pool, .. } => $body,
            crate::storage::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use on_writer;

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Db,
    writer: writer::WriterHandle,
    ids: std::sync::Arc<ids::EventIds>,
    /// The database as logs name it: SQLite's file, PostgreSQL's URL without its password.
    target: std::sync::Arc<str>,
    /// Whether the database answered [`Store::watch`]'s last question.
    answering: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Store {
    /// Where the data is: SQLite's file, or the PostgreSQL URL without its password.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Logs a background task's failure to use the database (`what` failed; it will retry):
    /// a warning, or at debug level while the database is known not to answer, since
    /// [`Store::watch`] has said so once, with the cause, and the same warning from every task
    /// every few seconds would bury it.
    pub fn background_failure(&self, cause: &dyn std::fmt::Display, what: &str) {
        if self.answering.load(std::sync::atomic::Ordering::Relaxed) {
            tracing::warn!(cause = %cause, "{what}; will retry");
        } else {
            tracing::debug!(cause = %cause, "{what}; will retry");
        }
    }

    /// Opens and migrates the database (creating it only with [`OpenMode::CreateIfMissing`]),
    /// and starts the group-commit writer.
    pub async fn open(
        backend: &Backend,
        metrics: Metrics,
        mode: OpenMode,
    ) -> Result<Store, StorageError> {
        match (backend, mode) {
            (Backend::Sqlite(path), OpenMode::MustExist) => sqlite_created(path).await?,
            (Backend::Sqlite(path), OpenMode::CreateIfMissing) => sqlite_not_foreign(path).await?,
            (Backend::Postgres(_), _) => {}
        }
        let db = match backend {
            Backend::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| StorageError::Open {
                        target: dir.display().to_string(),
                        cause: sqlx::Error::Io(e),
                    })?;
                }
                private_files(path).map_err(|e| StorageError::Open {
                    target: path.display().to_string(),
                    cause: sqlx::Error::Io(e),
                })?;
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true)
                    .page_size(16_384);
                let open_err = |cause| StorageError::Open {
                    target: path.display().to_string(),
                    cause,
                };
                let write = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options.clone())
                    .await
                    .map_err(open_err)?;
                if mode == OpenMode::MustExist {
                    let applied = sqlx::query_scalar(APPLIED).fetch_all(&write).await?;
                    not_behind(&SQLITE_MIGRATIONS, &applied, &path.display().to_string())?;
                }
                SQLITE_MIGRATIONS.run(&write).await?;
                let read = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.read_only(true))
                    .await
                    .map_err(open_err)?;
                Db::Sqlite { read, write }
            }
            Backend::Postgres(url) => {
                let open_err = |cause| StorageError::Open {
                    target: redact_url(url),
                    cause,
                };
                // The server's notices ("relation … already exists, skipping" at every
                // migration check) are not for operators: warnings and errors only.
                let options = PgConnectOptions::from_str(url)
                    .map_err(open_err)?
                    .options([("client_min_messages", "warning")]);
                // One connection first: the pool would say only that it timed out, not that
                // the server refused the connection, the password or the database.
                let no_answer = || {
                    let e = std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 5 s");
                    open_err(sqlx::Error::Io(e))
                };
                tokio::time::timeout(Duration::from_secs(5), options.connect())
                    .await
                    .map_err(|_| no_answer())?
                    .map_err(open_err)?
                    .close()
                    .await
                    .map_err(open_err)?;
                let pool = PgPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await
                    .map_err(open_err)?;
                // A search_path naming no existing schema would fail the first migration with
                // "no schema has been selected to create in": say which, and what to do.
                let (schema, search_path): (Option<String>, String) =
                    sqlx::query_as("SELECT current_schema(), current_setting('search_path')")
                        .fetch_one(&pool)
                        .await?;
                let Some(schema) = schema else {
                    return Err(StorageError::NoSchema(format!(
                        "no schema of the search_path {search_path:?} exists in {}: create it (CREATE SCHEMA name;) or set another in --database-url (options=-c search_path=name)",
                        redact_url(url)
                    )));
                };
                postgres_not_foreign(&pool, &schema, &redact_url(url), mode, &POSTGRES_MIGRATIONS)
                    .await?;
                if mode == OpenMode::MustExist {
                    let applied = sqlx::query_scalar(APPLIED).fetch_all(&pool).await?;
                    not_behind(&POSTGRES_MIGRATIONS, &applied, &redact_url(url))?;
                }
                POSTGRES_MIGRATIONS.run(&pool).await?;
                Db::Postgres(pool)
            }
        };
        let sqlite_file = match backend {
            Backend::Sqlite(path) => Some(path.clone()),
            Backend::Postgres(_) => None,
        };
        let ids = match &db {
            Db::Sqlite { write, .. } => {
                let last: i64 = sqlx::query_scalar("SELECT coalesce(max(seq), 0) FROM events")
                    .fetch_one(write)
                    .await?;
                ids::EventIds::sequence_from(last + 1)
            }
            Db::Postgres(_) => ids::EventIds::per_org(),
        };
        let writer = writer::spawn(db.clone(), sqlite_file, metrics);
        let target = match backend {
            Backend::Sqlite(path) => path.display().to_string(),
            Backend::Postgres(url) => redact_url(url),
        };
        Ok(Store {
            db,
            writer,
            ids: std::sync::Arc::new(ids),
            target: target.into(),
            answering: std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true)),
        })
    }

    /// Stops the writer after it has committed everything queued, then closes the pools.
    pub async fn close(self) {
        self.writer.shutdown().await;
        match self.db {
            Db::Sqlite { read, write } => {
                read.close().await;
                write.close().await;
            }
            Db::Postgres(pool) => pool.close().await,
        }
    }

    /// True when the events table answers a read within 2 s (readiness): not just that a
    /// connection opens, since a database that lost its tables, or hangs, serves nothing.
    pub async fn ping(&self) -> bool {
        let read = async {
            on_db!(&self.db, pool => sqlx::query("SELECT 1 FROM events LIMIT 1").execute(pool).await.is_ok())
        };
        tokio::time::timeout(std::time::Duration::from_secs(2), read)
            .await
            .unwrap_or(false)
    }

    /// A new event id of org `org_id`, and on SQLite the sequence number it carries (see
    /// [`ids`]).
    pub fn new_event_id(&self, org_id: i64) -> (String, Option<i64>) {
        self.ids.next(org_id)
    }

    /// Queues a batch for the group commit and waits until it is durably committed.
    pub async fn insert(&self, batch: WriteBatch) -> Result<InsertOutcome, StorageError> {
        self.writer.submit(batch).await
    }

    /// Creates an organisation; fails with [`StorageError::Exists`] when the slug is taken.
    pub async fn create_org(&self, slug: &str) -> Result<i64, StorageError> {
        let sql = "INSERT INTO orgs (slug, created_at) VALUES ($1, $2) \
                   ON CONFLICT (slug) DO NOTHING RETURNING id";
        let now = now_micros();
        let row = match &self.db {
            Db::Sqlite { write, .. } => sqlx::query(sql)
                .bind(slug)
                .bind(now)
                .fetch_optional(write)
                .await?
                .map(|r| r.get::<i64, _>(0)),
            Db::Postgres(pool) => sqlx::query(sql)
                .bind(slug)
                .bind(now)
                .fetch_optional(pool)
                .await?
                .map(|r| r.get::<i64, _>(0)),
        };
        row.ok_or_else(|| StorageError::Exists {
            what: "org",
            name: slug.to_string(),
        })
    }

    /// The id of the organisation with this slug.
    pub async fn org_id(&self, slug: &str) -> Result<Option<i64>, StorageError> {
        let sql = "SELECT id FROM orgs WHERE slug = $1";
        Ok(
            on_db!(&self.db, pool => sqlx::query(sql).bind(slug).fetch_optional(pool).await?
            .map(|r| r.get::<i64, _>(0))),
        )
    }

    /// Runs a statement that changes rows, on the writing connection.
    async fn execute(&self, sql: &'static str, args: Args<'_>) -> Result<u64, StorageError> {
        macro_rules! bind_all {
            ($q:expr) => {{
                let mut q = $q;
                for arg in args.0 {
                    q = match arg {
                        Arg::Text(s) => q.bind(s),
                        Arg::OptText(s) => q.bind(s),
                        Arg::Int(i) => q.bind(i),
                        Arg::Bytes(b) => q.bind(b),
                    };
                }
                q
            }};
        }
        Ok(match &self.db {
            Db::Sqlite { write, .. } => bind_all!(sqlx::query(sql))
                .execute(write)
                .await?
                .rows_affected(),
            Db::Postgres(pool) => bind_all!(sqlx::query(sql))
                .execute(pool)
                .await?
                .rows_affected(),
        })
    }
}

/// A bound value for [`Store::execute`].
enum Arg<'a> {
    Text(&'a str),
    OptText(Option<&'a str>),
    Int(i64),
    Bytes(&'a [u8]),
}

/// The bound values of one statement, in `$1, $2, …` order.
struct Args<'a>(Vec<Arg<'a>>);

/// Microseconds since the Unix epoch, the unit of every stored time.
pub fn now_micros() -> i64 {
    chrono::Utc::now().timestamp_micros()
}

#[cfg(test)]
mod tests;

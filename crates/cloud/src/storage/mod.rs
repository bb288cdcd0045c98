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
mod correlation;
mod credentials;
mod error;
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
pub use keys::{Credential, KeyInfo};
pub use records::{EventQuery, NewEvent, StoredEvent};
pub use repositories::{ListedCommits, REPOSITORY_RULES, RepositorySource};
pub use users::{Role, Session, User};
pub use webhooks::{Delivery, Webhook};
pub use writer::{InsertOutcome, WriteBatch};

use crate::metrics::Metrics;

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

/// True (as SQL) when the signals schema is in a SQLite database: its migrations and tables.
const SIGNALS_SCHEMA: &str = "(SELECT count(*) = 3 FROM sqlite_master WHERE type = 'table' AND name IN ('_sqlx_migrations', 'orgs', 'events'))";

/// The row of `sql` on the SQLite file at `path`, opened read-only and without a journal
/// mode, so that looking changes nothing.
async fn look<T>(path: &std::path::Path, sql: String) -> Result<T, sqlx::Error>
where
    T: Send + Unpin + for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>,
{
    let options = SqliteConnectOptions::new()
        .filename(path)
        .read_only(true)
        .busy_timeout(Duration::from_secs(10));
    let mut conn = sqlx::ConnectOptions::connect(&options).await?;
    // The text is this module's own constants.
    let found = sqlx::query_as(sqlx::AssertSqlSafe(sql))
        .fetch_one(&mut conn)
        .await;
    sqlx::Connection::close(conn).await.ok();
    found
}

/// Refuses, with [`StorageError::NotCreated`] and before anything touches it, a SQLite file
/// that `cloud serve` did not make: none at all, one that is no database, or a database
/// without the signals schema (an empty file, another program's database). Admin commands
/// change only the database of a `serve`.
async fn sqlite_created(path: &std::path::Path) -> Result<(), StorageError> {
    let shown = std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    let fix = "Run the command with the --data-dir (or CLOUD_DATA_DIR) of the `cloud serve` whose database it should change (the default is ./data, relative to the current directory), or with its --database-url";
    if !path.exists() {
        return Err(StorageError::NotCreated(format!(
            "no database at {shown}: admin commands never create one, only `cloud serve` does. {fix}"
        )));
    }
    // Another sqlx program's database has `_sqlx_migrations` too: the signals tables as well.
    let schema = look::<(bool,)>(path, format!("SELECT {SIGNALS_SCHEMA}")).await;
    match schema {
        Ok((true,)) => Ok(()),
        Ok((false,)) => Err(StorageError::NotCreated(format!(
            "{shown} holds no signals schema (an empty file, or another program's database): admin commands never create one, only `cloud serve` does; the file was left as it was. A `cloud serve` started on it a moment ago may still be making it: then run the command again once that serve answers /readyz. {fix}"
        ))),
        // SQLITE_NOTADB: the file is something else. Any other failure (permissions, a lock)
        // is the database's, said as such.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("26") => {
            Err(StorageError::NotCreated(format!(
                "{shown} cannot be read as a signals database ({e}); the file was left as it was. {fix}"
            )))
        }
        Err(cause) => Err(StorageError::Open {
            target: shown,
            cause,
        }),
    }
}

/// Refuses, with [`StorageError::Foreign`] and before anything touches it, a SQLite file that
/// holds another program's tables and no signals schema: `serve` makes its own database (in a
/// new or empty file) and adds no tables to another's. A file with only `_sqlx_migrations` is
/// a first start that stopped before its first migration, taken up again.
async fn sqlite_not_foreign(path: &std::path::Path) -> Result<(), StorageError> {
    if std::fs::metadata(path).map_or(true, |m| m.len() == 0) {
        return Ok(());
    }
    let others = "SELECT group_concat(name, ', ') FROM (SELECT name FROM sqlite_master WHERE type IN ('table', 'view') AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name <> '_sqlx_migrations' ORDER BY name LIMIT 5)";
    let tables =
        look::<(Option<String>, bool)>(path, format!("SELECT ({others}), {SIGNALS_SCHEMA}")).await;
    let shown = || {
        std::path::absolute(path)
            .unwrap_or_else(|_| path.to_path_buf())
            .display()
            .to_string()
    };
    let fix =
        "Give `cloud serve` a --data-dir (or CLOUD_DATA_DIR) of its own, or move the file away";
    match tables {
        Ok((Some(names), false)) => Err(StorageError::Foreign(format!(
            "{} is another program's SQLite database (its tables include {names}) with no signals schema: `cloud serve` adds no tables to it; the file was left as it was. {fix}",
            shown()
        ))),
        // SQLITE_NOTADB: a file that is no database at all, refused before its mode changes.
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("26") => {
            Err(StorageError::Foreign(format!(
                "{} is not a SQLite database ({e}): `cloud serve` makes its database in a new or empty file; the file was left as it was. {fix}",
                shown()
            )))
        }
        // The signals schema, a new database, or a failure that opening says (permissions).
        _ => Ok(()),
    }
}

/// The versions of the migrations a database has applied.
const APPLIED: &str = "SELECT version FROM _sqlx_migrations WHERE success";

/// An admin command of a newer release never migrates a database a running `serve` of the
/// older one uses underneath it (that `serve` would go on writing what the new schema no longer
/// expects): it stops, and says to start this release's `serve` first, which migrates.
fn not_behind(
    migrator: &sqlx::migrate::Migrator,
    applied: &[i64],
    shown: &str,
) -> Result<(), StorageError> {
    let pending: Vec<String> = migrator
        .iter()
        .filter(|m| !applied.contains(&m.version))
        .map(|m| format!("{:04} {}", m.version, m.description))
        .collect();
    if pending.is_empty() {
        return Ok(());
    }
    Err(StorageError::Behind(format!(
        "the database at {shown} is of an earlier release (not applied yet: {}): admin commands never migrate it, only `cloud serve` does, at its start. Start this release's `cloud serve` on it once first (see docs/operations.md, upgrades), then run the command again; if it is starting now, it is migrating: run the command again once it answers /readyz",
        pending.join(", ")
    )))
}

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Db,
    writer: writer::WriterHandle,
    ids: std::sync::Arc<ids::EventIds>,
    /// The database as logs name it: SQLite's file, PostgreSQL's URL without its password.
    target: std::sync::Arc<str>,
}

impl Store {
    /// Where the data is: SQLite's file, or the PostgreSQL URL without its password.
    pub fn target(&self) -> &str {
        &self.target
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
                if schema.is_none() {
                    return Err(StorageError::NoSchema(format!(
                        "no schema of the search_path {search_path:?} exists in {}: create it (CREATE SCHEMA name;) or set another in --database-url (options=-c search_path=name)",
                        redact_url(url)
                    )));
                }
                if mode == OpenMode::MustExist {
                    let created: bool =
                        sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                            .fetch_one(&pool)
                            .await?;
                    if !created {
                        return Err(StorageError::NotCreated(format!(
                            "no signals schema in {} (no _sqlx_migrations table on its search_path): admin commands never create one, only `cloud serve` does. Check --database-url (or CLOUD_DATABASE_URL) against the one `cloud serve` uses, or start `cloud serve` with it once",
                            redact_url(url)
                        )));
                    }
                }
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
            Db::Postgres(_) => ids::EventIds::Random,
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

    /// A new event id, and on SQLite the sequence number it carries (see [`ids`]).
    pub fn new_event_id(&self) -> (String, Option<i64>) {
        self.ids.next()
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

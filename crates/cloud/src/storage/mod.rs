//! Durable storage on SQLite (embedded default) or PostgreSQL.
//!
//! Both backends share one schema shape and the same SQL text: queries use `$1`-style
//! parameters, which SQLite also accepts, and the [`on_db!`] macro expands each query once per
//! backend so the compiler checks both. Event writes go through the group-commit
//! [`writer`](self::writer): many concurrent requests share one transaction and one fsync
//! (on SQLite, a dedicated thread with its own connection: [`sqlite_writer`](self::sqlite_writer)).

mod records;
mod sqlite_writer;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, migrate::Migrator};

pub use records::{ApiKeyRow, BridgeTokenRow, EventQuery, NewEvent, StoredEvent};
pub use writer::{InsertOutcome, WriteBatch};

use crate::metrics::Metrics;

static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("./migrations/postgres");

/// Where the data lives, as chosen on the command line. `Debug` hides the URL's password.
#[derive(Clone)]
pub enum Backend {
    /// An SQLite file (created when missing), in WAL mode with full fsync on commit.
    Sqlite(std::path::PathBuf),
    /// A PostgreSQL connection URL (`postgres://…`).
    Postgres(String),
}

impl Backend {
    /// Picks PostgreSQL when a URL is given, else SQLite in `data_dir/signals.db`.
    pub fn choose(data_dir: &Path, database_url: Option<&str>) -> Result<Self, StorageError> {
        match database_url {
            None => Ok(Backend::Sqlite(data_dir.join("signals.db"))),
            Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
                Ok(Backend::Postgres(url.to_string()))
            }
            Some(url) if url.starts_with("sqlite:") => Ok(Backend::Sqlite(
                url.trim_start_matches("sqlite://")
                    .trim_start_matches("sqlite:")
                    .into(),
            )),
            Some(other) => Err(StorageError::BadUrl(redact_url(other))),
        }
    }
}

/// What went wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The `--database-url` is of no supported kind.
    #[error(
        "unsupported --database-url {0:?}: expected postgres://user@host:port/db or sqlite:PATH"
    )]
    BadUrl(String),
    /// Could not open or migrate the database.
    #[error(
        "cannot open the database ({target}): {source}. Check that it is reachable and writable"
    )]
    Open {
        /// The database, with any password removed.
        target: String,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// Schema migration failed.
    #[error("cannot migrate the database schema: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A query failed (connection lost, disk full, …).
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    /// A group commit failed (every request in the group gets this).
    #[error("group commit failed: {0}")]
    Commit(String),
    /// The group-commit writer has stopped (the server is shutting down).
    #[error("the storage writer has stopped; the server is shutting down")]
    WriterGone,
    /// A name that must be unique exists already.
    #[error("{what} {name:?} exists already")]
    Exists {
        /// What kind of thing (org, …).
        what: &'static str,
        /// Its name.
        name: String,
    },
}

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

/// Handle to the database; cheap to clone.
#[derive(Clone)]
pub struct Store {
    db: Db,
    writer: writer::WriterHandle,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::Sqlite(path) => f.debug_tuple("Sqlite").field(path).finish(),
            Backend::Postgres(url) => f.debug_tuple("Postgres").field(&redact_url(url)).finish(),
        }
    }
}

/// The URL without its password: neither `user:password@` nor a `password=` parameter.
pub fn redact_url(url: &str) -> String {
    let (base, query) = url
        .split_once('?')
        .map_or((url, None), |(b, q)| (b, Some(q)));
    let base = match (base.find("://"), base.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &base[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}://{}@{}", &base[..scheme], user, &base[at + 1..])
        }
        _ => base.to_string(),
    };
    match query {
        None => base,
        Some(q) => {
            let params: Vec<String> = q
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{base}?{}", params.join("&"))
        }
    }
}

impl Store {
    /// Opens (creating if needed) and migrates the database, and starts the group-commit writer.
    pub async fn open(backend: &Backend, metrics: Metrics) -> Result<Store, StorageError> {
        let db = match backend {
            Backend::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| StorageError::Open {
                        target: dir.display().to_string(),
                        source: sqlx::Error::Io(e),
                    })?;
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Full)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true)
                    .page_size(16_384);
                let open_err = |source| StorageError::Open {
                    target: path.display().to_string(),
                    source,
                };
                let write = SqlitePoolOptions::new()
                    .max_connections(1)
                    .connect_with(options.clone())
                    .await
                    .map_err(open_err)?;
                SQLITE_MIGRATIONS.run(&write).await?;
                let read = SqlitePoolOptions::new()
                    .max_connections(4)
                    .connect_with(options.read_only(true))
                    .await
                    .map_err(open_err)?;
                Db::Sqlite { read, write }
            }
            Backend::Postgres(url) => {
                let open_err = |source| StorageError::Open {
                    target: redact_url(url),
                    source,
                };
                let options = PgConnectOptions::from_str(url).map_err(open_err)?;
                let pool = PgPoolOptions::new()
                    .max_connections(8)
                    .acquire_timeout(Duration::from_secs(5))
                    .connect_with(options)
                    .await
                    .map_err(open_err)?;
                POSTGRES_MIGRATIONS.run(&pool).await?;
                Db::Postgres(pool)
            }
        };
        let sqlite_file = match backend {
            Backend::Sqlite(path) => Some(path.clone()),
            Backend::Postgres(_) => None,
        };
        let writer = writer::spawn(db.clone(), sqlite_file, metrics);
        Ok(Store { db, writer })
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

    /// True when a trivial query succeeds (readiness).
    pub async fn ping(&self) -> bool {
        on_db!(&self.db, pool => sqlx::query("SELECT 1").execute(pool).await.is_ok())
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
mod tests {
    use super::*;

    #[test]
    fn database_passwords_never_show() {
        let url = "postgres://app:s3cret@db:5432/signals?sslmode=require&password=s3cret";
        let shown = format!("{:?}", Backend::Postgres(url.into()));
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(shown.contains("app@db:5432/signals"), "{shown}");
        assert!(shown.contains("sslmode=require"), "{shown}");
    }
}

//! Durable storage on SQLite (embedded default) or PostgreSQL.
//!
//! Both backends share one schema shape and the same SQL text: queries use `$1`-style
//! parameters, which SQLite also accepts, and the [`on_db!`] macro expands each query once per
//! backend so the compiler checks both. Event writes go through the group-commit
//! [`writer`](self::writer): many concurrent requests share one transaction and one fsync
//! (on SQLite, a dedicated thread with its own connection: [`sqlite_writer`](self::sqlite_writer)).

mod audit;
mod change_hours;
mod correlation;
mod error;
mod ids;
mod keys;
mod records;
mod repositories;
mod sqlite_writer;
mod users;
mod webhooks;
mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use sqlx::{Row, migrate::Migrator};

pub use audit::{Actor, AuditEntry};
pub use correlation::{MAX_CANDIDATES, TITLE_LOOKBACK_MICROS};
pub use error::StorageError;
pub use keys::{Credential, KeyInfo};
pub use records::{ApiKeyRow, BridgeTokenRow, EventQuery, NewEvent, StoredEvent};
pub use repositories::{ListedCommits, REPOSITORY_RULES, RepositorySource};
pub use users::{Role, Session, User};
pub use webhooks::{Delivery, Webhook};
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
}

/// `cloud serve`'s exclusive hold on an SQLite database, for as long as it is kept: event ids
/// carry sequence numbers that one process hands out ([`ids`]), so a second server on the same
/// file is refused at start. Admin commands do not take it and may run alongside.
#[derive(Debug)]
pub struct ServeLock {
    _file: Option<std::fs::File>,
}

impl ServeLock {
    /// Takes the lock of `backend` (none is needed on PostgreSQL).
    pub fn acquire(backend: &Backend) -> Result<ServeLock, StorageError> {
        let Backend::Sqlite(path) = backend else {
            return Ok(ServeLock { _file: None });
        };
        let mut lock_path = path.clone().into_os_string();
        lock_path.push(".serve-lock");
        let lock_path = std::path::PathBuf::from(lock_path);
        let failed = |cause: &dyn std::fmt::Display| StorageError::Lock {
            file: lock_path.display().to_string(),
            cause: cause.to_string(),
        };
        if let Some(dir) = lock_path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| failed(&e))?;
        }
        let mut options = std::fs::OpenOptions::new();
        options.create(true).truncate(false).write(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options.open(&lock_path).map_err(|e| failed(&e))?;
        match file.try_lock() {
            Ok(()) => Ok(ServeLock { _file: Some(file) }),
            Err(std::fs::TryLockError::WouldBlock) => {
                Err(StorageError::InUse(path.display().to_string()))
            }
            Err(std::fs::TryLockError::Error(e)) => Err(failed(&e)),
        }
    }
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

/// Makes the SQLite database private (mode 0600) whatever the umask: it holds every org's
/// events and the internal CA's private key. SQLite gives its `-wal` and `-shm` files the
/// database file's mode, so creating the file first, private, covers them too. A database
/// found readable by others is made private, with a warning.
fn private_files(path: &std::path::Path) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)?;
        let mut names = vec![path.to_path_buf()];
        for suffix in ["-wal", "-shm"] {
            let mut name = path.as_os_str().to_owned();
            name.push(suffix);
            names.push(name.into());
        }
        for file in names {
            let Ok(meta) = std::fs::metadata(&file) else {
                continue;
            };
            let mode = meta.permissions().mode() & 0o777;
            if mode & 0o077 != 0 {
                tracing::warn!(file = %file.display(), mode = format!("{mode:o}"), "the database was readable by other users (it holds every org's events and the internal CA's key); made it private (0600)");
                std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600))?;
            }
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Whether opening may create the database: `cloud serve` does; admin commands never do, so
/// one run from the wrong directory cannot make an empty database that no server reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Create the SQLite file (and its directory) or the PostgreSQL schema when missing.
    CreateIfMissing,
    /// Refuse, with [`StorageError::NotCreated`], a database that `serve` has not created.
    MustExist,
}

impl Store {
    /// Opens and migrates the database (creating it only with [`OpenMode::CreateIfMissing`]),
    /// and starts the group-commit writer.
    pub async fn open(
        backend: &Backend,
        metrics: Metrics,
        mode: OpenMode,
    ) -> Result<Store, StorageError> {
        let db = match backend {
            Backend::Sqlite(path) if mode == OpenMode::MustExist && !path.exists() => {
                return Err(StorageError::NotCreated(format!(
                    "no database at {}: admin commands never create one, only `cloud serve` does. Run the command with the --data-dir (or CLOUD_DATA_DIR) of the `cloud serve` whose database it should change (the default is ./data, relative to the current directory), or with its --database-url",
                    std::path::absolute(path)
                        .unwrap_or_else(|_| path.clone())
                        .display()
                )));
            }
            Backend::Sqlite(path) => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    std::fs::create_dir_all(dir).map_err(|e| StorageError::Open {
                        target: dir.display().to_string(),
                        source: sqlx::Error::Io(e),
                    })?;
                }
                private_files(path).map_err(|e| StorageError::Open {
                    target: path.display().to_string(),
                    source: sqlx::Error::Io(e),
                })?;
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
                // The server's notices ("relation … already exists, skipping" at every
                // migration check) are not for operators: warnings and errors only.
                let options = PgConnectOptions::from_str(url)
                    .map_err(open_err)?
                    .options([("client_min_messages", "warning")]);
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
        Ok(Store {
            db,
            writer,
            ids: std::sync::Arc::new(ids),
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

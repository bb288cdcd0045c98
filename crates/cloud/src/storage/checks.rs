//! What opening a database refuses before it touches anything: a file or schema that `cloud
//! serve` did not make (for admin commands, which never create one), another program's tables
//! where `serve` would add its own, and a database an admin command of a newer release would
//! have to migrate under a running older `serve`.

use std::time::Duration;

use sqlx::postgres::PgPool;
use sqlx::sqlite::SqliteConnectOptions;

use super::backend::OpenMode;
use super::error::StorageError;

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
pub(super) async fn sqlite_created(path: &std::path::Path) -> Result<(), StorageError> {
    let shown = std::path::absolute(path)
        .unwrap_or_else(|_| path.to_path_buf())
        .display()
        .to_string();
    let fix = "Run the command with the --data-dir (or CLOUD_DATA_DIR) of the `cloud serve` whose database it should change (the default is ./data, relative to the current directory), or with its --database-url";
    if let Some(dir) = path.parent().filter(|d| d.is_file()) {
        return Err(StorageError::NotCreated(format!(
            "the data directory {} is a file, not a directory. {fix}",
            std::path::absolute(dir)
                .unwrap_or_else(|_| dir.to_path_buf())
                .display()
        )));
    }
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
pub(super) async fn sqlite_not_foreign(path: &std::path::Path) -> Result<(), StorageError> {
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
pub(super) const APPLIED: &str = "SELECT version FROM _sqlx_migrations WHERE success";

/// An admin command of a newer release never migrates a database a running `serve` of the
/// older one uses underneath it (that `serve` would go on writing what the new schema no longer
/// expects): it stops, and says to start this release's `serve` first, which migrates.
pub(super) fn not_behind(
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

/// Refuses, before any migration runs, a PostgreSQL schema (the first of the search_path that
/// exists) without the signals schema that holds another program's tables or another sqlx
/// program's migrations: `serve` would add its tables beside them, or fail half-way on a name
/// they share. Only an empty schema, or one that `serve` began and stopped in, is taken up.
/// For admin commands ([`OpenMode::MustExist`]) anything but the signals schema is refused.
pub(super) async fn postgres_not_foreign(
    pool: &PgPool,
    schema: &str,
    shown: &str,
    mode: OpenMode,
    ours: &sqlx::migrate::Migrator,
) -> Result<(), StorageError> {
    let (tables, signals, migrations, sqlx_shaped): (Vec<String>, bool, bool, bool) = sqlx::query_as(
        "SELECT \
           coalesce((SELECT array_agg(name ORDER BY name) FROM (SELECT c.relname AS name \
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relkind IN ('r', 'v', 'm', 'p', 'f') \
             AND c.relname <> '_sqlx_migrations' \
             AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass \
               AND d.objid = c.oid AND d.deptype = 'e') \
             ORDER BY c.relname LIMIT 5) t), '{}'), \
           (SELECT count(*) = 3 FROM pg_tables WHERE schemaname = $1 \
             AND tablename IN ('_sqlx_migrations', 'orgs', 'events')), \
           EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = '_sqlx_migrations'), \
           (SELECT count(*) = 6 FROM information_schema.columns WHERE table_schema = $1 \
             AND table_name = '_sqlx_migrations' AND (column_name, data_type) IN \
             (('version', 'bigint'), ('description', 'text'), \
              ('installed_on', 'timestamp with time zone'), ('success', 'boolean'), \
              ('checksum', 'bytea'), ('execution_time', 'bigint')))",
    )
    .bind(schema)
    .fetch_one(pool)
    .await?;
    if signals {
        return Ok(());
    }
    let fix = "Give `cloud` a database of its own (createdb signals), or a schema of its own in this one (CREATE SCHEMA signals; then options=-c%20search_path%3Dsignals in --database-url)";
    if !tables.is_empty() {
        return Err(StorageError::Foreign(format!(
            "schema {schema:?} of {shown} holds another program's tables ({}) and no signals schema: `cloud` adds no tables to it; nothing was changed. {fix}",
            tables.join(", ")
        )));
    }
    if migrations && !sqlx_shaped {
        return Err(StorageError::Foreign(format!(
            "schema {schema:?} of {shown} holds another program's table _sqlx_migrations (not of sqlx's columns and types) and no signals schema: `cloud` adds no tables to it; nothing was changed. {fix}"
        )));
    }
    if migrations {
        // Another program's migrations may share cloud's numbers (1, 2, 3): a version is
        // cloud's when its description is too.
        let applied: Vec<(i64, String)> =
            sqlx::query_as("SELECT version, description FROM _sqlx_migrations")
                .fetch_all(pool)
                .await?;
        let theirs = applied.iter().find(|(version, description)| {
            !ours
                .iter()
                .any(|m| m.version == *version && m.description == *description)
        });
        if let Some((version, description)) = theirs {
            return Err(StorageError::Foreign(format!(
                "schema {schema:?} of {shown} holds another program's migrations (_sqlx_migrations has version {version}, {description:?}, which is no migration of cloud) and no signals schema: `cloud` adds no tables to it; nothing was changed. {fix}"
            )));
        }
    }
    if mode == OpenMode::MustExist {
        return Err(StorageError::NotCreated(format!(
            "no signals schema in schema {schema:?} of {shown}: admin commands never create one, only `cloud serve` does. Check --database-url (or CLOUD_DATABASE_URL) against the one `cloud serve` uses, or start `cloud serve` with it once"
        )));
    }
    Ok(())
}

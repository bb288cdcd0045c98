//! The store's error type.

/// What went wrong talking to the database.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The `--database-url` is of no supported kind.
    #[error(
        "unsupported --database-url {0:?}: expected postgres://user@host:port/db or sqlite:PATH"
    )]
    BadUrl(String),
    /// Could not open or migrate the database.
    #[error("cannot open the database ({target}): {}", opening(cause))]
    Open {
        /// The database, with any password removed.
        target: String,
        /// The driver's error, said in the message (not a `source`, which would say it twice
        /// where the chain is printed).
        cause: sqlx::Error,
    },
    /// Schema migration failed.
    #[error("cannot migrate the database schema: {0}")]
    Migrate(String),
    /// A newer release migrated the database: this one neither migrates nor reads it (exit 2:
    /// the fix is to run that release).
    #[error("{0}")]
    Newer(String),
    /// A query failed (connection lost, disk full, …).
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    /// A group commit failed (every request in the group gets this).
    #[error("group commit failed: {0}")]
    Commit(String),
    /// The group-commit writer has stopped (the server is shutting down).
    #[error("the storage writer has stopped; the server is shutting down")]
    WriterGone,
    /// The PostgreSQL search_path names no schema that exists.
    #[error("{0}")]
    NoSchema(String),
    /// An admin command found no database where it looked (only `serve` creates one).
    #[error("{0}")]
    NotCreated(String),
    /// An admin command found a database that this release's `serve` has not migrated yet.
    #[error("{0}")]
    Behind(String),
    /// Another program's SQLite database or PostgreSQL schema where the signals one belongs.
    #[error("{0}")]
    Foreign(String),
    /// Another `cloud serve` holds the SQLite database.
    #[error(
        "another `cloud serve` is using the database {0}; stop it, or give this one a database of its own (its own --data-dir, or with --database-url sqlite:FILE another file)"
    )]
    InUse(String),
    /// The lock file beside the SQLite database could not be opened or locked.
    #[error("cannot lock {file}: {cause}. Check that the data directory is writable")]
    Lock {
        /// The lock file.
        file: String,
        /// What the system said.
        cause: String,
    },
    /// A name that must be unique exists already.
    #[error("{what} {name:?} exists already")]
    Exists {
        /// What kind of thing (org, …).
        what: &'static str,
        /// Its name.
        name: String,
    },
}

impl StorageError {
    /// Whether the fix is in the command line or the configuration rather than in the
    /// database's health (exit code 2): a bad URL, a database or schema that does not exist, a
    /// user or password the server refuses, another program's or another `serve`'s database.
    pub fn is_configuration(&self) -> bool {
        match self {
            StorageError::BadUrl(_)
            | StorageError::NoSchema(_)
            | StorageError::NotCreated(_)
            | StorageError::Behind(_)
            | StorageError::Newer(_)
            | StorageError::Foreign(_)
            | StorageError::InUse(_)
            | StorageError::Lock { .. } => true,
            StorageError::Open {
                cause: sqlx::Error::Database(db),
                ..
            } => matches!(db.code().as_deref(), Some("3D000" | "28P01" | "28000")),
            StorageError::Open {
                cause: sqlx::Error::Configuration(_),
                ..
            } => true,
            _ => false,
        }
    }
}

impl From<sqlx::migrate::MigrateError> for StorageError {
    fn from(e: sqlx::migrate::MigrateError) -> Self {
        use sqlx::migrate::MigrateError;
        match e {
            MigrateError::VersionMissing(version) => StorageError::Newer(format!(
                "the database was migrated by a newer release of cloud (its migration {version} is unknown to this one, {}): run that release or a later one, or restore the backup taken before the upgrade",
                env!("CARGO_PKG_VERSION")
            )),
            e => StorageError::Migrate(e.to_string()),
        }
    }
}

/// Why a database could not be opened, and what to do: the server's own words for what it
/// refused (not the driver's source location), with the fix for the usual refusals.
fn opening(cause: &sqlx::Error) -> String {
    if let sqlx::Error::Configuration(why) = cause {
        return format!("{why}: check --database-url");
    }
    let sqlx::Error::Database(db) = cause else {
        return format!("{cause}. Check that it is reachable and writable");
    };
    let hint = match db.code().as_deref() {
        Some("3D000") => {
            "create it (createdb, or CREATE DATABASE) or name another in --database-url"
        }
        Some("28P01" | "28000") => "check the user and password in --database-url",
        Some("42501") => "grant the user access to the database and its schema",
        _ => "check that it is reachable and writable",
    };
    format!("the database said: {}; {hint}", db.message())
}

//! The schema migrations, embedded in the binary: each backend's `migrations/` files, in
//! order. They are built at start from `include_str!` rather than by sqlx's `migrate!` macro,
//! which would bring sqlx's compile-time query machinery (both database drivers and a second
//! tokio, built for the host) into every build of `cloud`. The checksums are sqlx's own (the
//! SHA-384 of each file's text), so a database migrated either way is the same to both.
//!
//! A new migration is a new file in `migrations/sqlite/` and `migrations/postgres/`, listed
//! below (a test checks that the lists and the directories agree).

use std::sync::LazyLock;

use sqlx::SqlStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};

/// `(file name, text)` of each file of `migrations/$dir`, listed.
macro_rules! files {
    ($dir:literal: $($file:literal),+ $(,)?) => {
        &[$(($file, include_str!(concat!("../../migrations/", $dir, "/", $file)))),+]
    };
}

const SQLITE: &[(&str, &str)] = files!("sqlite":
    "0001_init.sql",
    "0002_ca.sql",
    "0003_events_keyed_by_sequence.sql",
    "0004_key_management.sql",
    "0005_dashboard_users.sql",
    "0006_audit_and_notifications.sql",
    "0007_correlation.sql",
    "0008_repository_sources.sql",
    "0009_smaller_correlation_index.sql",
    "0010_change_hours.sql",
    "0011_deploy_head_slots.sql",
    "0012_bridge_token_connected.sql",
    "0013_idempotency_by_age.sql",
);

const POSTGRES: &[(&str, &str)] = files!("postgres":
    "0001_init.sql",
    "0002_ca.sql",
    "0003_event_indexes.sql",
    "0004_key_management.sql",
    "0005_dashboard_users.sql",
    "0006_audit_and_notifications.sql",
    "0007_correlation.sql",
    "0008_repository_sources.sql",
    "0009_smaller_correlation_index.sql",
    "0010_change_hours.sql",
    "0011_deploy_head_slots.sql",
    "0012_bridge_token_connected.sql",
    "0013_idempotency_by_age.sql",
);

/// SQLite's migrations.
pub(super) static SQLITE_MIGRATIONS: LazyLock<Migrator> = LazyLock::new(|| migrator(SQLITE));
/// PostgreSQL's migrations.
pub(super) static POSTGRES_MIGRATIONS: LazyLock<Migrator> = LazyLock::new(|| migrator(POSTGRES));

fn migrator(files: &[(&str, &'static str)]) -> Migrator {
    Migrator::with_migrations(
        files
            .iter()
            .map(|&(name, sql)| migration(name, sql))
            .collect(),
    )
}

/// A file as sqlx's `migrate!` reads one: `0003_event_indexes.sql` is version 3, described
/// as "event indexes"; a text that starts with `-- no-transaction` runs outside a transaction.
fn migration(name: &str, sql: &'static str) -> Migration {
    let (version, rest) = name
        .split_once('_')
        .expect("a migration file is named NNNN_description.sql");
    let description = rest.trim_end_matches(".sql").replace('_', " ");
    Migration::new(
        version
            .parse()
            .expect("a migration file's name starts with its version"),
        description.into(),
        MigrationType::Simple,
        SqlStr::from_static(sql),
        sql.starts_with("-- no-transaction"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_listed_in_order() {
        for (dir, listed) in [("sqlite", SQLITE), ("postgres", POSTGRES)] {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/migrations/");
            let mut files: Vec<String> = std::fs::read_dir(format!("{path}{dir}"))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            files.sort();
            let names: Vec<&str> = listed.iter().map(|(name, _)| *name).collect();
            assert_eq!(names, files, "migrations/{dir}: list every file, in order");
        }
        let versions: Vec<i64> = SQLITE_MIGRATIONS.iter().map(|m| m.version).collect();
        assert_eq!(versions, (1..=SQLITE.len() as i64).collect::<Vec<_>>());
        assert_eq!(
            POSTGRES_MIGRATIONS.iter().next().unwrap().description,
            "init"
        );
    }
}

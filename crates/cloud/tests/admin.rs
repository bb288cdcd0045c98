//! Admin commands against storage that `cloud serve` has not created: they refuse, say where
//! they looked and how to point them at the right place, and create nothing.

use std::process::Command;

use testkit::{PgSchema, cloud_bin};

#[test]
fn admin_commands_never_create_a_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    // As a user would: from a directory with no data dir, with the default ./data.
    for args in [
        &["org", "create", "acme"][..],
        &["api-key", "create", "--org", "acme"],
        &["bridge-token", "create", "--org", "acme", "--name", "dc1"],
    ] {
        let out = Command::new(cloud_bin())
            .args(args)
            .current_dir(dir.path())
            .env_remove("CLOUD_DATA_DIR")
            .env_remove("CLOUD_DATABASE_URL")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} printed a value");
        assert!(
            stderr.contains(&format!(
                "no database at {}",
                dir.path().join("data/signals.db").display()
            )) && stderr.contains("only `cloud serve` does")
                && stderr.contains("--data-dir"),
            "{stderr}"
        );
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "an admin command created files"
    );
}

#[test]
fn admin_commands_never_create_a_postgres_schema() {
    let schema = PgSchema::create();
    for _ in 0..2 {
        let out = Command::new(cloud_bin())
            .args(["org", "create", "acme", "--database-url", &schema.url])
            .env_remove("CLOUD_DATA_DIR")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(
            stderr.contains("no signals schema in") && stderr.contains("--database-url"),
            "{stderr}"
        );
        assert!(!stderr.contains("relation"), "{stderr}");
    }
}

//! Admin commands against storage that `cloud serve` has not created: they refuse, say where
//! they looked and how to point them at the right place, and create nothing.

use std::process::Command;

use testkit::{PgSchema, cloud_bin};

/// `cloud serve` on an ephemeral TLS port and no plain one: for the starts these tests expect to
/// be refused, so that a start that is not binds nothing fixed.
const SERVE: [&str; 5] = ["serve", "--listen", "127.0.0.1:0", "--http-listen", "off"];

/// Runs `cloud ARGS --data-dir DIR` on SQLite (whatever the environment names).
fn cloud_on(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(cloud_bin())
        .args(args)
        .arg("--data-dir")
        .arg(dir)
        .env_remove("CLOUD_DATABASE_URL")
        .output()
        .unwrap()
}

#[test]
fn admin_commands_never_create_a_sqlite_database() {
    let dir = tempfile::tempdir().unwrap();
    // Refused (exit 2) in `dir`, without a storage option or variable: what it printed.
    let run = |args: &[&str]| {
        let out = Command::new(cloud_bin())
            .args(args)
            .current_dir(dir.path())
            .env_remove("CLOUD_DATA_DIR")
            .env_remove("CLOUD_DATABASE_URL")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        (out, stderr)
    };
    // As a user would: from a directory with no data dir, with the default ./data.
    for args in [
        &["org", "create", "acme"][..],
        &["api-key", "create", "--org", "acme"],
        &["bridge-token", "create", "--org", "acme", "--name", "dc1"],
    ] {
        let (out, stderr) = run(args);
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
    // A bad value is said with the missing database, in one run, and still nothing is made.
    for (args, bad) in [
        (
            &["org", "create", "ACME"][..],
            "org slug \"ACME\" is not valid: use 1 to 63 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit; did you mean \"acme\"?",
        ),
        (
            &[
                "webhook",
                "set",
                "--org",
                "acme",
                "--url",
                "ftp://hooks.example",
            ],
            "--url must start with https:// or http://",
        ),
        (
            &[
                "user", "create", "--org", "acme", "--email", "nope", "--role", "admin",
            ],
            "--email \"nope\" is not an email address",
        ),
        (
            &[
                "bridge-token",
                "revoke",
                "--org",
                "acme",
                "--name",
                "dc1",
                "nothex",
            ],
            "that is not a bridge token's id",
        ),
        (&["api-key", "list", "--org", ""], "--org is empty"),
        (
            &["api-key", "list", "--org", "ACME"],
            "--org \"ACME\" is not an org slug: expected 1 to 63 lowercase letters, digits, '-', '_' or '.', starting with a letter or digit; did you mean \"acme\"?",
        ),
        (
            &["signal-key", "create", "--org", "Bad!"],
            "--org \"Bad!\" is not an org slug: expected 1 to 63",
        ),
    ] {
        let (_, stderr) = run(args);
        assert!(
            stderr.contains("2 problems; nothing was done")
                && stderr.contains(bad)
                && stderr.contains("no database at"),
            "{args:?}: {stderr}"
        );
    }
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "an admin command created files"
    );
    // A --data-dir that is a file is said to be one.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let out = cloud_on(&file, &["org", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "the data directory {} is a file, not a directory",
            file.display()
        )),
        "{stderr}"
    );
}

#[test]
fn admin_commands_leave_a_file_that_is_no_signals_database_as_it_was() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("signals.db");
    // An empty file (a `touch`), another program's database, a file that is no database.
    // Another program's database, and another sqlx program's (it has `_sqlx_migrations` too).
    let database = |name: &str, sql: &'static str| {
        let path = dir.path().join(name);
        tokio::runtime::Runtime::new().unwrap().block_on(async {
            use sqlx::Connection;
            let url = format!("sqlite://{}?mode=rwc", path.display());
            let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
            sqlx::raw_sql(sql).execute(&mut db).await.unwrap();
            db.close().await.unwrap();
        });
        std::fs::read(&path).unwrap()
    };
    let other = database("other.db", "CREATE TABLE foo(x)");
    let other_sqlx = database("sqlx.db", "CREATE TABLE _sqlx_migrations(version INTEGER)");
    for (what, bytes, said) in [
        ("empty", Vec::new(), "holds no signals schema"),
        (
            "text",
            b"hello\n".to_vec(),
            "cannot be read as a signals database",
        ),
        ("other", other, "holds no signals schema"),
        ("other sqlx", other_sqlx, "holds no signals schema"),
    ] {
        std::fs::write(&file, &bytes).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        for args in [&["org", "list"][..], &["org", "create", "zzz"]] {
            let out = cloud_on(dir.path(), args);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{what} {args:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{what} {args:?} printed a value");
            assert!(
                stderr.contains(&file.display().to_string())
                    && stderr.contains(said)
                    && stderr.contains("left as it was"),
                "{what}: {stderr}"
            );
            assert_eq!(
                std::fs::read(&file).unwrap(),
                bytes,
                "{what}: the file changed"
            );
            let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{what}: the file's mode changed");
        }
    }
}

#[test]
fn serve_adds_no_tables_to_another_programs_database() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("signals.db");
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use sqlx::Connection;
        let url = format!("sqlite://{}?mode=rwc", file.display());
        let mut db = sqlx::SqliteConnection::connect(&url).await.unwrap();
        sqlx::raw_sql("CREATE TABLE customers(id INTEGER)")
            .execute(&mut db)
            .await
            .unwrap();
        db.close().await.unwrap();
    });
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let bytes = std::fs::read(&file).unwrap();
    let out = cloud_on(dir.path(), &SERVE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&file.display().to_string())
            && stderr.contains("another program's SQLite database")
            && stderr.contains("customers")
            && stderr.contains("--data-dir"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), bytes, "the file changed");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the file's mode changed");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["signals.db"], "nothing is left beside it");

    // A file that is no database at all: refused the same way, its mode untouched.
    std::fs::write(&file, "garbage\n").unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = cloud_on(dir.path(), &SERVE);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is not a SQLite database"), "{stderr}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"garbage\n",
        "the file changed"
    );
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o644, "the file's mode changed");
}

/// `cloud ARGS --database-url URL`, with no data directory from the environment: its exit code
/// and what it said.
fn cloud_on_url(args: &[&str], url: &str) -> (Option<i32>, String) {
    let out = Command::new(cloud_bin())
        .args(args)
        .args(["--database-url", url])
        .env_remove("CLOUD_DATA_DIR")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn admin_commands_never_create_a_postgres_schema() {
    let schema = PgSchema::create();
    for _ in 0..2 {
        let (code, stderr) = cloud_on_url(&["org", "create", "acme"], &schema.url);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains("no signals schema in") && stderr.contains("--database-url"),
            "{stderr}"
        );
        assert!(!stderr.contains("relation"), "{stderr}");
    }
}

/// `serve` on a PostgreSQL schema that holds another program's tables, or another sqlx
/// program's migrations, refuses it before migrating (exit 2, naming what it found) and adds
/// no table to it; an admin command refuses it too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_adds_no_tables_to_another_programs_postgres_schema() {
    use sqlx::Connection;
    let tables = PgSchema::create();
    tables.exec("CREATE TABLE users (id int); CREATE TABLE orders (id int)");
    // Another sqlx program's migrations table, with one migration applied.
    let migrated = |version: i64, description: &str| {
        let schema = PgSchema::create();
        schema.exec(&format!(
            "CREATE TABLE _sqlx_migrations (version BIGINT PRIMARY KEY, description TEXT NOT NULL, \
             installed_on TIMESTAMPTZ NOT NULL DEFAULT now(), success BOOLEAN NOT NULL, \
             checksum BYTEA NOT NULL, execution_time BIGINT NOT NULL); \
             INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
             VALUES ({version}, '{description}', TRUE, '\\x00', 0)"
        ));
        schema
    };
    let migrations = migrated(20240101000000, "theirs");
    // Another program numbering its migrations as cloud does.
    let numbered = migrated(3, "add col");
    // Tables of that name that are not sqlx's: other columns, or sqlx's names of other types.
    let unlike = PgSchema::create();
    unlike.exec("CREATE TABLE _sqlx_migrations (version bigint)");
    let typed = PgSchema::create();
    typed.exec(
        "CREATE TABLE _sqlx_migrations (version int, description text); \
         INSERT INTO _sqlx_migrations VALUES (1, 'x')",
    );
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().display().to_string();
    let serve = [&SERVE[..], &["--data-dir", &data]].concat();
    for (schema, said, count) in [
        (&tables, "another program's tables (orders, users)", 2),
        (&migrations, "has version 20240101000000", 1),
        (&numbered, "has version 3, \"add col\"", 1),
        (
            &unlike,
            "holds another program's table _sqlx_migrations (not of sqlx's columns and types)",
            1,
        ),
        (
            &typed,
            "holds another program's table _sqlx_migrations (not of sqlx's columns and types)",
            1,
        ),
    ] {
        let (code, stderr) = cloud_on_url(&serve, &schema.url);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(
            stderr.contains(said) && stderr.contains("CREATE SCHEMA signals"),
            "{stderr}"
        );
        let mut db = sqlx::PgConnection::connect(&testkit::pg_base_url())
            .await
            .unwrap();
        let found: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_tables WHERE schemaname = $1")
            .bind(&schema.name)
            .fetch_one(&mut db)
            .await
            .unwrap();
        assert_eq!(found, count, "tables added to {}", schema.name);
        db.close().await.unwrap();
        let (code, stderr) = cloud_on_url(&["org", "list"], &schema.url);
        assert_eq!(code, Some(2), "{stderr}");
        assert!(stderr.contains(said), "{stderr}");
    }
}

/// A `--database-url` naming a database the server does not have is the operator's to fix:
/// exit 2, with what to do.
#[test]
fn a_database_that_does_not_exist_is_a_configuration_error() {
    let mut url = url::Url::parse(&testkit::pg_base_url()).unwrap();
    url.set_path("/no_such_signals_database");
    let (code, stderr) = cloud_on_url(&["org", "list"], url.as_str());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("no_such_signals_database") && stderr.contains("createdb"),
        "{stderr}"
    );
    // A URL the driver cannot read is as much the operator's to fix.
    let bogus = "postgres://u@127.0.0.1:5432/db?sslmode=bogus";
    let (code, stderr) = cloud_on_url(&["org", "list"], bogus);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("check --database-url"), "{stderr}");
}

/// A database that a newer release migrated is said to be one, with what to do, not in the
/// migration tool's words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_a_newer_release_is_said_as_such() {
    use sqlx::Connection;
    let cloud = testkit::Cloud::start(testkit::Backend::Sqlite);
    let path = cloud.data_dir.path().join("signals.db");
    let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::raw_sql(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (999, 'from the future', TRUE, x'00', 0)",
    )
    .execute(&mut db)
    .await
    .unwrap();
    db.close().await.unwrap();
    let out = cloud.admin_output(&["org", "list"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The operator's to fix (run the newer release): exit 2, and no word of migrating, which
    // an admin command never does.
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("migrated by a newer release") && stderr.contains("migration 999"),
        "{stderr}"
    );
    assert!(!stderr.contains("cannot migrate"), "{stderr}");
    // Each cause said once.
    assert_eq!(stderr.matches("migration 999").count(), 1, "{stderr}");
}

/// An admin command of a newer release on a database its `serve` has not migrated yet (the
/// binary replaced, the old `serve` still running) changes nothing: exit 2, naming what is not
/// applied and that `cloud serve` migrates. Here the newest migration is marked as not applied.
#[test]
fn admin_commands_never_migrate() {
    for backend in [testkit::Backend::Sqlite, testkit::Backend::Postgres] {
        let cloud = testkit::Cloud::start(backend);
        cloud.exec_sql("DELETE FROM _sqlx_migrations WHERE version = 12");
        let out = cloud.admin_output(&["org", "list"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{backend:?}: {stderr}");
        assert!(
            stderr.contains("0012 bridge token connected")
                && stderr.contains("only `cloud serve` does"),
            "{backend:?}: {stderr}"
        );
    }
}

/// A key's name is one line that `list` can show: blank names and control characters are
/// refused before anything is stored.
#[test]
fn key_names_are_one_line_of_text() {
    let dir = tempfile::tempdir().unwrap();
    for (name, why) in [
        ("  ", "blank"),
        ("a\tb", "control character"),
        ("a\nb", "control character"),
    ] {
        let out = cloud_on(
            dir.path(),
            &["api-key", "create", "--org", "acme", "--name", name],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{name:?}: {stderr}");
        assert!(
            stderr.contains(why) && stderr.contains("--name"),
            "{stderr}"
        );
    }
}

/// A mistyped `--log-level` (or `CLOUD_LOG_LEVEL`) is a usage error: read as a filter it would
/// silence every line, errors included.
#[test]
fn a_mistyped_log_level_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let out = cloud_on(dir.path(), &["org", "list", "--log-level", "warnn"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--log-level") && stderr.contains("\"warnn\" is not a log level"),
        "{stderr}"
    );
    let out = Command::new(cloud_bin())
        .args(SERVE)
        .arg("--data-dir")
        .arg(dir.path())
        .env("CLOUD_LOG_LEVEL", "inf")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("\"inf\" is not a log level")
            && stderr.contains("comes from the environment variable CLOUD_LOG_LEVEL"),
        "{stderr}"
    );
}

/// A value refused after parsing that came from a variable is said to, as clap's refusals
/// are; and a variable set empty is refused, naming it, unless its option is typed.
#[test]
fn values_from_the_environment_are_said_to_be_and_empty_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    // `cloud ARGS --data-dir DIR` with one variable set: its exit code and what it said.
    let cloud = |args: &[&str], (var, value): (&str, &str)| {
        let out = Command::new(cloud_bin())
            .args(args)
            .arg("--data-dir")
            .arg(dir.path())
            .env_remove("CLOUD_DATABASE_URL")
            .env(var, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        stderr
    };
    let serve = ["serve", "--listen", "127.0.0.1:0"];
    let stderr = cloud(&serve, ("CLOUD_HTTP_LISTEN", "bogus"));
    assert!(
        stderr.contains("--http-listen: \"bogus\"")
            && stderr.contains(
                "(the value of --http-listen comes from the environment variable CLOUD_HTTP_LISTEN)"
            ),
        "{stderr}"
    );
    let stderr = cloud(&serve, ("CLOUD_DATABASE_URL", "bogus"));
    assert!(
        stderr.contains("comes from the environment variable CLOUD_DATABASE_URL"),
        "{stderr}"
    );
    // `--listen` is an option of `db-proxy` too, with a variable of its own.
    let stderr = cloud(&["serve"], ("CLOUD_LISTEN", "bogus"));
    assert!(
        stderr.contains("comes from the environment variable CLOUD_LISTEN"),
        "{stderr}"
    );
    // A variable set empty is said to be, not read as an org called "" nor as no database URL
    // at all (which would quietly start on SQLite in ./data).
    let stderr = cloud(&["api-key", "list"], ("CLOUD_ORG", ""));
    assert!(
        stderr.contains("CLOUD_ORG (--org) is set but empty: give it a value, or unset it")
            && stderr.contains("Usage: cloud api-key list"),
        "the refusal shows the usage of the command typed: {stderr}"
    );
    let stderr = cloud(&serve, ("CLOUD_DATABASE_URL", ""));
    assert!(
        stderr.contains("CLOUD_DATABASE_URL (--database-url) is set but empty"),
        "{stderr}"
    );
    assert!(!dir.path().join("signals.db").exists(), "started on SQLite");
    // Typed on the command line, the option wins over its empty variable (and the command
    // then finds no database here).
    let stderr = cloud(&["api-key", "list", "--org", "acme"], ("CLOUD_ORG", ""));
    assert!(
        !stderr.contains("set but empty") && stderr.contains("no database at"),
        "{stderr}"
    );
}

/// A `serve` on PostgreSQL given a SQLite deployment's data directory (the README's `./data`)
/// refuses it: it would replace the CA that deployment's bridges and clients trust.
#[test]
fn a_postgres_serve_leaves_a_sqlite_deployments_ca_alone() {
    let sqlite = testkit::Cloud::start(testkit::Backend::Sqlite);
    let ca = std::fs::read(sqlite.ca_path()).unwrap();
    let schema = PgSchema::create();
    let out = Command::new(cloud_bin())
        .args(SERVE)
        .arg("--data-dir")
        .arg(sqlite.data_dir.path())
        .args(["--database-url", &schema.url])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("holds a SQLite deployment's database (signals.db)")
            && stderr.contains("--data-dir DIR"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read(sqlite.ca_path()).unwrap(),
        ca,
        "the CA changed"
    );
}

#[test]
fn a_typed_data_dir_with_a_database_url_is_refused_by_admin_commands() {
    let dir = tempfile::tempdir().unwrap();
    let unreachable = "postgres://postgres@127.0.0.1:1/test";
    let run = |typed: bool| {
        let mut command = Command::new(cloud_bin());
        command
            .args(["org", "create", "acme"])
            .env("CLOUD_DATABASE_URL", unreachable);
        if typed {
            command.arg("--data-dir").arg(dir.path());
        } else {
            command.env("CLOUD_DATA_DIR", dir.path());
        }
        let out = command.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // Two stores named, one typed for this run and one carried by the shell: refused, and
    // nothing is made in either.
    let (code, typed) = run(true);
    assert_eq!(code, Some(2), "{typed}");
    assert!(
        typed.contains("--data-dir is typed and CLOUD_DATABASE_URL is set in the environment"),
        "{typed}"
    );
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    // Both from the environment: the database URL chooses PostgreSQL, as documented.
    let (_, both) = run(false);
    assert!(both.contains("127.0.0.1:1"), "{both}");
    assert!(!both.contains("--data-dir is typed"), "{both}");
}

/// `serve` on a PostgreSQL it cannot reach fails, and leaves no empty data directory behind
/// (it made one for its files); a directory that was there before stays.
#[test]
fn a_failed_serve_leaves_no_data_directory_it_made() {
    let dir = tempfile::tempdir().unwrap();
    let serve = |data: &std::path::Path| {
        Command::new(cloud_bin())
            .args(SERVE)
            .args(["--database-url", "postgres://postgres@127.0.0.1:1/test"])
            .arg("--data-dir")
            .arg(data)
            .output()
            .unwrap()
    };
    let made = dir.path().join("data");
    let out = serve(&made);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("127.0.0.1:1"),
        "{out:?}"
    );
    assert!(!made.exists(), "an empty data directory was left behind");
    let kept = dir.path().join("kept");
    std::fs::create_dir(&kept).unwrap();
    assert!(!serve(&kept).status.success());
    assert!(
        kept.is_dir(),
        "a data directory that was there before was removed"
    );
}

#[test]
fn a_storage_option_before_the_subcommand_is_said_where_it_goes() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(cloud_bin())
        .arg("--data-dir")
        .arg(dir.path())
        .args(["org", "create", "acme"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr
            .contains("--data-dir is an option of `cloud org create`: write it after `org create`"),
        "{stderr}"
    );
    // Where clap has a tip of its own (one level down), it is the only one.
    let out = Command::new(cloud_bin())
        .arg("--data-dir")
        .arg(dir.path())
        .arg("serve")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("'serve --data-dir' exists"), "{stderr}");
    assert!(!stderr.contains("is an option of"), "{stderr}");
}

#[test]
fn a_data_dir_that_is_a_file_is_said_as_such() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "mine\n").unwrap();
    let out = Command::new(cloud_bin())
        .args(SERVE)
        .arg("--data-dir")
        .arg(&file)
        .env_remove("CLOUD_DATABASE_URL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("it is not a directory; pass a directory"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&file).unwrap(), b"mine\n");
}

//! PostgreSQL databases through the bridge: real clients (`psql`, `tokio-postgres`) against
//! `cloud`'s TLS port, the real `bridge`, and a throwaway PostgreSQL cluster that requires
//! SCRAM, so that a wrong password anywhere fails as it would in production.

use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testkit::bridge::{BridgeProc, yaml_for};
use testkit::pg_cluster::{DATABASE, PASSWORD, PgCluster, USER};
use testkit::{Backend, Cloud, Tenant};
use tokio_postgres::config::SslNegotiation;

/// A cloud, an org, a bridge `dc1` declaring `entries`, connected.
struct DbRig {
    cloud: Cloud,
    tenant: Tenant,
    token: String,
    bridge: BridgeProc,
    /// A client certificate of no CA the cloud knows, as a libpq user may keep in
    /// `~/.postgresql/postgresql.crt` for other servers; `foreign_dir` holds it as PEM files.
    foreign: rcgen::CertifiedKey<rcgen::KeyPair>,
    foreign_dir: tempfile::TempDir,
}

impl DbRig {
    async fn start(entries: &str) -> DbRig {
        let cloud = Cloud::start(Backend::Sqlite);
        let tenant = cloud.tenant("acme");
        let token = cloud.admin(&["bridge-token", "create", "--org", "acme", "--name", "dc1"]);
        let bridge = start_bridge(&cloud, &token, entries).await;
        let foreign = rcgen::generate_simple_self_signed(["someone".to_string()]).unwrap();
        let foreign_dir = tempfile::tempdir().unwrap();
        std::fs::write(foreign_dir.path().join("client.crt"), foreign.cert.pem()).unwrap();
        let key = foreign_dir.path().join("client.key");
        std::fs::write(&key, foreign.signing_key.serialize_pem()).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        DbRig {
            cloud,
            tenant,
            foreign,
            foreign_dir,
            token,
            bridge,
        }
    }

    /// The libpq connection string of the docs, with `dbname=dc1/{database}`.
    fn conninfo(&self, database: &str) -> String {
        format!(
            "host=localhost hostaddr=127.0.0.1 port={} dbname=dc1/{database} user=anything sslmode=verify-full sslrootcert={}",
            self.cloud.tls_port(),
            self.cloud.ca_path().display()
        )
    }

    /// `psql -X CONNINFO ARGS…` with the org's API key as the password, to finish and run.
    fn psql_cmd(&self, conninfo: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", conninfo])
            .args(args)
            .env("PGPASSWORD", &self.tenant.api_key);
        cmd
    }

    fn psql(&self, database: &str, key: &str, sql: &str) -> Output {
        Command::new("psql")
            .args([
                "-X",
                "-At",
                "-v",
                "ON_ERROR_STOP=1",
                &self.conninfo(database),
                "-c",
                sql,
            ])
            .env("PGPASSWORD", key)
            .env("PGCONNECT_TIMEOUT", "20")
            .output()
            .expect("psql")
    }

    /// A `tokio-postgres` client through the cloud's port, with `negotiation`.
    async fn driver(
        &self,
        database: &str,
        key: &str,
        negotiation: SslNegotiation,
    ) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let mut config = tokio_postgres::Config::new();
        config
            .host("localhost")
            .hostaddr(std::net::IpAddr::from([127, 0, 0, 1]))
            .port(self.cloud.tls_port())
            .dbname(format!("dc1/{database}"))
            .user("anything")
            .password(key)
            .application_name("db-tests")
            .ssl_mode(tokio_postgres::config::SslMode::Require)
            .ssl_negotiation(negotiation)
            .connect_timeout(Duration::from_secs(20));
        let (client, connection) = config.connect(self.tls()).await?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// The driver's TLS: the cloud's CA, ALPN `postgresql`, and a client certificate of
    /// another CA, which the cloud must not ask for (libpq sends `~/.postgresql/postgresql.crt`
    /// whenever a server asks, and a foreign one would fail the handshake).
    fn tls(&self) -> tokio_postgres_rustls::MakeRustlsConnect {
        let mut roots = rustls::RootCertStore::empty();
        use rustls_pki_types::pem::PemObject;
        for cert in rustls_pki_types::CertificateDer::pem_file_iter(self.cloud.ca_path()).unwrap() {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(vec![self.foreign.cert.der().clone()], {
            let key = self.foreign.signing_key.serialize_der();
            rustls_pki_types::PrivatePkcs8KeyDer::from(key).into()
        })
        .unwrap();
        config.alpn_protocols = vec![b"postgresql".to_vec()];
        tokio_postgres_rustls::MakeRustlsConnect::new(config)
    }
}

async fn start_bridge(cloud: &Cloud, token: &str, entries: &str) -> BridgeProc {
    let yaml = yaml_for(cloud, "dc1", entries);
    let bridge = BridgeProc::start(
        &yaml,
        &[("SERVICE_BRIDGE_TOKEN", token), ("DB_PASSWORD", PASSWORD)],
    );
    bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    bridge
}

/// A `databases` entry for `cluster`, named `name`, with `extra` keys.
fn entry(cluster: &PgCluster, name: &str, extra: &str) -> String {
    format!(
        "  - name: {name}\n    type: postgresql\n    host: 127.0.0.1\n    port: {}\n    database: {DATABASE}\n    credentials: {{username: {USER}, password: \"${{DB_PASSWORD}}\"}}\n{extra}",
        cluster.port
    )
}

fn stdout(out: &Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn stderr(out: &Output, what: &str) -> String {
    assert!(!out.status.success(), "{what} should have failed");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

fn code(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.code().code().to_string())
        .unwrap_or_else(|| format!("no SQLSTATE: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_and_a_driver_reach_the_database_with_an_api_key() {
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;

    // psql, exactly as the docs say: the API key as the password, any user name.
    let out = rig.psql(
        "orders",
        &rig.tenant.api_key,
        "SELECT current_user, current_database(), current_setting('application_name')",
    );
    assert_eq!(stdout(&out, "psql"), format!("{USER}|{DATABASE}|psql"));
    // `options` and DateStyle, as libpq sends them from PGOPTIONS and PGDATESTYLE.
    let out = rig
        .psql_cmd(
            &rig.conninfo("orders"),
            &["-At", "-c", "SHOW search_path", "-c", "SHOW DateStyle"],
        )
        .env("PGOPTIONS", "-c search_path=audit_schema")
        .env("PGDATESTYLE", "German")
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out, "psql with options"),
        "audit_schema\nGerman, DMY"
    );
    // A psql that keeps a client certificate of another CA (the files libpq sends whenever
    // a server asks for one): the cloud asks for none, and the session opens.
    let dir = rig.foreign_dir.path();
    let with_cert = format!(
        "{} sslcert={} sslkey={}",
        rig.conninfo("orders"),
        dir.join("client.crt").display(),
        dir.join("client.key").display()
    );
    let out = rig
        .psql_cmd(&with_cert, &["-At", "-c", "SELECT 1"])
        .output()
        .unwrap();
    assert_eq!(stdout(&out, "psql with a foreign client certificate"), "1");

    // A driver over the SSLRequest path: a transaction across many round trips.
    let mut client = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .expect("driver connects");
    client
        .batch_execute("CREATE TABLE items (id int PRIMARY KEY, note text)")
        .await
        .unwrap();
    let tx = client.transaction().await.unwrap();
    for i in 0..200 {
        tx.execute(
            "INSERT INTO items VALUES ($1, $2)",
            &[&i, &format!("item {i}")],
        )
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    let n: i64 = client
        .query_one("SELECT count(*) FROM items", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 200);
    let app: String = client
        .query_one("SELECT current_setting('application_name')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        app, "db-tests",
        "the client's startup parameters are passed on"
    );

    // COPY of 100 MB out and back in.
    use futures_util::{SinkExt, StreamExt};
    let started = Instant::now();
    let out = client
        .copy_out("COPY (SELECT g, repeat('x', 1000) FROM generate_series(1, 100000) g) TO STDOUT")
        .await
        .unwrap();
    futures_util::pin_mut!(out);
    let mut copied = Vec::with_capacity(101 << 20);
    while let Some(chunk) = out.next().await {
        copied.extend_from_slice(&chunk.unwrap());
    }
    assert!(
        copied.len() > 100_000_000,
        "COPY OUT gave {} bytes",
        copied.len()
    );
    client
        .batch_execute("CREATE TABLE blobs (id int, body text)")
        .await
        .unwrap();
    let sink = client.copy_in("COPY blobs FROM STDIN").await.unwrap();
    futures_util::pin_mut!(sink);
    for piece in copied.chunks(1 << 20) {
        sink.send(bytes::Bytes::copy_from_slice(piece))
            .await
            .unwrap();
    }
    let rows = sink.finish().await.unwrap();
    assert_eq!(rows, 100_000);
    eprintln!("COPY 100 MB out and in: {:?}", started.elapsed());

    // PostgreSQL 17's direct TLS (ALPN `postgresql`), which psql 15 cannot do.
    let direct = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Direct)
        .await
        .expect("direct TLS connects");
    let one: i32 = direct.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);

    // The audit log has each session's start and end, with the principal and the bytes.
    drop(client);
    drop(direct);
    let records = rig.bridge.audit_records(10).await;
    let ends: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "session_end")
        .collect();
    assert!(ends.len() >= 2, "{records:?}");
    assert!(records.iter().any(|r| {
        r["event"] == "session_start"
            && r["kind"] == "database"
            && r["resource"] == "orders"
            && r["path"] == "/databases/orders/"
            && r["principal"]
                .as_str()
                .is_some_and(|p| p.starts_with("sigapi_"))
    }));
    assert!(
        ends.iter()
            .any(|r| r["bytes_out"].as_u64() > Some(100_000_000)
                && r["bytes_in"].as_u64() > Some(100_000_000)
                && r["ended"] == "closed"),
        "{ends:?}"
    );

    assert!(ends.iter().all(|r| r["duration_ms"].as_u64().is_some()));
    // The database password is in no output of either side.
    let cloud_metrics = rig
        .cloud
        .client()
        .get(format!("{}/metrics", rig.cloud.https))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for (what, text) in [
        ("bridge log", rig.bridge.log_text()),
        ("cloud log", rig.cloud.log_text()),
        ("bridge metrics", rig.bridge.metrics().await),
        ("cloud metrics", cloud_metrics),
        ("audit records", serde_json::to_string(&records).unwrap()),
    ] {
        assert!(
            !text.contains(PASSWORD),
            "{what} shows the database password"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_unknown_databases_and_plain_connections_are_refused_clearly() {
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!(
        "databases:\n{}{}",
        entry(&cluster, "orders", ""),
        entry(&cluster, "rotated", "").replace("${DB_PASSWORD}", "an-old-password")
    ))
    .await;

    // The entry's password is stale (rotated on the server): the client is told, and the
    // bridge counts it where the operator's alert looks.
    let err = stderr(
        &rig.psql("rotated", &rig.tenant.api_key, "SELECT 1"),
        "psql to an entry with a stale password",
    );
    assert!(err.contains("fix databases[].credentials"), "{err}");
    let metrics = rig.bridge.metrics().await;
    assert!(
        metrics.contains("bridge_refused_total{reason=\"upstream_auth\"} 1"),
        "{metrics}"
    );

    let wrong = rig
        .driver("orders", "sigapi_nope.nope", SslNegotiation::Postgres)
        .await;
    assert_eq!(code(&wrong.err().unwrap()), "28P01");
    let err = stderr(
        &rig.psql("orders", "wrong", "SELECT 1"),
        "psql with a wrong key",
    );
    assert!(err.contains("API key"), "{err}");
    // The org's signal key in place of an API key: said as such.
    let err = stderr(
        &rig.psql("orders", &rig.tenant.signal_key, "SELECT 1"),
        "psql with a signal key",
    );
    assert!(
        err.contains("the password is a signal key, not an API key"),
        "{err}"
    );
    // The operator sees failed logins (a password being guessed), never what was sent.
    let refused = rig.cloud.wait_log_line("database login refused");
    assert!(refused.contains("28P01"), "{refused}");
    assert!(!rig.cloud.log_text().contains("sigapi_nope"));

    let unknown = rig
        .driver("nope", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await;
    assert_eq!(code(&unknown.err().unwrap()), "3D000");
    let err = stderr(
        &rig.psql("nope", &rig.tenant.api_key, "SELECT 1"),
        "psql to an unknown database",
    );
    assert!(err.contains("declares no database"), "{err}");

    // Another org's key: its org has no bridge dc1.
    let other = rig.cloud.tenant("globex");
    let theirs = rig
        .driver("orders", &other.api_key, SslNegotiation::Postgres)
        .await;
    assert_eq!(code(&theirs.err().unwrap()), "3D000");

    // Without TLS the cloud never asks for the password.
    let plain_conninfo = format!(
        "host=127.0.0.1 port={} dbname=dc1/orders user=x sslmode=disable",
        rig.cloud.tls_port()
    );
    let plain = rig
        .psql_cmd(&plain_conninfo, &["-c", "SELECT 1"])
        .output()
        .unwrap();
    let err = stderr(&plain, "psql without TLS");
    assert!(err.contains("only inside TLS"), "{err}");

    // The plain HTTP port names the TLS port to a client that may go on without TLS (one that
    // requires it hears that the server has none).
    for sslmode in ["prefer", "disable"] {
        let out = rig
            .psql_cmd(
                &format!(
                    "host=127.0.0.1 port={} dbname=dc1/orders user=x sslmode={sslmode}",
                    rig.cloud.http.rsplit(':').next().unwrap()
                ),
                &["-c", "SELECT 1"],
            )
            .output()
            .unwrap();
        let err = stderr(&out, "psql to the plain HTTP port");
        assert!(
            err.contains("PostgreSQL clients connect to the TLS port of --listen"),
            "{sslmode}: {err}"
        );
    }

    // A replication connection is refused saying so (its commands would otherwise read as
    // syntax errors in an ordinary session).
    let out = rig
        .psql_cmd(
            &format!("{} replication=database", rig.conninfo("orders")),
            &["-c", "IDENTIFY_SYSTEM"],
        )
        .output()
        .unwrap();
    let err = stderr(&out, "a replication command");
    assert!(
        err.contains("replication connections (replication=database) are not served"),
        "{err}"
    );

    // GSS encryption is declined with `N`, as a server without it does.
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut raw = tokio::net::TcpStream::connect(("127.0.0.1", rig.cloud.tls_port()))
        .await
        .unwrap();
    raw.write_all(&[0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30])
        .await
        .unwrap();
    assert_eq!(raw.read_u8().await.unwrap(), b'N');

    // The HTTP API on the same port still works.
    let bridges = rig
        .cloud
        .client()
        .get(format!("{}/v1/bridges", rig.cloud.https))
        .bearer_auth(&rig.tenant.api_key)
        .send()
        .await
        .unwrap();
    assert_eq!(bridges.status(), 200);

    // A live bridge whose tunnel is down: 57P03.
    let mut rig = rig;
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let down = Instant::now();
    loop {
        let r = rig
            .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
            .await;
        match r {
            Err(e) if code(&e) == "57P03" => break,
            _ if down.elapsed() > Duration::from_secs(20) => {
                panic!("no 57P03 after the bridge stopped")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_statement_audit_limits_and_cancel() {
    let cluster = PgCluster::start(false);
    cluster.psql_local("CREATE TABLE t (x int)");
    let entries = format!(
        "databases:\n{}{}",
        entry(&cluster, "orders", "    max_connections: 2\n"),
        entry(
            &cluster,
            "orders-ro",
            "    read_only: true\n    audit_statements: true\n"
        )
    );
    let rig = DbRig::start(&entries).await;

    // read_only: the session refuses writes; reads work.
    let ro = rig
        .driver("orders-ro", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .unwrap();
    // Refused (read-only), but audited first: without the password.
    let refused = ro
        .batch_execute("ALTER ROLE nobody PASSWORD 'hunter2-secret'")
        .await;
    assert!(refused.is_err());
    let err = ro
        .execute("INSERT INTO t VALUES (1)", &[])
        .await
        .unwrap_err();
    assert_eq!(code(&err), "25006", "{err}");
    // A client's own `options` cannot turn it off at startup: the entry's setting comes last.
    let out = rig
        .psql_cmd(
            &rig.conninfo("orders-ro"),
            &["-c", "INSERT INTO t VALUES (2)"],
        )
        .env("PGOPTIONS", "-c default_transaction_read_only=off")
        .output()
        .unwrap();
    let err = stderr(&out, "an INSERT with read-only turned off in options");
    assert!(err.contains("read-only transaction"), "{err}");
    // A client encoding whose characters may end in a backslash: masked strictly, from the
    // session's start (the server's greeting says which encoding it speaks).
    let out = rig
        .psql_cmd(
            &rig.conninfo("orders-ro"),
            &["-c", "ALTER ROLE nobody PASSWORD 'sjis-secret'"],
        )
        .env("PGCLIENTENCODING", "SJIS")
        .output()
        .unwrap();
    assert!(!out.status.success());
    // Or once the server reports such an encoding mid-session, however the statement that set
    // it was spelled (here so that its text names no setting).
    let out = rig
        .psql_cmd(
            &rig.conninfo("orders-ro"),
            &[
                "-c",
                "SELECT set_config('client_enc' || 'oding', 'SJIS', false)",
                "-c",
                "ALTER ROLE later PASSWORD 'mid-secret'",
            ],
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let n: i64 = ro
        .query_one("SELECT count(*) FROM t", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 0);
    drop(ro);
    // The records reach the log as the statements pass: wait for the last one.
    testkit::wait_until("the last statement's audit record", || {
        rig.bridge
            .log_json()
            .iter()
            .any(|l| l["statement"] == "SELECT count(*) FROM t")
    })
    .await;
    let records = rig.bridge.audit_records(4).await;
    let statements: Vec<_> = records
        .iter()
        .filter(|r| r["event"] == "statement")
        .filter_map(|r| r["statement"].as_str())
        .collect();
    assert!(
        statements.contains(&"INSERT INTO t VALUES (1)"),
        "{statements:?}"
    );
    assert!(
        statements.contains(&"SELECT count(*) FROM t"),
        "{statements:?}"
    );
    assert!(
        statements.contains(&"ALTER ROLE nobody PASSWORD '…'"),
        "{statements:?}"
    );
    assert!(
        statements.contains(&"ALTER ROLE nobody PASSWORD…"),
        "{statements:?}"
    );
    assert!(
        statements.contains(&"ALTER ROLE later PASSWORD…"),
        "{statements:?}"
    );
    assert!(!rig.bridge.log_text().contains("hunter2"));
    assert!(!rig.bridge.log_text().contains("sjis-secret"));
    assert!(!rig.bridge.log_text().contains("mid-secret"));

    // max_connections: 2 → the third session gets 53300 with a message.
    let a = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .unwrap();
    let b = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .unwrap();
    let third = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await;
    let e = third.expect_err("a third session is refused");
    assert_eq!(code(&e), "53300", "{e}");
    assert!(message(&e).contains("max_connections"), "{}", message(&e));
    // A client that gives up while its session waits for a slot (psql's connect_timeout)
    // leaves nothing behind: the bridge records that it left, and never logs in for it.
    gives_up_waiting(
        &rig,
        rig.psql_cmd(&rig.conninfo("orders"), &["-c", "SELECT 1"]),
    )
    .await;

    // Cancel from the driver (inside TLS), while both slots are busy: a 30 s sleep ends long
    // before its time (a cancel takes no slot; the bound leaves room for a loaded machine).
    let token = a.cancel_token();
    let sleeping = tokio::spawn(async move { a.query("SELECT pg_sleep(30)", &[]).await });
    wait_for_sleeps(&cluster, "1").await;
    let asked = Instant::now();
    token.cancel_query(rig.tls()).await.expect("cancel sent");
    let e = sleeping.await.unwrap().unwrap_err();
    assert_eq!(code(&e), "57014", "{e}");
    drop(b);
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "cancel took {:?}",
        asked.elapsed()
    );

    // Cancel from psql's Ctrl-C, which psql 15 sends without TLS.
    let mut psql = sleeping_psql(&rig, &cluster).await;
    let asked = Instant::now();
    Command::new("kill")
        .args(["-INT", &psql.id().to_string()])
        .status()
        .unwrap();
    let status = psql.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(psql.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(
        err.contains("canceling statement due to user request"),
        "{err}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "cancel took {:?}",
        asked.elapsed()
    );

    // A client that goes away mid-statement without a word (killed: its connection cut, not
    // closed) leaves no statement running on the server, holding its slot.
    let mut psql = sleeping_psql(&rig, &cluster).await;
    psql.kill().unwrap();
    psql.wait().unwrap();
    wait_for_sleeps(&cluster, "0").await;

    // SIGTERM with a session running a statement: the bridge ends the session, cancels the
    // statement on the server, records why, and exits 0 at once.
    let open = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .unwrap();
    open.simple_query("SELECT 1").await.unwrap();
    let sleeping = tokio::spawn(async move { open.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeps(&cluster, "1").await;
    let mut rig = rig;
    rig.bridge.signal("TERM");
    assert_eq!(rig.bridge.wait(), Some(0));
    wait_for_sleeps(&cluster, "0").await;
    // The client is told why its session ended, not left with a closed connection.
    let Err(lost) = sleeping.await.unwrap() else {
        panic!("the session ended")
    };
    assert_eq!(code(&lost), "08006", "{lost:?}");
    assert!(
        message(&lost).contains("through the bridge was lost"),
        "{lost:?}"
    );
    let records = rig.bridge.audit_records(1).await;
    assert!(
        records
            .iter()
            .any(|r| r["event"] == "session_end" && r["ended"] == "bridge shutdown"),
        "{records:?}"
    );
}

/// Revoking an API key ends the database sessions it opened, as it ends its HTTP access: a
/// leaked key, once revoked, keeps no session open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_key_ends_its_open_sessions() {
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;
    let key = rig
        .cloud
        .admin(&["api-key", "create", "--org", "acme", "--name", "leaked"]);
    let kept = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .expect("a session of another key");
    let leaked = rig
        .driver("orders", &key, SslNegotiation::Postgres)
        .await
        .expect("a session of the key to revoke");
    leaked.simple_query("SELECT 1").await.unwrap();
    // A statement in progress, which the server would otherwise run to its end.
    let sleeping = tokio::spawn(async move { leaked.simple_query("SELECT pg_sleep(30)").await });
    wait_for_sleeps(&cluster, "1").await;
    let id = key.rsplit_once('_').unwrap().0.to_string();
    rig.cloud
        .admin(&["api-key", "revoke", "--org", "acme", &id]);
    let ended = tokio::time::timeout(Duration::from_secs(15), sleeping)
        .await
        .expect("the revoked key's session still runs")
        .unwrap();
    // The client is told why, in a FATAL it reads as PostgreSQL's own, not a cut connection.
    let error = ended.expect_err("the statement finished");
    let fatal = error.as_db_error().unwrap_or_else(|| panic!("{error}"));
    assert_eq!(fatal.code().code(), "28000", "{fatal}");
    assert!(fatal.message().contains("API key was revoked"), "{fatal}");
    // Not running on, on the server, either.
    wait_for_sleeps(&cluster, "0").await;
    // Only that key's sessions: the other goes on.
    kept.simple_query("SELECT 1")
        .await
        .expect("the other key's session");
    rig.cloud.wait_log_line("its API key was revoked");
}

/// Revoking the bridge's token ends its tunnel at once, open database sessions with it: hyper
/// kept the connection running for them, so the session went on until the bridge's heartbeats
/// timed out (three intervals: 90 s by default; 30 s intervals here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_the_bridge_token_ends_its_open_sessions() {
    let cluster = PgCluster::start(false);
    let entries = format!("databases:\n{}", entry(&cluster, "orders", ""));
    let mut rig = DbRig::start(&entries).await;
    // The same bridge with the default heartbeat's pace, so that heartbeats cannot end it.
    rig.bridge.signal("TERM");
    rig.bridge.wait();
    let yaml = yaml_for(&rig.cloud, "dc1", &entries)
        .replace("heartbeat_interval: 1\n", "heartbeat_interval: 30\n");
    rig.bridge = BridgeProc::start(
        &yaml,
        &[
            ("SERVICE_BRIDGE_TOKEN", &rig.token),
            ("DB_PASSWORD", PASSWORD),
        ],
    );
    rig.bridge
        .wait_status("connected", Duration::from_secs(20))
        .await;
    let session = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .expect("a session");
    session.simple_query("SELECT 1").await.unwrap();
    let sleeping = tokio::spawn(async move { session.simple_query("SELECT pg_sleep(60)").await });
    wait_for_sleeps(&cluster, "1").await;
    rig.cloud
        .admin(&["bridge-token", "revoke", "--org", "acme", "--name", "dc1"]);
    let ended = tokio::time::timeout(Duration::from_secs(15), sleeping)
        .await
        .expect("the session outlived its bridge's token")
        .unwrap();
    assert!(ended.is_err(), "the statement finished");
    rig.bridge
        .wait_status("unauthorized", Duration::from_secs(10))
        .await;
    wait_for_sleeps(&cluster, "0").await;
}

/// A client that stops reading cannot keep a revoked key's session: the cloud stops waiting for
/// it (the rest of the message in progress gets 5 s) and closes the session, so the statement
/// stops on the server and the client reads an end after what was already on its way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_cannot_keep_a_revoked_key_s_session() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;
    let key = rig
        .cloud
        .admin(&["api-key", "create", "--org", "acme", "--name", "stalled"]);
    let proxy = DbProxy::start(&rig, &key).await;
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .unwrap();
    // The protocol by hand (a driver would read everything): the startup message, then the
    // server's greeting up to ReadyForQuery.
    let params = b"user\0me\0database\0any\0\0";
    let mut startup = ((8 + params.len()) as u32).to_be_bytes().to_vec();
    startup.extend(196_608u32.to_be_bytes());
    startup.extend(params);
    client.write_all(&startup).await.unwrap();
    until_ready(&mut client).await;
    // Gigabytes of rows, which the client never reads: every buffer on the way fills and the
    // server waits to write.
    let sql = b"SELECT repeat('x', 1000) FROM generate_series(1, 10000000)\0";
    let mut query = vec![b'Q'];
    query.extend(((4 + sql.len()) as u32).to_be_bytes());
    query.extend(sql);
    client.write_all(&query).await.unwrap();
    let start = Instant::now();
    while cluster.psql_local(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT repeat%' AND wait_event = 'ClientWrite'",
    ) != "1"
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the server never waited to write"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let id = key.rsplit_once('_').unwrap().0.to_string();
    rig.cloud
        .admin(&["api-key", "revoke", "--org", "acme", &id]);
    let ended = rig.cloud.wait_log_line_within(
        "database session ended by the cloud",
        Duration::from_secs(20),
    );
    assert!(ended.contains("API key was revoked"), "{ended}");
    // The client, reading at last, gets what was on its way and then the end, far short of
    // the ten gigabytes it asked for.
    let mut taken = 0u64;
    let mut buf = vec![0; 64 * 1024];
    let drained = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match client.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => taken += n as u64,
            }
        }
    })
    .await;
    assert!(
        drained.is_ok(),
        "the connection stayed open after {taken} bytes"
    );
    assert!(
        taken < 1 << 30,
        "{taken} bytes: the statement ran to its end"
    );
    // And the statement does not run on, on the server.
    let start = Instant::now();
    while cluster
        .psql_local("SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT repeat%'")
        != "0"
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "the statement still runs on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The next message a raw-protocol client reads: (type, body).
async fn read_message(client: &mut tokio::net::TcpStream) -> (u8, Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let kind = client.read_u8().await.expect("a message");
    let len = client.read_u32().await.unwrap() as usize;
    let mut body = vec![0; len - 4];
    client.read_exact(&mut body).await.unwrap();
    (kind, body)
}

/// Reads (within 20 s) up to the next ReadyForQuery, which no error may precede; returns the
/// messages' types and bodies.
async fn until_ready(client: &mut tokio::net::TcpStream) -> Vec<(u8, Vec<u8>)> {
    let read = async {
        let mut seen = Vec::new();
        loop {
            let (kind, body) = read_message(client).await;
            assert_ne!(kind, b'E', "{}", String::from_utf8_lossy(&body));
            seen.push((kind, body));
            if kind == b'Z' {
                return seen;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("no ReadyForQuery within 20 s")
}

/// A client asking for a newer protocol (libpq 18's `max_protocol_version=latest` asks for
/// 3.2) or for protocol options is told 3.0 and which options were not taken, first, as a
/// PostgreSQL server older than the client does; the session then works in 3.0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_asking_for_a_newer_protocol_goes_on_in_3_0() {
    use tokio::io::AsyncWriteExt;
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;
    let proxy = DbProxy::start(&rig, &rig.tenant.api_key).await;
    let mut client = tokio::net::TcpStream::connect(("127.0.0.1", proxy.port))
        .await
        .unwrap();
    let params = b"user\0me\0database\0any\0_pq_.test_option\0on\0\0";
    let mut startup = ((8 + params.len()) as u32).to_be_bytes().to_vec();
    startup.extend((196_608u32 | 2).to_be_bytes());
    startup.extend(params);
    client.write_all(&startup).await.unwrap();
    let (kind, body) = read_message(&mut client).await;
    assert_eq!(kind, b'v', "{}", String::from_utf8_lossy(&body));
    let mut expected = 196_608u32.to_be_bytes().to_vec();
    expected.extend(1u32.to_be_bytes());
    expected.extend(b"_pq_.test_option\0");
    assert_eq!(body, expected, "3.0, and the one option not taken");
    until_ready(&mut client).await;
    let mut query = vec![b'Q'];
    let sql = b"SELECT 40 + 2 AS n\0";
    query.extend(((4 + sql.len()) as u32).to_be_bytes());
    query.extend(sql);
    client.write_all(&query).await.unwrap();
    let answer = until_ready(&mut client).await;
    let row = answer
        .iter()
        .find(|(kind, _)| *kind == b'D')
        .expect("a row");
    assert!(row.1.ends_with(b"42"), "{:?}", row.1);
}

/// A cloud shutting down tells psql why it ends the session, as PostgreSQL does when it
/// stops (FATAL 57P01), rather than cutting the connection mid-statement, and cancels the
/// statement the session was running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cloud_shutting_down_tells_psql_why() {
    let cluster = PgCluster::start(false);
    let mut rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;
    let psql = rig
        .psql_cmd(&rig.conninfo("orders"), &["-c", "SELECT pg_sleep(30)"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_sleeps(&cluster, "1").await;
    rig.cloud.signal("TERM");
    let out = psql.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("FATAL:  terminating connection: the service is shutting down"),
        "{err}"
    );
    // The statement does not run on, on the server, holding its connection and the bridge's
    // slot: the cloud cancels it before its tunnels close.
    wait_for_sleeps(&cluster, "0").await;
    assert_eq!(rig.cloud.wait(), Some(0));
}

/// A session still opening when the cloud stops (its database has not answered the bridge
/// yet) is told why it ends, on the TLS port and through `cloud db-proxy` alike, not cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_still_opening_at_shutdown_is_told_why() {
    let (entry, held) = silent_database();
    let mut rig = DbRig::start(&format!("databases:\n{entry}")).await;
    let proxy = DbProxy::start(&rig, &rig.tenant.api_key).await;
    let psql = |conninfo: String| {
        rig.psql_cmd(&conninfo, &["-c", "SELECT 1"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let direct = psql(rig.conninfo("orders"));
    let proxied = psql(format!(
        "host=127.0.0.1 port={} dbname=any user=anything",
        proxy.port
    ));
    // Both sessions wait on the silent server: the bridge has dialled it twice.
    let mut connections = Vec::new();
    for _ in 0..2 {
        connections.push(
            held.recv_timeout(Duration::from_secs(20))
                .expect("the bridge dialled"),
        );
    }
    rig.cloud.signal("TERM");
    for (what, client) in [("direct", direct), ("db-proxy", proxied)] {
        let out = client.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}");
        assert!(
            err.contains("FATAL:  the service is shutting down; connect again shortly"),
            "{what}: {err}"
        );
    }
    assert_eq!(rig.cloud.wait(), Some(0));
}

/// A database server that takes connections and never answers, as a `databases` entry named
/// `orders`; the receiver gets each connection that sent something (a session's: the bridge's
/// reachability checks send nothing), held open.
fn silent_database() -> (String, std::sync::mpsc::Receiver<std::net::TcpStream>) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let (opened, held) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for mut conn in silent.incoming().flatten() {
            let opened = opened.clone();
            std::thread::spawn(move || {
                use std::io::Read;
                if matches!(conn.read(&mut [0; 1]), Ok(1)) {
                    let _ = opened.send(conn);
                }
            });
        }
    });
    let entry = format!(
        "  - name: orders\n    type: postgresql\n    host: 127.0.0.1\n    port: {silent_port}\n    database: {DATABASE}\n    credentials: {{username: {USER}, password: \"${{DB_PASSWORD}}\"}}\n"
    );
    (entry, held)
}

/// A database that takes the bridge's connection and never answers is said to be silent: the
/// entry's sslmode, which the bridge's TLS request waited on, is not what to fix.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_that_never_answers_is_said_to_be_silent() {
    let (entry, _held) = silent_database();
    let rig = DbRig::start(&format!("databases:\n{entry}")).await;
    let out = rig
        .psql_cmd(&rig.conninfo("orders"), &["-c", "SELECT 1"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("did not finish the login within 10 s") && !err.contains("sslmode"),
        "{err}"
    );
}

/// A client that gives up while the bridge is still logging in (psql's connect_timeout) is said
/// to have left, when it leaves: the cloud said it had been told, once the bridge's login
/// failed (here 10 s later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_giving_up_during_the_login_is_said_to_have_left() {
    let (entry, _held) = silent_database();
    let rig = DbRig::start(&format!("databases:\n{entry}")).await;
    let out = rig
        .psql_cmd(&rig.conninfo("orders"), &["-c", "SELECT 1"])
        .env("PGCONNECT_TIMEOUT", "2")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let line = rig.cloud.wait_log_line_within(
        "the client closed its connection while the session waited to open",
        Duration::from_secs(6),
    );
    assert!(line.contains("database session not opened"), "{line}");
    assert!(
        !rig.cloud.log_text().contains("the client was told"),
        "{}",
        rig.cloud.log_text()
    );
}

/// Waits (up to 20 s) until `count` `pg_sleep` statements run on the cluster.
/// Runs `psql` while every slot of `orders` is held, giving up after 2 s (its
/// `connect_timeout`): it fails, and the bridge records that the client left before its stream
/// was forwarded (it never logs in for it).
async fn gives_up_waiting(rig: &DbRig, mut psql: Command) {
    let out = psql.env("PGCONNECT_TIMEOUT", "2").output().unwrap();
    assert!(!out.status.success());
    rig.bridge
        .audit_records_until("the record of a session whose client left waiting", |r| {
            r["resource"] == "orders"
                && r["rule"] == "the caller left before the stream was forwarded"
        })
        .await;
}

/// psql running `SELECT pg_sleep(30)` on `orders`, once the server runs it.
async fn sleeping_psql(rig: &DbRig, cluster: &PgCluster) -> std::process::Child {
    let psql = rig
        .psql_cmd(&rig.conninfo("orders"), &["-c", "SELECT pg_sleep(30)"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_sleeps(cluster, "1").await;
    psql
}

async fn wait_for_sleeps(cluster: &PgCluster, count: &str) {
    let start = Instant::now();
    while cluster.psql_local(
        "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep%' AND state = 'active'",
    ) != count
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "never {count} pg_sleep running on the server"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_database_and_a_bridge_restart_mid_session() {
    let cluster = PgCluster::start(true);
    let ca = cluster.ca_file.clone().unwrap();
    let entries = format!(
        "databases:\n{}{}",
        entry(
            &cluster,
            "orders",
            &format!(
                "    sslmode: verify-full\n    sslrootcert: {}\n",
                ca.display()
            )
        )
        .replace("host: 127.0.0.1", "host: localhost"),
        entry(&cluster, "plain", "    sslmode: disable\n")
    );
    let mut rig = DbRig::start(&entries).await;
    let client = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .expect("verify-full session");
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl, "the bridge reached the database over TLS");

    // The server refuses plain TCP: the client reads why, naming the bridge's entry.
    let plain = rig
        .driver("plain", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await;
    let e = plain.err().unwrap();
    assert!(
        message(&e).contains("cannot open database \"plain\""),
        "{}",
        message(&e)
    );
    // The cloud's log says the session was not opened, and never that it was.
    let said = rig.cloud.wait_log_line("database session not opened");
    assert!(said.contains("\"database\":\"plain\""), "{said}");
    assert!(
        !rig.cloud
            .log_text()
            .lines()
            .any(|l| l.contains("database session opened") && l.contains("\"plain\"")),
        "{}",
        rig.cloud.log_text()
    );

    // The bridge restarts mid-session: the client gets an error, not a hang.
    rig.bridge.signal("KILL");
    rig.bridge.wait();
    let failed = tokio::time::timeout(Duration::from_secs(20), client.query_one("SELECT 1", &[]))
        .await
        .expect("the query ends instead of hanging");
    assert!(failed.is_err());
    rig.bridge = start_bridge(&rig.cloud, &rig.token, &entries).await;
    let again = rig
        .driver("orders", &rig.tenant.api_key, SslNegotiation::Postgres)
        .await
        .expect("a new session after the restart");
    let one: i32 = again.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

/// `bridge check` logs in to each database for real and names the step that failed.
#[test]
fn check_names_the_failing_step_of_each_database() {
    let cluster = PgCluster::start(false);
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{closed}\nhealth_check_port: 0\ndatabases:\n{}{}{}{}",
        entry(&cluster, "good", ""),
        entry(&cluster, "wrongpw", "").replace("${DB_PASSWORD}", "not-the-password"),
        entry(&cluster, "missing", "").replace(&format!("database: {DATABASE}"), "database: nope"),
        entry(&cluster, "notls", "    sslmode: require\n"),
    ) + &format!(
        "  - {{name: closed, type: postgresql, host: 127.0.0.1, port: {closed}, database: x, credentials: {{username: u, password: p}}}}\n"
    );
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(testkit::bridge::bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .env("DB_PASSWORD", PASSWORD)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{text}"))
            .to_string()
    };
    assert!(line("good").contains("ok (logged in as \"app\""), "{text}");
    assert!(line("wrongpw").contains("authentication:"), "{text}");
    assert!(line("missing").contains("database:"), "{text}");
    assert!(line("notls").contains("TLS:"), "{text}");
    assert!(line("closed").contains("TCP:"), "{text}");
    assert!(!text.contains(PASSWORD), "{text}");
}

/// `cloud db-proxy` on a free loopback port, for the rig's cloud, with `api_key`; its log
/// (standard output, as for `serve`) in a file of its own.
struct DbProxy {
    child: std::process::Child,
    port: u16,
    log: tempfile::TempDir,
}

impl DbProxy {
    async fn start(rig: &DbRig, api_key: &str) -> DbProxy {
        Self::start_for(rig, api_key, "orders").await
    }

    async fn start_for(rig: &DbRig, api_key: &str, database: &str) -> DbProxy {
        let log = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new(testkit::cloud_bin())
            .args(["db-proxy", "--api-url"])
            .arg(format!("https://localhost:{}", rig.cloud.tls_port()))
            .arg("--ca-file")
            .arg(rig.cloud.ca_path())
            .args(["--bridge", "dc1", "--database", database])
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .env("CLOUD_API_KEY", api_key)
            .stdout(std::fs::File::create(log.path().join("db-proxy.log")).unwrap())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let start = Instant::now();
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "db-proxy did not listen"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        DbProxy { child, port, log }
    }

    /// Waits for a line of the proxy's log that holds `want`, and returns it.
    async fn log_line(&self, want: &str) -> String {
        let start = Instant::now();
        loop {
            let text = std::fs::read_to_string(self.log.path().join("db-proxy.log")).unwrap();
            if let Some(line) = text.lines().find(|l| l.contains(want)) {
                return line.to_string();
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "no {want:?} in:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn psql(&self, sql: &str) -> Output {
        Command::new("psql")
            .args(["-X", "-At", "-w"])
            .arg(format!(
                "host=127.0.0.1 port={} dbname=any user=me",
                self.port
            ))
            .args(["-c", sql])
            .env_remove("PGPASSWORD")
            .output()
            .unwrap()
    }
}

impl Drop for DbProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn db_proxy_serves_local_clients_without_a_password_over_https() {
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!(
        "databases:\n{}",
        entry(&cluster, "orders", "    max_connections: 1\n")
    ))
    .await;
    let proxy = DbProxy::start(&rig, &rig.tenant.api_key).await;
    let out = proxy.psql("SELECT current_user, current_database()");
    assert_eq!(
        stdout(&out, "psql through db-proxy"),
        format!("{USER}|{DATABASE}")
    );

    // Ctrl-C through the proxy cancels the statement.
    let psql_at_proxy = |sql: &str| {
        let mut cmd = Command::new("psql");
        cmd.args(["-X", "-w"])
            .arg(format!(
                "host=127.0.0.1 port={} dbname=any user=me",
                proxy.port
            ))
            .args(["-c", sql])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    };
    let mut psql = psql_at_proxy("SELECT pg_sleep(30)").spawn().unwrap();
    wait_for_sleeps(&cluster, "1").await;
    Command::new("kill")
        .args(["-INT", &psql.id().to_string()])
        .status()
        .unwrap();
    let asked = Instant::now();
    let status = psql.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(psql.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!status.success());
    assert!(
        err.contains("canceling statement due to user request"),
        "{err}"
    );
    assert!(
        asked.elapsed() < Duration::from_secs(15),
        "{:?}",
        asked.elapsed()
    );

    // A client that gives up while its session waits for the one slot ends it: the bridge
    // records that it left, and never logs in for it. One killed mid-statement leaves nothing
    // running: db-proxy closes its connection to the cloud without a Terminate, and the cloud
    // cancels the statement.
    let mut holder = psql_at_proxy("SELECT pg_sleep(30)").spawn().unwrap();
    wait_for_sleeps(&cluster, "1").await;
    gives_up_waiting(&rig, psql_at_proxy("SELECT 1")).await;
    holder.kill().unwrap();
    holder.wait().unwrap();
    wait_for_sleeps(&cluster, "0").await;

    // A key revoked once db-proxy runs: the local client reads why (within the second the
    // revocation takes to reach the cloud's key cache).
    let key = rig
        .cloud
        .admin(&["api-key", "create", "--org", "acme", "--name", "proxy"]);
    let revoked = DbProxy::start(&rig, &key).await;
    let id = key.rsplit_once('_').unwrap().0.to_string();
    rig.cloud
        .admin(&["api-key", "revoke", "--org", "acme", &id]);
    let start = Instant::now();
    let err = loop {
        let out = revoked.psql("SELECT 1");
        if !out.status.success() {
            break String::from_utf8_lossy(&out.stderr).into_owned();
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the revoked key still works"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(err.contains("refused CLOUD_API_KEY"), "{err}");

    // A database the bridge does not declare: the client reads why, and so does the proxy's log.
    let missing = DbProxy::start_for(&rig, &rig.tenant.api_key, "nosuch").await;
    let warned = missing.log_line("declares no such entry").await;
    assert!(warned.contains("nosuch"), "{warned}");
    let err = stderr(&missing.psql("SELECT 1"), "psql through db-proxy to nosuch");
    assert!(err.contains("nosuch"), "{err}");
    let line = missing.log_line("session not opened").await;
    assert!(line.contains("nosuch") && line.contains("3D000"), "{line}");

    // Refused at start: a non-loopback address, a port already taken, no key in the
    // environment, a key the cloud refuses, and a cloud whose certificate the CA given (here
    // none: the public roots) does not vouch for.
    let cloud_url = format!("https://localhost:{}", rig.cloud.tls_port());
    let ca = rig.cloud.ca_path().display().to_string();
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = holder.local_addr().unwrap().to_string();
    for (args, env_key, want) in [
        (
            vec!["--listen", &taken, "--api-url", "https://localhost:1"],
            Some("k"),
            "; give a free port with --listen",
        ),
        (
            vec!["--listen", "0.0.0.0:0", "--api-url", "https://localhost:1"],
            Some("k"),
            "not a loopback address",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--api-url",
                "https://localhost:1",
            ],
            None,
            "CLOUD_API_KEY is not set",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--api-url",
                "https://localhost:1",
            ],
            Some("sigapi_a\u{200b}b"),
            "CLOUD_API_KEY holds characters other than printable ASCII",
        ),
        (
            vec![
                "--listen",
                "127.0.0.1:0",
                "--api-url",
                &cloud_url,
                "--ca-file",
                &ca,
            ],
            Some("sigapi_nope.nope"),
            "refused CLOUD_API_KEY",
        ),
        (
            vec!["--listen", "127.0.0.1:0", "--api-url", &cloud_url],
            Some(rig.tenant.api_key.as_str()),
            "TLS to the cloud failed",
        ),
    ] {
        let mut cmd = Command::new(testkit::cloud_bin());
        cmd.args(["db-proxy", "--bridge", "dc1", "--database", "orders"])
            .args(&args)
            .env_remove("CLOUD_API_KEY");
        if let Some(k) = env_key {
            cmd.env("CLOUD_API_KEY", k);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(want),
            "{out:?}"
        );
    }
    // Several mistakes at once are said together, so one run shows them all.
    let out = Command::new(testkit::cloud_bin())
        .args(["db-proxy", "--database", "team/orders"])
        .args(["--listen", "0.0.0.0:0", "--api-url", "http://10.0.0.1:8000"])
        .args(["--ca-file", "/nonexistent/ca.pem", "--bridge", "dc 1"])
        .env("CLOUD_API_KEY", " ")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let said = String::from_utf8_lossy(&out.stderr);
    for want in [
        "5 problems with `cloud db-proxy`'s options",
        "CLOUD_API_KEY is set but blank (empty or only whitespace)",
        "--bridge \"dc 1\" is not a valid name: expected 1 to 63 lowercase letters",
        "--database \"team/orders\" is not a valid name: expected 1-63 characters of letters",
        "--api-url http://10.0.0.1:8000/: expected https://",
        "not a loopback address",
    ] {
        assert!(said.contains(want), "{want:?} in {said}");
    }
}

/// MD5 logins work; a password asked for in clear goes only to a server whose certificate the
/// bridge checked, so over plain TCP the login fails and says why.
#[test]
fn md5_works_and_a_cleartext_password_goes_only_to_a_verified_server() {
    let cluster = PgCluster::start_with_hba(
        "host all legacy 127.0.0.1/32 md5\nhost all plainpw 127.0.0.1/32 password\nhost all all 127.0.0.1/32 scram-sha-256",
    );
    cluster.psql_local(
        "SET password_encryption = 'md5'; CREATE ROLE legacy LOGIN PASSWORD 'legacy-pw'; CREATE ROLE plainpw LOGIN PASSWORD 'plain-pw'",
    );
    assert!(
        cluster
            .psql_local("SELECT rolpassword FROM pg_authid WHERE rolname = 'legacy'")
            .starts_with("md5")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bridge.yaml");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let db = |name: &str, user: &str, pw: &str| {
        format!(
            "  - {{name: {name}, type: postgresql, host: 127.0.0.1, port: {}, database: {DATABASE}, credentials: {{username: {user}, password: {pw}}}, sslmode: disable}}\n",
            cluster.port
        )
    };
    let yaml = format!(
        "name: dc1\ntoken: x\napi_url: https://127.0.0.1:{closed}\nhealth_check_port: 0\ndatabases:\n{}{}",
        db("md5", "legacy", "legacy-pw"),
        db("clear", "plainpw", "plain-pw"),
    );
    std::fs::write(&path, yaml).unwrap();
    let out = Command::new(testkit::bridge::bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let line = |name: &str| {
        text.lines()
            .find(|l| l.contains(&format!(" {name} ")))
            .unwrap_or_else(|| panic!("no line for {name} in:\n{text}"))
            .to_string()
    };
    assert!(
        line("md5").contains("ok (logged in as \"legacy\""),
        "{text}"
    );
    assert!(
        line("clear").contains("authentication: the server asks for the password in clear"),
        "{text}"
    );
    assert!(!cluster.log().contains("plain-pw"));
}

/// PgBouncer in front of the cloud's port, pooling an application's connections as people
/// pool a managed database's: it logs in with the API key over verified TLS and passes
/// queries; and in front of `cloud db-proxy`, without a password. It refuses a login message
/// that arrives in pieces, so the greeting goes out whole from both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbouncer_in_front_of_the_cloud_or_db_proxy_logs_in() {
    let cluster = PgCluster::start(false);
    let rig = DbRig::start(&format!("databases:\n{}", entry(&cluster, "orders", ""))).await;
    let proxy = DbProxy::start(&rig, &rig.tenant.api_key).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("cloud-ca.pem");
    std::fs::copy(rig.cloud.ca_path(), &ca).unwrap();
    let tls = format!(
        "server_tls_sslmode = verify-full\nserver_tls_ca_file = {}\n",
        ca.display()
    );
    let servers = [
        (
            "the cloud's port",
            format!(
                "host=localhost port={} dbname=dc1/orders user=ci password={}",
                rig.cloud.tls_port(),
                rig.tenant.api_key
            ),
            tls.as_str(),
        ),
        (
            "db-proxy",
            format!("host=127.0.0.1 port={} dbname=orders user=ci", proxy.port),
            "",
        ),
    ];
    for (what, server, extra) in servers {
        let home = tempfile::tempdir_in(dir.path()).unwrap();
        let bouncer =
            testkit::pgbouncer::Bouncer::start(home.path(), "orders", &server, "app", extra)
                .unwrap();
        let conninfo = format!(
            "host=127.0.0.1 port={} dbname=orders user=app sslmode=disable",
            bouncer.port
        );
        for _ in 0..2 {
            let out = Command::new("psql")
                .args(["-X", "-At", "-v", "ON_ERROR_STOP=1", &conninfo, "-c"])
                .arg("SELECT current_user, 41 + 1")
                .env("PGCONNECT_TIMEOUT", "20")
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{what}: {}\npgbouncer's log:\n{}",
                String::from_utf8_lossy(&out.stderr),
                std::fs::read_to_string(&bouncer.log).unwrap_or_default()
            );
            assert_eq!(
                String::from_utf8_lossy(&out.stdout).trim(),
                format!("{USER}|42"),
                "{what}"
            );
        }
        // Not by retrying: PgBouncer drops a login that came in pieces and tries again.
        let log = std::fs::read_to_string(&bouncer.log).unwrap_or_default();
        assert!(!log.contains("partial pkt"), "{what}: {log}");
    }
}

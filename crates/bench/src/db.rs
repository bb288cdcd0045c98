//! `bench db`: `pgbench -S` (select-only) through the cloud's PostgreSQL port (TLS from the
//! client, the tunnel, the bridge's own login) against the same database directly and
//! through PgBouncer (session mode, one hop: the peer doing comparable work), interleaved in
//! one run, at 1 and 16 clients, after the RSS of `cloud` and `bridge` holding 100 idle
//! sessions. The server is a throwaway cluster that requires SCRAM, as in the tests.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use testkit::pg_cluster::{DATABASE, PASSWORD, PgCluster, USER};
use testkit::pgbouncer::Bouncer;

use crate::procs::{bridge_token, start, start_bridge, status_mb};
use crate::sample::median;

/// Options of `bench db`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Seconds per pgbench run.
    #[arg(long, default_value_t = 10)]
    pub secs: u64,
    /// Runs of each arm and client count, interleaved.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// pgbench scale (rows of pgbench_accounts: 100,000 per unit).
    #[arg(long, default_value_t = 5)]
    pub scale: u32,
    /// Idle sessions held open for the memory figure.
    #[arg(long, default_value_t = 100)]
    pub idle: usize,
    /// pgbench's worker threads (`-j`), 1 as pgbench's own default; 0: one per client.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Async worker threads of `cloud` (TOKIO_WORKER_THREADS); default its own.
    #[arg(long)]
    pub cloud_threads: Option<usize>,
}

/// One way to reach the database: a libpq connection string and its password.
struct Arm {
    label: &'static str,
    conninfo: String,
    password: Option<String>,
}

/// One pgbench run: (transactions per second, p50 latency in ms).
fn pgbench(arm: &Arm, clients: usize, threads: usize, secs: u64) -> Result<(f64, f64)> {
    let threads = if threads == 0 {
        clients
    } else {
        threads.min(clients)
    };
    let dir = tempfile::tempdir()?;
    let prefix = dir.path().join("log");
    let mut cmd = Command::new("pgbench");
    cmd.args([
        "-n",
        "-S",
        "-c",
        &clients.to_string(),
        "-j",
        &threads.to_string(),
    ])
    .args(["-T", &secs.to_string(), "--log", "--log-prefix"])
    .arg(&prefix)
    .arg(&arm.conninfo)
    .env_remove("PGPASSWORD");
    if let Some(pw) = &arm.password {
        cmd.env("PGPASSWORD", pw);
    }
    let out = cmd
        .output()
        .context("pgbench (Debian package postgresql-contrib)")?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "pgbench via {} failed: {}{}",
            arm.label,
            text,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let tps = text
        .lines()
        .find_map(|l| l.strip_prefix("tps = "))
        .and_then(|l| l.split_whitespace().next())
        .and_then(|v| v.parse::<f64>().ok())
        .with_context(|| format!("no tps in pgbench's output: {text}"))?;
    // Per-transaction log lines: client, transaction, latency in µs, script, epoch s, µs.
    let mut latencies = Vec::new();
    for entry in std::fs::read_dir(dir.path())? {
        let body = std::fs::read_to_string(entry?.path())?;
        latencies.extend(
            body.lines()
                .filter_map(|l| l.split_whitespace().nth(2)?.parse::<f64>().ok())
                .map(|us| us / 1000.0),
        );
    }
    Ok((tps, median(&latencies)))
}

/// Runs the database benchmark.
pub async fn run(args: Args) -> Result<()> {
    let cluster = PgCluster::start_sized(false, 200);
    let init = Command::new("pgbench")
        .args(["-i", "-q", "-s", &args.scale.to_string(), "-h"])
        .arg(cluster.socket_dir())
        .args(["-p", &cluster.port.to_string(), "-U", USER, DATABASE])
        .output()
        .context("pgbench -i")?;
    if !init.status.success() {
        bail!("pgbench -i: {}", String::from_utf8_lossy(&init.stderr));
    }
    let (cloud, _, api_key) = start(&[], args.cloud_threads)?;
    let token = bridge_token(&cloud)?;
    let entry = format!(
        "databases:\n  - {{name: orders, type: postgresql, host: 127.0.0.1, port: {}, database: {DATABASE}, credentials: {{username: {USER}, password: {PASSWORD}}}, sslmode: disable}}\n",
        cluster.port
    );
    let bridge = start_bridge(&cloud, &token, &entry, 150 + args.idle)?;
    let work = tempfile::tempdir()?;
    std::fs::set_permissions(
        work.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )?;
    // PgBouncer in session mode in front of the cluster, logging in to it with SCRAM.
    let bouncer = Bouncer::start(
        work.path(),
        DATABASE,
        &format!(
            "host=127.0.0.1 port={} dbname={DATABASE} user={USER} password={PASSWORD}",
            cluster.port
        ),
        USER,
        "max_client_conn = 200\ndefault_pool_size = 40\n",
    )
    .map_err(anyhow::Error::msg)?;
    let bouncer_port = bouncer.port;
    let arms = [
        Arm {
            label: "direct",
            conninfo: format!(
                "host=127.0.0.1 port={} dbname={DATABASE} user={USER} sslmode=disable",
                cluster.port
            ),
            password: Some(PASSWORD.into()),
        },
        Arm {
            label: "cloud port (TLS + tunnel)",
            conninfo: format!(
                "host=localhost hostaddr=127.0.0.1 port={} dbname=dc1/orders user=x sslmode=verify-full sslrootcert={}",
                cloud.tls_port,
                cloud.dir.path().join("ca.pem").display()
            ),
            password: Some(api_key.clone()),
        },
        Arm {
            label: "pgbouncer (session, one hop)",
            conninfo: format!(
                "host=127.0.0.1 port={bouncer_port} dbname={DATABASE} user={USER} sslmode=disable"
            ),
            password: None,
        },
    ];
    // Memory first, before pgbench's load raises the high-water marks: idle sessions held
    // through the cloud's port.
    let pids = [("cloud", cloud.child.id()), ("bridge", bridge.pid())];
    let before: Vec<f64> = pids.iter().map(|p| status_mb(p.1, "VmRSS:")).collect();
    let tls = tls_to(&cloud.dir.path().join("ca.pem"))?;
    let mut sessions = Vec::new();
    for _ in 0..args.idle {
        let mut config = tokio_postgres::Config::new();
        config
            .host("localhost")
            .hostaddr(std::net::IpAddr::from([127, 0, 0, 1]))
            .port(cloud.tls_port)
            .dbname("dc1/orders")
            .user("x")
            .password(&api_key)
            .ssl_mode(tokio_postgres::config::SslMode::Require);
        let (client, connection) = config.connect(tls.clone()).await?;
        tokio::spawn(connection);
        client.simple_query("SELECT 1").await?;
        sessions.push(client);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    for ((name, pid), before) in pids.iter().zip(&before) {
        let now = status_mb(*pid, "VmRSS:");
        println!(
            "{name}: RSS {before:.1} MB before, {now:.1} MB with {} idle sessions ({:.1} KB each), peak so far {:.1} MB",
            args.idle,
            (now - before) * 1024.0 / args.idle as f64,
            status_mb(*pid, "VmHWM:")
        );
    }
    drop(sessions);
    println!(
        "pgbench -S, {} s per run, {} runs interleaved, scale {}, -j {}",
        args.secs,
        args.runs,
        args.scale,
        if args.threads == 0 {
            "clients".to_string()
        } else {
            args.threads.to_string()
        }
    );
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); arms.len() * 2];
    for run in 0..args.runs {
        for (c, clients) in [1usize, 16].into_iter().enumerate() {
            for (a, arm) in arms.iter().enumerate() {
                let (tps, p50) = pgbench(arm, clients, args.threads, args.secs)?;
                // Sessions that outlive their client would show here (pgbouncer keeps its
                // pool open, so only before its first run).
                if run == 0 && clients == 16 && a == 1 {
                    println!(
                        "server sessions open after the clients left: {}",
                        cluster.psql_local(
                            "SELECT count(*) - 1 FROM pg_stat_activity WHERE backend_type = 'client backend'"
                        )
                    );
                }
                println!(
                    "run {run} clients {clients:>2} {:<30} tps {tps:>9.0}  p50 {p50:.3} ms",
                    arm.label
                );
                results[c * arms.len() + a].push((tps, p50));
            }
        }
    }
    println!("\nmedians:");
    println!("| clients | arm | tps | p50 ms |");
    println!("|---|---|---|---|");
    let mut med = Vec::new();
    for (c, clients) in [1usize, 16].into_iter().enumerate() {
        for (a, arm) in arms.iter().enumerate() {
            let r = &results[c * arms.len() + a];
            let tps = median(&r.iter().map(|x| x.0).collect::<Vec<_>>());
            let p50 = median(&r.iter().map(|x| x.1).collect::<Vec<_>>());
            println!("| {clients} | {} | {tps:.0} | {p50:.3} |", arm.label);
            med.push((tps, p50));
        }
    }
    let (direct1, cloud1, bouncer1) = (med[0], med[1], med[2]);
    let (direct16, cloud16, bouncer16) = (med[3], med[4], med[5]);
    println!(
        "\nadded p50 per query at 1 client: cloud {:.3} ms (target ≤ 0.3), pgbouncer {:.3} ms",
        cloud1.1 - direct1.1,
        bouncer1.1 - direct1.1
    );
    println!(
        "tps at 16 clients, share of direct: cloud {:.2} (target ≥ 0.40), pgbouncer {:.2}; cloud/pgbouncer {:.2}",
        cloud16.0 / direct16.0,
        bouncer16.0 / direct16.0,
        cloud16.0 / bouncer16.0
    );

    drop(bouncer);
    Ok(())
}

fn tls_to(ca: &Path) -> Result<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(cert?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

//! Starting the real `cloud` (and `bridge`) binaries that sit next to this one (or in another
//! directory, to compare two builds in one run).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use anyhow::{Context, Result, bail};

/// A running `cloud serve` with an org `bench`.
pub struct Server {
    /// The process.
    pub child: Child,
    /// Its plain-HTTP address.
    pub addr: SocketAddr,
    /// Its TLS port.
    pub tls_port: u16,
    /// Its data directory.
    pub dir: tempfile::TempDir,
    /// The directory its binary came from (the bridge is taken from the same one).
    pub bin_dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A sibling binary of this one (`cloud`, `bridge`).
pub fn sibling(name: &str) -> Result<std::path::PathBuf> {
    let bin = std::env::current_exe()?.with_file_name(name);
    if !bin.exists() {
        bail!(
            "{} not found; run `cargo build --release --workspace` first",
            bin.display()
        );
    }
    Ok(bin)
}

/// `name` in `dir`, which must exist.
fn bin_in(dir: &Path, name: &str) -> Result<PathBuf> {
    let bin = dir.join(name);
    if !bin.is_file() {
        bail!("{} not found", bin.display());
    }
    Ok(bin)
}

/// Starts `cloud serve` on `db` (empty: SQLite) with org `bench`, with `threads` async worker
/// threads (`None`: one per core, the default); returns it, a signal key and an API key.
pub fn start(db: &[String], threads: Option<usize>) -> Result<(Server, String, String)> {
    let here = sibling("cloud")?;
    start_from(here.parent().context("bin dir")?, db, threads)
}

/// [`start`] with the `cloud` binary of `bin_dir`.
pub fn start_from(
    bin_dir: &Path,
    db: &[String],
    threads: Option<usize>,
) -> Result<(Server, String, String)> {
    let cloud_bin = || bin_in(bin_dir, "cloud");
    let dir = tempfile::tempdir()?;
    let mut storage = vec!["--data-dir".to_string(), dir.path().display().to_string()];
    storage.extend_from_slice(db);
    let mut child = Command::new(cloud_bin()?)
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--http-listen",
            "127.0.0.1:0",
        ])
        .args(["--signal-rate-limit", "0", "--log-level", "warn,cloud=info"])
        .envs(threads.map(|n| ("TOKIO_WORKER_THREADS", n.to_string())))
        .args(&storage)
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut tls_port = 0;
    let addr = loop {
        let line = lines.next().context("cloud exited before listening")??;
        let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if v["message"] == "listening" && v["scheme"] == "https" {
            let a: SocketAddr = v["addr"].as_str().context("addr")?.parse()?;
            tls_port = a.port();
        }
        if v["message"] == "listening" && v["scheme"] == "http" {
            break v["addr"].as_str().context("addr")?.parse()?;
        }
    };
    relay_warnings(format!("cloud ({})", bin_dir.display()), lines);
    let server = Server {
        child,
        addr,
        tls_port,
        dir,
        bin_dir: bin_dir.to_path_buf(),
    };
    // After `serve`: it creates the database; admin commands never do.
    let admin = |args: &[&str]| -> Result<String> {
        let out = Command::new(cloud_bin()?)
            .args(args)
            .args(&storage)
            .output()?;
        if !out.status.success() {
            bail!("cloud {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    };
    admin(&["org", "create", "bench"])?;
    let signal_key = admin(&["signal-key", "create", "--org", "bench"])?;
    let api_key = admin(&["api-key", "create", "--org", "bench"])?;
    Ok((server, signal_key, api_key))
}

/// Reads a child's JSON log lines to the end in a thread, printing the first 20 warnings and
/// errors to stderr: a benchmark whose server complains measures something else.
fn relay_warnings(
    name: String,
    lines: impl Iterator<Item = std::io::Result<String>> + Send + 'static,
) {
    std::thread::spawn(move || {
        let mut shown = 0;
        for line in lines.map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            let level = v["level"].as_str().unwrap_or("").to_ascii_lowercase();
            if level == "warn" || level == "error" {
                shown += 1;
                if shown <= 20 {
                    eprintln!("[{name}] {line}");
                } else if shown == 21 {
                    eprintln!("[{name}] (more warnings not shown)");
                }
            }
        }
    });
}

/// A field of `/proc/PID/status` given in kB (`VmRSS:`, `VmHWM:`), in MB; 0 if unreadable.
pub fn status_mb(pid: u32, field: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

/// Peak RSS (VmHWM) of a process, MB.
pub fn peak_rss_mb(pid: u32) -> f64 {
    status_mb(pid, "VmHWM:")
}

/// A free loopback port (free when asked: another process may take it before it is used).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// Creates a bridge token for bridge `dc1` of org `bench` on `cloud`.
pub fn bridge_token(cloud: &Server) -> Result<String> {
    let args = ["bridge-token", "create", "--org", "bench", "--name", "dc1"];
    let out = Command::new(bin_in(&cloud.bin_dir, "cloud")?)
        .args(args)
        .arg("--data-dir")
        .arg(cloud.dir.path())
        .output()?;
    if !out.status.success() {
        bail!(
            "bridge-token create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// A running `bridge`, killed on drop.
pub struct Bridge(Child);

impl Bridge {
    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the `bridge` of `cloud`'s bin dir as `dc1` with `token`, declaring `resources`
/// (YAML of `apis:`/`sources:` at the top level), and waits until its tunnel is up. It logs
/// warnings only and audits into a file of its own in the cloud's temp data dir, so that
/// neither floods stdout; its stdout is still read at info level, for the line that says it
/// connected.
pub fn start_bridge(
    cloud: &Server,
    token: &str,
    resources: &str,
    max_connections: usize,
) -> Result<Bridge> {
    // Each instance has its own health port, and by it its own config and audit file: two
    // processes appending to one file would interleave its hash chain.
    let health_port = free_port()?;
    let yaml = format!(
        "name: dc1\napi_url: https://localhost:{}\ntls_ca_file: {}\nhealth_check_port: {health_port}\nlog_level: warn\nmax_connections: {max_connections}\naudit_log: {}\n{resources}",
        cloud.tls_port,
        cloud.dir.path().join("ca.pem").display(),
        cloud
            .dir
            .path()
            .join(format!("audit-{health_port}.log"))
            .display(),
    );
    let path = cloud.dir.path().join(format!("bridge-{health_port}.yaml"));
    std::fs::write(&path, yaml)?;
    let mut child = Command::new(bin_in(&cloud.bin_dir, "bridge")?)
        .args(["run", "--config"])
        .arg(&path)
        .env("SERVICE_BRIDGE_TOKEN", token)
        .env("SERVICE_LOG_LEVEL", "info")
        .stdout(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().context("stdout")?;
    let bridge = Bridge(child);
    let mut lines = BufReader::new(stdout).lines();
    loop {
        let line = lines.next().context("bridge exited before connecting")??;
        if line.contains("Bridge connected successfully") {
            break;
        }
    }
    relay_warnings(format!("bridge ({})", cloud.bin_dir.display()), lines);
    Ok(bridge)
}

/// A fresh schema on a PostgreSQL server for one benchmark: `--database-url` arguments that
/// point `cloud` at it, and [`PgSchema::drop`] to remove it.
pub struct PgSchema {
    pool: sqlx::PgPool,
    name: String,
    /// `["--database-url", URL scoped to the schema]`.
    pub args: Vec<String>,
}

impl PgSchema {
    /// Creates `bench_<random>` on `url`.
    pub async fn create(url: &str) -> Result<PgSchema> {
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let pool = sqlx::PgPool::connect(url)
            .await
            .context("connect to --pg-url")?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE SCHEMA {name}")))
            .execute(&pool)
            .await?;
        let sep = if url.contains('?') { '&' } else { '?' };
        let scoped = format!("{url}{sep}options=-c%20search_path%3D{name}");
        Ok(PgSchema {
            pool,
            name,
            args: vec!["--database-url".into(), scoped],
        })
    }

    /// Drops the schema and everything in it.
    pub async fn drop(self) -> Result<()> {
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.name
        )))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}

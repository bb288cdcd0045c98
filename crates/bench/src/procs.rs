//! Starting the real `cloud` (and `bridge`) binaries that sit next to this one.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
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

fn cloud_bin() -> Result<std::path::PathBuf> {
    sibling("cloud")
}

/// Starts `cloud serve` on `db` (empty: SQLite) with org `bench`, with `threads` async worker
/// threads (`None`: one per core, the default); returns it, a signal key and an API key.
pub fn start(db: &[String], threads: Option<usize>) -> Result<(Server, String, String)> {
    let dir = tempfile::tempdir()?;
    let mut storage = vec!["--data-dir".to_string(), dir.path().display().to_string()];
    storage.extend_from_slice(db);
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
    std::thread::spawn(move || for _ in lines {});
    Ok((
        Server {
            child,
            addr,
            tls_port,
            dir,
        },
        signal_key,
        api_key,
    ))
}

/// Peak RSS (VmHWM) of a process, MB.
pub fn peak_rss_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / 1024.0)
}

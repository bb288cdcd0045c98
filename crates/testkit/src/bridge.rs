//! Starts the real `bridge` binary with a generated configuration and watches its logs,
//! `/health` and `/metrics`.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::Cloud;

mod rig;

pub use rig::{INTERNAL_PASSWORD, Rig, internal_api_yaml, start_connected};

/// The `bridge` binary of this build (next to `cloud`).
pub fn bridge_bin() -> PathBuf {
    let bin = crate::cloud_bin().with_file_name("bridge");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p bridge`",
        bin.display()
    );
    bin
}

/// A client for plain-HTTP endpoints.
pub fn plain_client() -> reqwest::Client {
    crate::install_crypto();
    reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .expect("client")
}

/// The YAML of a bridge that reaches `cloud`, with `extra` appended (resources etc.). Its
/// health port is `0`: the bridge picks a free one and logs it, and [`BridgeProc`] reads it
/// back, so bridges of parallel tests never race for a port.
pub fn yaml_for(cloud: &Cloud, name: &str, extra: &str) -> String {
    format!(
        "name: {name}\napi_url: https://localhost:{}\ntls_ca_file: {}\nheartbeat_interval: 1\nreconnect_delay: 1\nhealth_check_port: 0\n{extra}",
        cloud.tls_port(),
        cloud.ca_path().display()
    )
}

/// `bridge check` on `yaml` with `env`: (exit code, stdout and stderr).
pub fn check(yaml: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("bridge.yaml");
    std::fs::write(&path, yaml).expect("bridge.yaml");
    let out = std::process::Command::new(bridge_bin())
        .args(["check", "--config"])
        .arg(&path)
        .envs(env.iter().copied())
        .output()
        .expect("bridge check");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), text)
}

/// A running bridge process.
pub struct BridgeProc {
    child: Option<Child>,
    /// Its `/health` and `/metrics` port, once it logged it.
    health_port: std::sync::OnceLock<u16>,
    /// stdout and stderr lines.
    pub logs: Arc<Mutex<Vec<String>>>,
    /// The threads copying stdout and stderr into `logs`.
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Holds the config file.
    pub dir: tempfile::TempDir,
}

impl Drop for BridgeProc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl BridgeProc {
    /// Writes `yaml` to a file and runs `bridge run --config FILE` with `env` added, and
    /// every proxy variable removed so that only a test's own `proxy_url` or `env` sets one.
    pub fn start(yaml: &str, env: &[(&str, &str)]) -> Self {
        Self::spawn(Command::new(bridge_bin()), yaml, env)
    }

    /// [`BridgeProc::start`] under `nohup`: started with SIGHUP ignored.
    pub fn start_under_nohup(yaml: &str, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new("nohup");
        cmd.arg(bridge_bin());
        Self::spawn(cmd, yaml, env)
    }

    fn spawn(mut cmd: Command, yaml: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bridge.yaml");
        std::fs::write(&path, yaml).expect("write config");
        for var in PROXY_VARS {
            cmd.env_remove(var);
        }
        let mut child = cmd
            .args(["run", "--config"])
            .arg(&path)
            .env_remove("SERVICE_BRIDGE_TOKEN")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn bridge");
        let logs = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for out in [
            Box::new(child.stdout.take().expect("stdout")) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().expect("stderr")),
        ] {
            let logs = logs.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    logs.lock().unwrap().push(line);
                }
            }));
        }
        BridgeProc {
            child: Some(child),
            health_port: std::sync::OnceLock::new(),
            logs,
            readers,
            dir,
        }
    }

    /// The port of `/health` and `/metrics`, read from the bridge's `health endpoint
    /// listening` log line (waiting up to 20 s for it).
    pub fn health_port(&self) -> u16 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(port) = self.logged_health_port() {
                return port;
            }
            assert!(
                Instant::now() < deadline,
                "the bridge never logged its health port; logs:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The health port if the bridge has logged it yet.
    fn logged_health_port(&self) -> Option<u16> {
        if let Some(port) = self.health_port.get() {
            return Some(*port);
        }
        // JSON logs carry `"addr":"127.0.0.1:PORT"`, text logs `addr=127.0.0.1:PORT`.
        let port = self
            .logs
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains("health endpoint listening"))
            .find_map(|l| {
                let addr = match serde_json::from_str::<Value>(l) {
                    Ok(json) => json["addr"].as_str()?.to_string(),
                    Err(_) => l
                        .split("addr=")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .to_string(),
                };
                addr.rsplit(':').next()?.trim_matches('"').parse().ok()
            })?;
        Some(*self.health_port.get_or_init(|| port))
    }

    /// All output so far.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// The JSON log lines so far.
    pub fn log_json(&self) -> Vec<Value> {
        self.logs
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The audit records logged so far, once there are at least `want` (the bridge writes
    /// them just after the response leaves, so a test that has its answer may still wait).
    pub async fn audit_records(&self, want: usize) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let records: Vec<Value> = self
                .log_json()
                .into_iter()
                .filter(|l| l["type"] == "audit")
                .collect();
            if records.len() >= want || tokio::time::Instant::now() >= deadline {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Waits (up to 30 s) until one audit record satisfies `wanted`, then returns them all: a
    /// record is written a moment after the answer it describes, so a test that counts the
    /// records before it may read them too early.
    pub async fn audit_records_until(
        &self,
        what: &str,
        wanted: impl Fn(&Value) -> bool,
    ) -> Vec<Value> {
        crate::wait_until_async(what, || async {
            self.audit_records(0).await.iter().any(&wanted)
        })
        .await;
        self.audit_records(0).await
    }

    /// `GET /health` (status code and body), or `None` while not listening.
    pub async fn health(&self) -> Option<(u16, Value)> {
        let port = self.logged_health_port()?;
        let res = plain_client()
            .get(format!("http://127.0.0.1:{port}/health"))
            .send()
            .await
            .ok()?;
        Some((res.status().as_u16(), res.json().await.ok()?))
    }

    /// `GET /metrics`.
    pub async fn metrics(&self) -> String {
        plain_client()
            .get(format!("http://127.0.0.1:{}/metrics", self.health_port()))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics body")
    }

    /// The value of one metric line (`name{labels}` or `name`).
    pub async fn metric(&self, series: &str) -> f64 {
        self.metrics()
            .await
            .lines()
            .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(f64::NAN)
    }

    /// Waits (up to 30 s) until one metric line reads `want`: a gauge the bridge updates when
    /// it sees a stream end comes a moment after the cloud has answered the caller.
    pub async fn wait_metric(&self, series: &str, want: f64) {
        crate::wait_until_async(&format!("{series} = {want}"), || async {
            self.metric(series).await == want
        })
        .await;
    }

    /// Waits until `/health` says `connection_status == want`.
    pub async fn wait_status(&self, want: &str, within: Duration) {
        self.wait_health_field("connection_status", want, within)
            .await;
    }

    /// Waits until `/health` says `status == want` (healthy, degraded, unhealthy).
    pub async fn wait_health(&self, want: &str, within: Duration) {
        self.wait_health_field("status", want, within).await;
    }

    async fn wait_health_field(&self, field: &str, want: &str, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            if let Some((_, h)) = self.health().await
                && h[field] == want
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "/health never said {field} = {want}; logs:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends a signal.
    pub fn signal(&self, sig: &str) {
        crate::send_signal(self.child.as_ref().expect("running").id(), sig);
    }

    /// Waits for exit; returns the code.
    pub fn wait(&mut self) -> Option<i32> {
        let child = self.child.take().expect("running");
        crate::wait_exit(child, &mut self.readers, "bridge")
    }
}

/// The variables that route HTTP clients through a proxy, or around one.
pub const PROXY_VARS: [&str; 8] = [
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
    "NO_PROXY",
    "no_proxy",
];

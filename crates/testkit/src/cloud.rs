//! A running `cloud serve` (the real binary of this build) on ephemeral ports, and its admin
//! commands against the same storage.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use serde_json::Value;

use crate::ports::stable_port;
use crate::{Backend, PgSchema, Tenant, drain};

/// A running `cloud serve`.
pub struct Cloud {
    /// The storage it runs on.
    pub backend: Backend,
    /// Its `--data-dir` (the SQLite file, the CA, Git mirrors), removed when dropped.
    pub data_dir: tempfile::TempDir,
    /// Its PostgreSQL schema, on PostgreSQL.
    pub pg: Option<PgSchema>,
    /// Arguments added to `serve`, kept across restarts.
    pub extra_args: Vec<String>,
    /// Environment variables added to `serve`'s, kept across restarts.
    pub env: Vec<(String, String)>,
    child: Option<Child>,
    /// `http://127.0.0.1:PORT`
    pub http: String,
    /// `https://localhost:PORT`
    pub https: String,
    /// Every line it wrote to stdout and stderr, across restarts.
    pub logs: Arc<Mutex<Vec<String>>>,
    /// The threads copying the current launch's stdout and stderr into `logs`.
    readers: Vec<std::thread::JoinHandle<()>>,
    /// Ports of the first launch, reused by later launches (so bridges find it again).
    ports: Option<(u16, u16)>,
    /// A PostgreSQL URL borrowed from another `Cloud` (see [`Cloud::start_beside`]).
    shared_url: Option<String>,
    /// The open-file limit (soft and hard) to run the process under (see [`Cloud::start_limited`]).
    open_files: Option<u64>,
}

/// The `cloud` binary of this build: `target/<profile>/cloud`, next to the test's own
/// `deps/` directory. `cargo test --workspace` builds it.
pub fn cloud_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("cloud");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build -p cloud` (cargo test --workspace does)",
        bin.display()
    );
    bin
}
impl Cloud {
    /// Starts a server with default options.
    pub fn start(backend: Backend) -> Self {
        Self::start_with(backend, &[])
    }

    /// Starts a server with extra `serve` arguments.
    pub fn start_with(backend: Backend, extra: &[&str]) -> Self {
        Self::start_configured(backend, extra, None)
    }

    /// Starts a server whose open-file limit, soft and hard, is `open_files` (as a small
    /// `ulimit -n` would set it), through util-linux's `prlimit`, with extra `serve` arguments.
    pub fn start_limited(backend: Backend, open_files: u64, extra: &[&str]) -> Self {
        Self::start_configured(backend, extra, Some(open_files))
    }

    /// Starts a server with extra `serve` arguments and environment variables (for the
    /// settings read from the environment only, such as `CLOUD_METRICS_TOKEN`).
    pub fn start_with_env(backend: Backend, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut cloud = Self::unlaunched(backend, extra.iter().map(|s| s.to_string()).collect());
        cloud.env = (env.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        cloud.pg = (backend == Backend::Postgres).then(PgSchema::create);
        cloud.launch();
        cloud
    }

    fn start_configured(backend: Backend, extra: &[&str], open_files: Option<u64>) -> Self {
        let mut cloud = Self::unlaunched(backend, extra.iter().map(|s| s.to_string()).collect());
        cloud.pg = (backend == Backend::Postgres).then(PgSchema::create);
        cloud.open_files = open_files;
        cloud.launch();
        cloud
    }

    /// A second `cloud` process on the same PostgreSQL schema as `other` (own data directory
    /// and ports), as when several processes serve one database.
    pub fn start_beside(other: &Cloud) -> Self {
        let mut cloud = Self::unlaunched(other.backend, other.extra_args.clone());
        cloud.shared_url = other.pg.as_ref().map(|p| p.url.clone());
        cloud.launch();
        cloud
    }

    /// A server on the PostgreSQL database at `url` (a relay in front of a test schema, say),
    /// with extra `serve` arguments.
    pub fn start_on_url(url: String, extra: &[&str]) -> Self {
        let extra = extra.iter().map(|s| s.to_string()).collect();
        let mut cloud = Self::unlaunched(Backend::Postgres, extra);
        cloud.shared_url = Some(url);
        cloud.launch();
        cloud
    }

    /// A server not started yet, with a data directory of its own and no storage but SQLite.
    fn unlaunched(backend: Backend, extra_args: Vec<String>) -> Self {
        Cloud {
            backend,
            data_dir: tempfile::tempdir().expect("tempdir"),
            pg: None,
            extra_args,
            env: Vec::new(),
            child: None,
            http: String::new(),
            https: String::new(),
            logs: Arc::new(Mutex::new(Vec::new())),
            readers: Vec::new(),
            ports: None,
            shared_url: None,
            open_files: None,
        }
    }

    fn storage_args(&self) -> Vec<String> {
        let mut args = vec![
            "--data-dir".to_string(),
            self.data_dir.path().display().to_string(),
        ];
        if let Some(url) = self
            .pg
            .as_ref()
            .map(|p| &p.url)
            .or(self.shared_url.as_ref())
        {
            args.push("--database-url".into());
            args.push(url.clone());
        }
        args
    }

    /// (Re)starts the process and waits until both listeners are up. The first launch picks
    /// ports below the kernel's ephemeral range (see [`crate::ports`]), so that a restart finds
    /// them free and bridges find the cloud again.
    pub fn launch(&mut self) {
        let fixed = self.ports;
        let mut attempts = 0;
        loop {
            let (tls, http) = fixed.unwrap_or_else(|| {
                let tls = stable_port();
                let http = std::iter::repeat_with(stable_port)
                    .find(|&p| p != tls)
                    .unwrap_or_default();
                (tls, http)
            });
            let lines_before = self.logs.lock().unwrap().len();
            match self.spawn_on(tls, http) {
                Ok(()) => {
                    self.ports = Some((tls, http));
                    self.https = format!("https://localhost:{tls}");
                    self.http = format!("http://127.0.0.1:{http}");
                    return;
                }
                Err(log) if fixed.is_none() && attempts < 5 && log.contains("already in use") => {
                    attempts += 1;
                    self.logs.lock().unwrap().truncate(lines_before);
                }
                Err(log) => panic!("cloud did not start; logs:\n{log}"),
            }
        }
    }

    /// Spawns `cloud serve` on the given ports and waits for both "listening" lines; on failure
    /// returns the logs.
    fn spawn_on(&mut self, tls: u16, http: u16) -> Result<(), String> {
        let mut cmd = match self.open_files {
            Some(n) => {
                let mut cmd = Command::new("prlimit");
                cmd.arg(format!("--nofile={n}:{n}"))
                    .arg("--")
                    .arg(cloud_bin());
                cmd
            }
            None => Command::new(cloud_bin()),
        };
        cmd.arg("serve")
            .args(self.storage_args())
            .args(["--listen", &format!("127.0.0.1:{tls}")])
            .args(["--http-listen", &format!("127.0.0.1:{http}")])
            .args(&self.extra_args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn cloud");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        let logs = self.logs.clone();
        let out_reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Ok(v) = serde_json::from_str::<Value>(&line)
                    && v["message"] == "listening"
                {
                    let _ = tx.send(());
                }
                logs.lock().unwrap().push(line);
            }
        });
        let logs = self.logs.clone();
        let err_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                logs.lock().unwrap().push(line);
            }
        });
        self.readers = vec![out_reader, err_reader];
        for _ in 0..2 {
            if rx.recv_timeout(Duration::from_secs(30)).is_err() {
                let _ = child.kill();
                let _ = child.wait();
                drain(&mut self.readers);
                return Err(self.log_text());
            }
        }
        self.child = Some(child);
        Ok(())
    }

    /// The CA that signed the server certificate (`DIR/ca.pem`).
    pub fn ca_path(&self) -> PathBuf {
        self.data_dir.path().join("ca.pem")
    }

    /// The TLS port.
    pub fn tls_port(&self) -> u16 {
        self.ports.map_or(0, |p| p.0)
    }

    /// Everything the process wrote to stdout and stderr so far, one line per line.
    pub fn log_text(&self) -> String {
        self.logs.lock().unwrap().join("\n")
    }

    /// Waits (up to 30 s) for a log line containing `needle` and returns it: the server's output
    /// reaches the test through a pipe and a reader thread, a moment after the server wrote it.
    pub fn wait_log_line(&self, needle: &str) -> String {
        self.wait_log_line_within(needle, Duration::from_secs(30))
    }

    /// [`Cloud::wait_log_line`] for a line that may take up to `limit` (one written at the end
    /// of a bounded wait of the server's own).
    pub fn wait_log_line_within(&self, needle: &str, limit: Duration) -> String {
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(line) = self.log_text().lines().find(|l| l.contains(needle)) {
                return line.to_string();
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no log line with {needle:?} within {limit:?}:\n{}",
                self.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// An admin command against the same storage, to be run (with more settings) by the test.
    pub fn admin_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(cloud_bin());
        command.args(args).args(self.storage_args());
        command
    }

    /// Runs an admin command against the same storage; returns its output.
    pub fn admin_output(&self, args: &[&str]) -> Output {
        self.admin_command(args)
            .output()
            .expect("run cloud admin command")
    }

    /// Runs an admin command that must succeed; returns its stdout, trimmed.
    pub fn admin(&self, args: &[&str]) -> String {
        let out = self.admin_output(args);
        assert!(
            out.status.success(),
            "cloud {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout)
            .expect("utf8")
            .trim()
            .to_string()
    }

    /// Creates an org with a signal key and an API key.
    pub fn tenant(&self, slug: &str) -> Tenant {
        self.admin(&["org", "create", slug]);
        Tenant {
            signal_key: self.admin(&["signal-key", "create", "--org", slug]),
            api_key: self.admin(&["api-key", "create", "--org", slug]),
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Sends a signal to the server process.
    pub fn signal(&self, sig: &str) {
        crate::send_signal(self.pid(), sig);
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait(&mut self) -> Option<i32> {
        let child = self.child.take().expect("running");
        crate::wait_exit(child, &mut self.readers, "cloud")
    }

    /// Runs `sql` on the cloud's database behind its back (PostgreSQL through its schema,
    /// SQLite through Python's `sqlite3` module), as an operator or a failure would.
    pub fn exec_sql(&self, sql: &str) {
        match &self.pg {
            Some(pg) => pg.exec(sql),
            None => {
                let out = Command::new("python3")
                    .args(["-c", "import sqlite3,sys; c=sqlite3.connect(sys.argv[1]); c.execute(sys.argv[2]); c.commit()"])
                    .arg(self.data_dir.path().join("signals.db"))
                    .arg(sql)
                    .output()
                    .expect("python3 sqlite3");
                assert!(
                    out.status.success(),
                    "{sql}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// SIGKILL, then start again on the same storage.
    pub fn kill_and_restart(&mut self) {
        self.signal("KILL");
        self.wait();
        self.launch();
    }
}

impl Drop for Cloud {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

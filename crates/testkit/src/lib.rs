//! Test harness shared by the integration tests of `cloud` and `bridge`: starts the real
//! `cloud` binary on ephemeral ports, on SQLite or on a fresh PostgreSQL schema, and runs its
//! admin commands against the same storage. Only ever a dev-dependency.

pub mod bridge;
pub mod browser;
mod cloud;
pub mod dashboard;
pub mod freeze;
pub mod git_server;
pub mod pg_cluster;
mod pg_schema;
pub mod pgbouncer;
pub mod ports;
pub mod registry;
mod requests;
pub mod tls;
pub mod upstream;
pub mod webhook;

pub use cloud::{Cloud, cloud_bin};
pub use pg_schema::{DEFAULT_PG, PgSchema, pg_base_url};

use std::time::Duration;

use serde_json::Value;

/// Which storage a test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// A SQLite file in the cloud's data directory.
    Sqlite,
    /// A fresh schema of the machine's PostgreSQL ([`PgSchema`]).
    Postgres,
}

/// Runs one async test body once per backend.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($crate::Backend::Postgres).await
                }
            )*
        }
    };
}
/// Waits until `ready()` holds, checking every 10 ms; fails naming `what` after 30 s, so a
/// test whose condition never comes fails instead of hanging.
pub async fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting after 30 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// [`wait_until`] for a condition that is awaited (a metric, an HTTP answer).
pub async fn wait_until_async<F: std::future::Future<Output = bool>>(
    what: &str,
    mut ready: impl FnMut() -> F,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready().await {
        assert!(
            std::time::Instant::now() < deadline,
            "still waiting after 30 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits (up to 5 s) for the threads copying an exited process's output to reach its end, so
/// that the log read after `wait()` holds its last lines. A grandchild still holding the pipe
/// (a `git` the process started) does not make it hang.
pub fn drain(readers: &mut Vec<std::thread::JoinHandle<()>>) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while readers.iter().any(|r| !r.is_finished()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    readers.clear();
}

/// Sends signal `sig` (`TERM`, `INT`, `STOP`, …) to process `pid` with `kill`.
pub fn send_signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args(["-s", sig, &pid.to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill -s {sig} {pid}");
}

/// Waits (up to 30 s) for `child` (the `what` of the failure message) to exit, then for its
/// output's copies to end; returns its exit code.
pub fn wait_exit(
    mut child: std::process::Child,
    readers: &mut Vec<std::thread::JoinHandle<()>>,
    what: &str,
) -> Option<i32> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            drain(readers);
            return status.code();
        }
        assert!(std::time::Instant::now() < deadline, "{what} did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Installs ring as rustls' process-wide crypto provider (once; later calls do nothing), as
/// the binaries do, for tests that make TLS clients of their own.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
/// An org's credentials.
#[derive(Debug, Clone)]
pub struct Tenant {
    /// Its signal key (`sigkey_…`), the address events are posted to.
    pub signal_key: String,
    /// Its API key (`sigapi_…`), for the API's reads and the forwarding routes.
    pub api_key: String,
}

/// The deployment event of the README and docs/api.md.
pub fn seed_event() -> Value {
    serde_json::json!({
        "type": "deployment",
        "repository": "acme/api",
        "service": "api",
        "version": "v1.2.3",
        "sha": "abc123def456",
        "environment": "production",
        "triggeredBy": "github-actions",
        "status": "success",
        "timestamp": "2024-01-15T10:30:00Z",
        "metadata": {"workflow": "deploy", "runId": "123456", "runNumber": "42"}
    })
}

/// A loopback port that refuses connections and stays the caller's while the socket lives
/// (bound, not listening): an internal system that is down. `listen` on the socket brings it up.
pub fn refusing_port() -> (tokio::net::TcpSocket, u16) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let port = socket.local_addr().unwrap().port();
    (socket, port)
}

/// A listener whose accept queue is full: the kernel drops further SYNs, so a connection to it
/// neither succeeds nor fails, as with a firewall that drops packets.
pub async fn black_hole() -> (tokio::net::TcpListener, Vec<tokio::net::TcpStream>) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(1).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    // Fill the queue until a connection no longer completes.
    for _ in 0..16 {
        match tokio::time::timeout(Duration::from_secs(2), tokio::net::TcpStream::connect(addr))
            .await
        {
            Ok(Ok(tcp)) => queued.push(tcp),
            _ => return (listener, queued),
        }
    }
    panic!("the accept queue of {addr} never filled");
}

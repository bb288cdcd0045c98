//! Process-level wiring: configuration, logs, health port, audit log, agent loop, signals.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::audit::AuditLog;
use crate::config::{Config, ProcessEnv};
use crate::forward::Forwarder;
use crate::identity::Identity;
use crate::metrics::Metrics;
use crate::status::Status;
use crate::{health, identity, logging, reachability};

/// Loads the configuration; on error prints every problem and gives exit code 2.
pub fn load(path: Option<&Path>) -> Result<Config, ExitCode> {
    let loaded = match path {
        Some(p) => Config::load(p, &ProcessEnv),
        None => Config::from_env(&ProcessEnv),
    };
    loaded.map_err(|e| {
        eprintln!("{e}");
        ExitCode::from(2)
    })
}

/// The async runtime. One thread: every stream goes through one tunnel connection, so extra
/// worker threads mostly wake each other up (one thread forwards more requests a second, in
/// less memory: docs/benchmarks.md).
pub fn runtime() -> Result<tokio::runtime::Runtime, ExitCode> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            eprintln!("cannot start the async runtime: {e}");
            ExitCode::from(1)
        })
}

/// File descriptors the bridge needs besides one per forwarded stream: the tunnel, the health
/// port and its clients, the audit log, DNS.
const RESERVED_FDS: u64 = 64;

/// Raises the soft open-file limit to the hard one (each forwarded stream holds a connection to
/// its internal system, and the usual soft default, 1,024, is below what a large
/// `max_connections` needs). Returns a warning when the limit is still too low for
/// `max_connections`: streams past it would fail to connect.
pub fn raise_fd_limit(max_connections: u32) -> Option<String> {
    let needed = u64::from(max_connections) + RESERVED_FDS;
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < needed => Some(format!(
            "max_connections {max_connections} needs about {needed} open files (one per forwarded stream) but the open-file limit is {limit}; raise it (`ulimit -n`, systemd LimitNOFILE=) or lower max_connections"
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "cannot read the open-file limit ({e}); max_connections {max_connections} needs about {needed} open files"
        )),
    }
}

/// `bridge run`.
pub fn run(path: Option<&Path>) -> ExitCode {
    let cfg = match load(path) {
        Ok(c) => Arc::new(c),
        Err(code) => return code,
    };
    logging::init(cfg.log_format, cfg.log_level, &cfg.name);
    if let Some(warning) = raise_fd_limit(cfg.max_connections) {
        tracing::warn!("{warning}");
    }
    let runtime = match runtime() {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    // In the runtime: the health port is listened on as its socket.
    let entered = runtime.enter();
    let opened = match preflight(&cfg, true) {
        Ok(opened) => opened,
        Err(code) => return code,
    };
    drop(entered);
    let result = runtime.block_on(serve(cfg, opened));
    // The audit log is flushed by now; a name lookup still blocking a thread (a stuck resolver
    // while the tunnel redialled) must not hold the exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(500));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(cause = %format!("{e:#}"), "bridge failed");
            ExitCode::from(1)
        }
    }
}

/// The operator's port cannot be listened on: a configuration error (exit 2, with the others
/// [`preflight`] finds), as the message says which keys to change.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot listen on health_check_address {address} health_check_port {port}: {cause}{}",
    hint(cause)
)]
struct PortTaken {
    address: std::net::IpAddr,
    port: u16,
    cause: std::io::Error,
}

/// What a bind failure most likely means, for [`PortTaken`].
fn hint(cause: &std::io::Error) -> &'static str {
    match cause.kind() {
        std::io::ErrorKind::AddrInUse => {
            "; another bridge on this host may hold it: give each instance on one host its own health_check_port (0: any free port, logged)"
        }
        std::io::ErrorKind::AddrNotAvailable => {
            "; health_check_address is not an address of this host"
        }
        std::io::ErrorKind::PermissionDenied => {
            "; ports below 1024 need privileges: choose a higher health_check_port"
        }
        _ => "",
    }
}

/// What [`preflight`] opened for `run`.
pub(crate) struct Opened {
    identity: Identity,
    audit: AuditLog,
    /// The health port, listened on (`run` only).
    health: Option<tokio::net::TcpListener>,
}

/// Opens what the configuration points at: the CA to trust, the operator's certificate and
/// key, the audit log and, for `run`, the health port. A file that cannot be read or parsed, or
/// a port taken, is a configuration error like a bad value (exit 2, each one named by its key,
/// all at once), not a failure found later on every reconnect. `bridge check` runs it too, so
/// that it passes only a configuration `run` takes, but without `running`: the audit file and
/// the port of a bridge that runs are its own, and check only opens the file.
pub(crate) fn preflight(cfg: &Arc<Config>, running: bool) -> Result<Opened, ExitCode> {
    let mut problems = Vec::new();
    if let Some(dir) = &cfg.state_dir
        && let Err(e) = crate::state::prepare(dir)
    {
        problems.push(format!(
            "state_dir {}: cannot create it or write in it: {e}",
            dir.display()
        ));
    }
    if let Err(e) = identity::trust(cfg) {
        problems.push(e.to_string());
    }
    let entry_cas = (cfg.apis.iter().map(|a| &a.tls_ca_file).enumerate())
        .map(|(i, path)| (format!("apis[{i}]"), path))
        .chain(
            (cfg.sources.iter().map(|s| &s.tls_ca_file).enumerate())
                .map(|(i, path)| (format!("sources[{i}]"), path)),
        )
        .chain(
            (cfg.registries.iter().map(|r| &r.tls_ca_file).enumerate())
                .map(|(i, path)| (format!("registries[{i}]"), path)),
        );
    for (entry, path) in entry_cas {
        if let Some(Err(e)) = path.as_deref().map(crate::ca::load) {
            problems.push(format!("{entry}.tls_ca_file: {e}"));
        }
    }
    // Only the verifying modes read sslrootcert: a stale path beside `require` stays harmless.
    let verifying = |db: &&crate::config::Database| {
        matches!(
            db.sslmode,
            crate::config::SslMode::VerifyCa | crate::config::SslMode::VerifyFull
        )
    };
    for (i, db) in cfg
        .databases
        .iter()
        .enumerate()
        .filter(|(_, db)| verifying(db))
    {
        if let Some(Err(e)) = db.sslrootcert.as_deref().map(crate::ca::load) {
            problems.push(format!("databases[{i}].sslrootcert: {e}"));
        }
    }
    let identity = Identity::new(cfg.clone()).map_err(|e| problems.push(e.to_string()));
    let audit = AuditLog::for_target(&cfg.audit_log, running)
        .map_err(|e| problems.push(format!("audit_log: {e}")));
    let health = match running.then(|| listen_for_health(cfg)) {
        Some(Ok(listener)) => Some(listener),
        Some(Err(taken)) => {
            problems.push(taken.to_string());
            None
        }
        None => None,
    };
    match (identity, audit) {
        (Ok(identity), Ok(audit)) if problems.is_empty() => Ok(Opened {
            identity,
            audit,
            health,
        }),
        _ => {
            for p in &problems {
                eprintln!("configuration error: {p}");
            }
            let relative = relative_paths(cfg);
            let about_one = problems
                .iter()
                .any(|p| relative.iter().any(|path| p.contains(&format!(" {path}:"))));
            if about_one && let Ok(dir) = std::env::current_dir() {
                eprintln!(
                    "note: relative paths in the configuration are read from the working directory, {}",
                    dir.display()
                );
            }
            Err(ExitCode::from(2))
        }
    }
}

/// The configuration's relative file paths (read from the working directory, not the
/// configuration file's), as problems name them.
fn relative_paths(cfg: &Config) -> Vec<String> {
    let audit = match &cfg.audit_log {
        crate::config::AuditTarget::File(path) => Some(path),
        crate::config::AuditTarget::Stdout => None,
    };
    [
        &cfg.tls_ca_file,
        &cfg.tls_cert_file,
        &cfg.tls_key_file,
        &cfg.state_dir,
    ]
    .into_iter()
    .flatten()
    .chain(audit)
    .chain(cfg.apis.iter().filter_map(|a| a.tls_ca_file.as_ref()))
    .chain(cfg.sources.iter().filter_map(|s| s.tls_ca_file.as_ref()))
    .chain(cfg.registries.iter().filter_map(|r| r.tls_ca_file.as_ref()))
    .chain(cfg.databases.iter().filter_map(|d| d.sslrootcert.as_ref()))
    .filter(|path| path.is_relative())
    .map(|path| path.display().to_string())
    .collect()
}

/// The health port, listened on (in the runtime). On Unix with `SO_REUSEADDR`, as tokio's
/// own `bind` does: a restarted bridge takes its port back while the last run's connections
/// wait out TIME_WAIT on it (a scraper's, closed by the bridge).
fn listen_for_health(cfg: &Config) -> Result<tokio::net::TcpListener, PortTaken> {
    let taken = |cause| PortTaken {
        address: cfg.health_check_address,
        port: cfg.health_check_port,
        cause,
    };
    let addr = std::net::SocketAddr::new(cfg.health_check_address, cfg.health_check_port);
    let socket = match addr {
        std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(taken)?;
    #[cfg(unix)]
    socket.set_reuseaddr(true).map_err(taken)?;
    socket.bind(addr).map_err(taken)?;
    socket.listen(1024).map_err(taken)
}

async fn serve(cfg: Arc<Config>, opened: Opened) -> anyhow::Result<()> {
    let Opened {
        identity,
        audit,
        health,
    } = opened;
    if !cfg.tls_verify {
        tracing::warn!(
            "tls_verify is false: the cloud's certificate is NOT verified; use this for development only"
        );
    }
    if let Some(warning) = crate::memory::limit_warning(cfg.max_memory_mb) {
        tracing::warn!("{warning}");
    }
    for warning in cfg.warnings() {
        tracing::warn!("{warning}");
    }
    let status = Arc::new(Status::new(cfg.heartbeat_interval));
    let metrics = Metrics::new(&cfg.name);
    let audit = Arc::new(audit);
    let flusher = audit.spawn_flusher();
    let instance = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
    let shutdown = signals(audit.clone(), metrics.in_flight.clone());
    let Some(listener) = health else {
        anyhow::bail!("the health port was not listened on before serving");
    };
    // The operator's port answers through the drain (probes, and the in-flight gauge when it
    // matters most), until the agent is done.
    let health_stop = CancellationToken::new();
    let health = tokio::spawn(health::serve(
        listener,
        status.clone(),
        metrics.clone(),
        health_stop.clone(),
    ));
    let reachability = tokio::spawn(reachability::watch(
        cfg.clone(),
        status.clone(),
        metrics.clone(),
        shutdown.clone(),
    ));
    let forwarder = Arc::new(Forwarder::new(
        cfg.clone(),
        status.clone(),
        metrics.clone(),
        audit.clone(),
        instance.clone(),
    ));
    let identity = Arc::new(identity);
    let agent = Agent {
        cfg,
        status,
        metrics,
        instance,
        forwarder,
        identity,
        cut: Default::default(),
    };
    let cut = agent.run(shutdown.clone()).await;
    shutdown.cancel();
    health_stop.cancel();
    let _ = health.await;
    reachability.abort();
    flusher.abort();
    if let Err(e) = audit.flush() {
        tracing::error!(cause = %e, "cannot write the last audit records");
    }
    if cut > 0 {
        anyhow::bail!(
            "{cut} stream(s) were still in flight when the {} s drain ran out, and were cut; their audit records say \"ended\":\"cut\", or status 499 where no answer had begun",
            crate::agent::DRAIN_TIMEOUT.as_secs()
        );
    }
    tracing::info!("bridge stopped");
    Ok(())
}

/// Cancelled at the first SIGTERM/Ctrl-C; a second one exits at once (after writing the audit
/// records still queued, and saying how many streams it cut, which have no audit record).
fn signals(
    audit: Arc<AuditLog>,
    in_flight: prometheus_client::metrics::gauge::Gauge,
) -> CancellationToken {
    let token = CancellationToken::new();
    let mut signals = match tunnel::signals::Signals::listen() {
        Ok(signals) => signals,
        Err(e) => {
            tracing::error!(cause = %e, "cannot listen for SIGTERM or Ctrl-C: this process can only be stopped with SIGKILL, without draining");
            return token;
        }
    };
    let cancel = token.clone();
    tokio::spawn(async move {
        signals.next().await;
        tracing::info!("shutdown requested; draining (send the signal again to exit at once)");
        cancel.cancel();
        signals.next().await;
        let cut = in_flight.get();
        tracing::warn!(
            cut_streams = cut,
            "bridge stopped at once (second signal): {cut} stream(s) in flight were cut and have no audit record"
        );
        let _ = audit.flush();
        std::process::exit(1);
    });
    token
}

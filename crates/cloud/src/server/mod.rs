//! The serving loop: accept on the TLS and plain-HTTP listeners, serve the router over HTTP/1.1
//! or HTTP/2, and on shutdown stop accepting, drain in-flight requests, then flush storage.

mod connection;
mod listener;

use std::path::PathBuf;
use std::time::Duration;

use rustls_pki_types::CertificateDer;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;

use crate::app::{App, Limits, Listener};
use crate::metrics::Metrics;
use crate::pgwire::PgFront;
use crate::storage::{Backend, OpenMode, ServeLock, StorageError, Store};
use crate::tls::{self, TlsError};
use connection::serve_loop;
use listener::connection_cap;
pub use listener::listen;

/// Everything `cloud serve` needs besides its listeners.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// SQLite file or PostgreSQL URL.
    pub backend: Backend,
    /// Holds the CA and the self-signed certificate.
    pub data_dir: PathBuf,
    /// `--tls-names`: more names for the self-signed certificate.
    pub tls_names: Vec<String>,
    /// Events/s per signal key; 0 turns the limit off.
    pub signal_rate_limit: u32,
    /// Bytes of signal request bodies ingested at once.
    pub ingest_memory: usize,
    /// How long in-flight requests may take to finish at shutdown.
    pub drain_timeout: Duration,
    /// How long a client may take to send a request's headers (and how long a keep-alive
    /// connection may sit idle) before it is closed.
    pub header_read_timeout: Duration,
    /// How long a forwarded request may wait for its response's headers.
    pub forward_timeout: Duration,
    /// `--bridge-release` and `--public-url`.
    pub publishing: crate::app::Publishing,
    /// `--webhook-first-retry`: the wait after a webhook delivery's first failure.
    pub webhook_first_retry: Duration,
    /// `--webhook-allow-private`: webhooks may reach non-public addresses.
    pub webhook_allow_private: bool,
    /// `CLOUD_METRICS_TOKEN`: the bearer token `/metrics` asks for, when set.
    pub metrics_token: Option<crate::secrets::Hidden>,
}
/// Connections of the cloud's own Git client at once (one per mirror being fetched).
const INTERNAL_CONNECTIONS: usize = 64;

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// Storage could not be opened.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// TLS could not be set up.
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// The operator's `--tls-cert`/`--tls-key` files are unusable (a configuration error).
    #[error("--tls-cert/--tls-key: {0}")]
    TlsFiles(TlsError),
    /// The `--client-ca` file is unusable (a configuration error).
    #[error("--client-ca: {0}")]
    ClientCa(TlsError),
    /// The loopback listener of the cloud's own Git client cannot be opened.
    #[error(
        "cannot listen on 127.0.0.1 for the cloud's own Git client (deployments' commits): {0}"
    )]
    Loopback(#[from] std::io::Error),
    /// The data directory's absolute path cannot be found.
    #[error("--data-dir: cannot resolve its absolute path ({0}); pass an absolute --data-dir")]
    DataDir(std::io::Error),
    /// The data directory is a file.
    #[error(
        "--data-dir {0}: a file of that name is there, and it is not a directory; pass a directory (it is made when missing)"
    )]
    DataDirIsFile(String),
    /// A PostgreSQL `serve` was given a SQLite deployment's data directory, whose CA files it
    /// would replace with the database's.
    #[error(
        "--data-dir {0} holds a SQLite deployment's database (signals.db): a serve on PostgreSQL would replace that directory's CA (ca.pem, ca-key.pem), which the SQLite deployment's bridges and clients trust. Give this one a directory of its own (--data-dir DIR); if that SQLite deployment is retired, move its signals.db away first"
    )]
    DataDirOfSqlite(String),
    /// Shutdown ended before storage was flushed: the database stopped answering.
    #[error(
        "stopped: the database did not answer within --drain-timeout, so storage was not flushed; events of requests that got no answer may be missing: their senders retry them (with an Idempotency-Key, never twice)"
    )]
    Unflushed,
    /// The open-file limit leaves too few descriptors for storage and connections.
    #[error(
        "the open-file limit is {limit}, even raised to its hard limit; `cloud serve` needs at least {needed} (storage, TLS and log files, and 16 connections per listener): raise the hard limit (as root: `ulimit -Hn 4096` in the shell that starts it, /etc/security/limits.conf, or systemd LimitNOFILE=)"
    )]
    OpenFiles {
        /// The limit after raising the soft limit to the hard one.
        limit: u64,
        /// The least it needs.
        needed: u64,
    },
    /// The data directory cannot be created.
    #[error(
        "--data-dir {dir}: cannot create it ({source}); check the parent directory's permissions or pass another --data-dir"
    )]
    CreateDataDir {
        /// The directory.
        dir: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The operator's files, read and checked before anything starts: see [`prepare`].
pub struct Prepared {
    /// `--tls-cert`/`--tls-key`'s certificate and key.
    operator_identity: Option<tls::Identity>,
    /// `--client-ca`'s file and its CAs.
    operator_cas: Option<(PathBuf, Vec<CertificateDer<'static>>)>,
}

/// Reads the operator's files (`--tls-cert`/`--tls-key`, `--client-ca`) and checks the data
/// directory for `backend`, before any database is touched: every problem found, at once.
pub fn prepare(
    tls_files: Option<&(PathBuf, PathBuf)>,
    client_ca: Option<&PathBuf>,
    data_dir: &std::path::Path,
    backend: Option<&Backend>,
) -> Result<Prepared, Vec<ServeError>> {
    let mut problems = Vec::new();
    let operator_identity = match tls_files.map(|(cert, key)| tls::operator_identity(cert, key)) {
        Some(Ok(identity)) => {
            if let Some(warning) = tls::validity_warning(&identity.chain) {
                let cert = tls_files.map(|(c, _)| c.display().to_string());
                tracing::warn!(cert = %cert.unwrap_or_default(), "{warning}");
            }
            Some(identity)
        }
        Some(Err(e)) => {
            problems.push(ServeError::TlsFiles(e));
            None
        }
        None => None,
    };
    let cas = client_ca.map(|path| {
        let cas = tls::load_certificates(path)?;
        tls::check_client_cas(&cas)?;
        Ok((path.clone(), cas))
    });
    let operator_cas = match cas {
        Some(Ok(cas)) => Some(cas),
        Some(Err(e)) => {
            problems.push(ServeError::ClientCa(e));
            None
        }
        None => None,
    };
    if let Err((limit, needed)) = listener::enough_open_files() {
        problems.push(ServeError::OpenFiles { limit, needed });
    }
    if data_dir.exists() && !data_dir.is_dir() {
        problems.push(ServeError::DataDirIsFile(data_dir.display().to_string()));
    } else if matches!(backend, Some(Backend::Postgres(_))) && data_dir.join("signals.db").exists()
    {
        problems.push(ServeError::DataDirOfSqlite(data_dir.display().to_string()));
    }
    if problems.is_empty() {
        Ok(Prepared {
            operator_identity,
            operator_cas,
        })
    } else {
        Err(problems)
    }
}

/// Runs the service until `shutdown` is cancelled, then drains and flushes.
pub async fn run(
    options: ServeOptions,
    prepared: Prepared,
    tls_listener: TcpListener,
    http_listener: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let Prepared {
        operator_identity,
        operator_cas,
    } = prepared;
    let operator_tls = operator_identity.is_some();
    create_data_dir(&options.data_dir).map_err(|source| ServeError::CreateDataDir {
        dir: options.data_dir.display().to_string(),
        source,
    })?;
    let metrics = Metrics::new();
    let _lock = ServeLock::acquire(&options.backend)?;
    let store = Store::open(&options.backend, metrics.clone(), OpenMode::CreateIfMissing).await?;
    // What an operator reading the log first wants to know: which release, on which database.
    tracing::info!(version = crate::live::VERSION, database = %store.target(), "cloud starting");
    let ca = shared_ca(&store, &options.data_dir).await?;
    let identity = match operator_identity {
        Some(identity) => identity,
        None => tls::issued_identity(&ca, &options.tls_names).map_err(ServeError::Tls)?,
    };
    let mut client_cas = vec![ca.cert_der()?];
    if let Some((path, operator_cas)) = operator_cas {
        for subject in tls::non_ca_subjects(&operator_cas) {
            tracing::warn!(file = %path.display(), subject = %subject, "--client-ca holds a certificate that is not a CA (no CA:TRUE basic constraint); it is trusted as a root all the same: check that the file holds your CA, not a client certificate");
        }
        client_cas.extend(operator_cas);
    }
    // A pair rustls refuses is the certificate's and key's; anything else is the client CAs'.
    let main_config =
        tls::server_config(identity, client_cas).map_err(|e| match (&e, operator_tls) {
            (TlsError::Rustls(_), true) => ServeError::TlsFiles(e),
            (TlsError::Rustls(_), false) => ServeError::Tls(e),
            _ => ServeError::ClientCa(e),
        })?;
    let configs = connection::TlsConfigs {
        postgres: tls::postgres_config(&main_config).map_err(ServeError::Tls)?,
        main: main_config,
    };
    // The loopback listener through which this process reads deployments' commits from its
    // own relay (correlation/mirror.rs); nothing else listens there.
    let internal = listen(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))?;
    let git = crate::correlation::mirror::GitClient {
        root: std::path::absolute(options.data_dir.join("git-mirrors"))
            .map_err(ServeError::DataDir)?,
        relay: internal.local_addr()?,
    };
    let app = App::new(
        store.clone(),
        metrics,
        ca,
        Limits {
            signal_rate_limit: options.signal_rate_limit,
            ingest_memory: options.ingest_memory,
            read_timeout: options.header_read_timeout,
            forward_timeout: options.forward_timeout,
            metrics_token: options.metrics_token.clone(),
        },
        options.publishing.clone(),
        git,
    );
    // A key revoked by any process stops working here within a second or two.
    let watcher = tokio::spawn(
        app.api
            .keys
            .clone()
            .watch_revocations(store.clone(), shutdown.clone()),
    );
    let notifier = tokio::spawn(
        crate::notify::Notifier::new(
            store.clone(),
            app.live.clone(),
            app.insight.clone(),
            options.publishing.bridge_release.clone(),
            (options.webhook_first_retry, options.webhook_allow_private),
        )
        .run(shutdown.clone()),
    );
    let storage_watch = tokio::spawn(store.clone().watch(shutdown.clone()));
    let housekeeping = tokio::spawn(store.clone().keep_tidy(shutdown.clone()));
    let lister = tokio::spawn(crate::correlation::lister::keep_listing(
        app.correlation.clone(),
        shutdown.clone(),
    ));
    let relay = app.relay.clone();
    let pg = PgFront::new(app.pg.clone(), TlsAcceptor::from(configs.postgres.clone()));
    // Database sessions have no natural end: at shutdown they close, so that the drain below
    // does not wait for them.
    let pg_stop = tokio::spawn({
        let (pg, shutdown, drain) = (app.pg.clone(), shutdown.clone(), options.drain_timeout);
        async move {
            shutdown.cancelled().await;
            pg.shut_down(drain).await;
        }
    });
    let tls_app = app.router(Listener::Tls);
    let plain_app = app.router(Listener::Plain);

    let cap = connection_cap(1 + usize::from(http_listener.is_some()));
    let mut loops = Vec::new();
    if let Ok(addr) = tls_listener.local_addr() {
        tracing::info!(addr = %addr, scheme = "https", "listening");
    }
    loops.push(tokio::spawn(serve_loop(
        tls_listener,
        Some((configs, pg)),
        tls_app,
        shutdown.clone(),
        (options.drain_timeout, options.header_read_timeout),
        cap,
    )));
    if let Some(listener) = http_listener {
        if let Ok(addr) = listener.local_addr() {
            tracing::info!(addr = %addr, scheme = "http", "listening");
        }
        loops.push(tokio::spawn(serve_loop(
            listener,
            None,
            plain_app,
            shutdown.clone(),
            (options.drain_timeout, options.header_read_timeout),
            cap,
        )));
    }
    // Closed only after the public listeners drained: their in-flight requests may still be
    // reading commits through it.
    let internal_stop = CancellationToken::new();
    let mut internal_loop = tokio::spawn(serve_loop(
        internal,
        None,
        app.internal_router(),
        internal_stop.clone(),
        (options.drain_timeout, options.header_read_timeout),
        INTERNAL_CONNECTIONS,
    ));
    // Drain consumers' in-flight requests (some go through tunnels) before closing the tunnels.
    let (mut drained, deadline) = tokio::join!(
        async {
            let mut drained = true;
            for task in loops {
                drained &= task.await.unwrap_or(false);
            }
            drained
        },
        async {
            shutdown.cancelled().await;
            tokio::time::Instant::now() + options.drain_timeout
        },
    );
    // One --drain-timeout in all: the internal listener's requests (commits read for public
    // requests, or fetches those started and left running) get what is left of it.
    internal_stop.cancel();
    if tokio::time::timeout_at(deadline, &mut internal_loop)
        .await
        .is_err()
    {
        internal_loop.abort();
        drained = false;
    }
    let _ = pg_stop.await;
    relay.shutdown.cancel();
    // The background tasks stop at the shutdown signal, but one may be waiting on a database
    // that stopped answering mid-query (no socket timeout would end that), and so may the
    // storage's flush: both get what is left of the --drain-timeout (at least a second to
    // flush), then are cut, so that the process exits whatever the database does.
    let tasks = [watcher, notifier, lister, storage_watch, housekeeping];
    let aborts: Vec<_> = tasks.iter().map(|t| t.abort_handle()).collect();
    let background = async {
        for task in tasks {
            let _ = task.await;
        }
        store.close().await;
    };
    let flush_by = deadline.max(tokio::time::Instant::now() + Duration::from_secs(1));
    let flushed = tokio::time::timeout_at(flush_by, background).await.is_ok();
    aborts.iter().for_each(tokio::task::AbortHandle::abort);
    match (drained, flushed) {
        (true, true) => tracing::info!("stopped: in-flight requests drained, storage flushed"),
        (false, true) => tracing::info!(
            "stopped: requests still in flight after --drain-timeout were cut, storage flushed"
        ),
        (_, false) => return Err(ServeError::Unflushed),
    }
    Ok(())
}

/// Creates the data directory when missing, at most mode 0755 (the umask may take more away):
/// under `umask 000` other users could otherwise replace `ca.pem` or delete the database.
fn create_data_dir(dir: &std::path::Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o755);
    builder.create(dir)
}

/// The CA shared through the database: an existing `DIR/ca.pem` pair or a new one is offered,
/// the stored one is used, and `DIR/ca.pem` is rewritten to match it.
async fn shared_ca(store: &Store, data_dir: &std::path::Path) -> Result<tls::LocalCa, ServeError> {
    let (cert, key) = match tls::LocalCa::read_files(data_dir)? {
        Some(pair) => pair,
        None => tls::LocalCa::generate()?,
    };
    let (cert, key) = store.ca_get_or_insert(&cert, &key).await?;
    // Compared by what the PEM holds, not its line ends; a `ca.pem` without its key too.
    let pem = |text: &str| text.split_whitespace().collect::<String>();
    let found = std::fs::read_to_string(data_dir.join("ca.pem")).ok();
    if found.is_some_and(|found| pem(&found) != pem(&cert)) {
        tracing::warn!(dir = %data_dir.display(), "the data directory's ca.pem held another CA than the database's; it is replaced by the database's (clients that trusted the old file must trust the new one)");
    }
    tls::LocalCa::write_files(data_dir, &cert, &key)?;
    Ok(tls::LocalCa::from_pem(&cert, &key)?)
}

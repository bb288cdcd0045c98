//! The serving loop: accept on the TLS and plain-HTTP listeners, serve the router over HTTP/1.1
//! or HTTP/2, and on shutdown stop accepting, drain in-flight requests, then flush storage.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulConnection;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::app::{App, Limits, Listener};
use crate::metrics::Metrics;
use crate::pgwire::PgFront;
use crate::relay::connect::{ClientCert, PeerAddr};
use crate::storage::{Backend, OpenMode, ServeLock, StorageError, Store};
use crate::tls::{self, TlsError};
use tower::ServiceExt;

/// How long a TLS handshake may take before the connection is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything `cloud serve` needs besides its listeners.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// SQLite file or PostgreSQL URL.
    pub backend: Backend,
    /// Holds the CA and the self-signed certificate.
    pub data_dir: PathBuf,
    /// `--tls-cert` and `--tls-key`, when given.
    pub tls_files: Option<(PathBuf, PathBuf)>,
    /// `--tls-names`: more names for the self-signed certificate.
    pub tls_names: Vec<String>,
    /// `--client-ca`: CAs of operators' own PKI, whose bridge certificates are trusted too.
    pub client_ca: Option<PathBuf>,
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
}

/// Most open connections per listener; beyond its cap a listener stops accepting until one
/// closes (the kernel's backlog holds the rest), so a flood of connections is bounded.
const MAX_CONNECTIONS: usize = 10_000;

/// Connections the kernel completes and queues while a listener is not accepting (at its cap,
/// or in a burst). The kernel clamps it to `net.core.somaxconn` (4,096 on current Linux); the
/// usual default of 128 turns a burst of a few hundred connections into SYN retries, a second
/// or more each.
const LISTEN_BACKLOG: u32 = 4_096;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR`, so a restarted server
/// gets its port back at once).
pub fn listen(addr: std::net::SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        tokio::net::TcpSocket::new_v4()?
    } else {
        tokio::net::TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// File descriptors kept out of the listeners' caps: storage connections, the SQLite files,
/// TLS and CA files, logs.
const RESERVED_FDS: u64 = 128;

/// Raises the soft open-file limit to the hard one (as Go and nginx setups do: the soft default
/// of 1,024 is far below what a server needs), then caps each of `listeners` so that their
/// connections together stay [`RESERVED_FDS`] under it: accepting does not fail with EMFILE,
/// and storage can still open a connection. (Below a hard limit of ~160 the cap stays at 16
/// per listener, and that margin shrinks.) Warns when the cap is well below the usual one.
fn connection_cap(listeners: usize) -> usize {
    let limit = match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(cause = %e, "cannot read the open-file limit; assuming 1024");
            1024
        }
    };
    let per_listener = limit.saturating_sub(RESERVED_FDS) / listeners.max(1) as u64;
    let cap = usize::try_from(per_listener)
        .unwrap_or(MAX_CONNECTIONS)
        .clamp(16, MAX_CONNECTIONS);
    if cap < MAX_CONNECTIONS * 9 / 10 {
        tracing::warn!(
            open_file_limit = limit,
            connections_per_listener = cap,
            "the open-file limit caps connections below {MAX_CONNECTIONS} per listener; raise the hard limit (`ulimit -Hn`, systemd LimitNOFILE=) to allow more"
        );
    }
    cap
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
}

/// Runs the service until `shutdown` is cancelled, then drains and flushes.
pub async fn run(
    options: ServeOptions,
    tls_listener: TcpListener,
    http_listener: Option<TcpListener>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    let metrics = Metrics::new();
    let _lock = ServeLock::acquire(&options.backend)?;
    let store = Store::open(&options.backend, metrics.clone(), OpenMode::CreateIfMissing).await?;
    let ca = shared_ca(&store, &options.data_dir).await?;
    let identity = tls::server_identity(
        &ca,
        &options.tls_names,
        options
            .tls_files
            .as_ref()
            .map(|(c, k)| (c.as_path(), k.as_path())),
    )
    .map_err(|e| match options.tls_files {
        Some(_) => ServeError::TlsFiles(e),
        None => ServeError::Tls(e),
    })?;
    let mut client_cas = vec![ca.cert_der()?];
    if let Some(path) = &options.client_ca {
        let operator_cas = tls::load_certificates(path).map_err(ServeError::ClientCa)?;
        for subject in tls::non_ca_subjects(&operator_cas) {
            tracing::warn!(file = %path.display(), subject = %subject, "--client-ca holds a certificate that is not a CA (no CA:TRUE basic constraint); it is trusted as a root all the same: check that the file holds your CA, not a client certificate");
        }
        client_cas.extend(operator_cas);
    }
    let acceptor =
        TlsAcceptor::from(tls::server_config(identity, client_cas).map_err(ServeError::ClientCa)?);
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
    let lister = tokio::spawn(crate::correlation::lister::keep_listing(
        app.correlation.clone(),
        shutdown.clone(),
    ));
    let relay = app.relay.clone();
    let pg = PgFront::new(app.pg.clone(), acceptor.clone());
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
        Some((acceptor, pg)),
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
    let internal_loop = tokio::spawn(serve_loop(
        internal,
        None,
        app.internal_router(),
        internal_stop.clone(),
        (options.drain_timeout, options.header_read_timeout),
        INTERNAL_CONNECTIONS,
    ));
    // Drain consumers' in-flight requests (some go through tunnels) before closing the tunnels.
    for task in loops {
        let _ = task.await;
    }
    internal_stop.cancel();
    let _ = internal_loop.await;
    let _ = pg_stop.await;
    relay.shutdown.cancel();
    let _ = watcher.await;
    let _ = notifier.await;
    let _ = lister.await;
    store.close().await;
    tracing::info!("stopped: in-flight requests drained, storage flushed");
    Ok(())
}

/// The CA shared through the database: an existing `DIR/ca.pem` pair or a new one is offered,
/// the stored one is used, and `DIR/ca.pem` is rewritten to match it.
async fn shared_ca(store: &Store, data_dir: &std::path::Path) -> Result<tls::LocalCa, ServeError> {
    let (cert, key) = match tls::LocalCa::read_files(data_dir)? {
        Some(pair) => pair,
        None => tls::LocalCa::generate()?,
    };
    let (cert, key) = store.ca_get_or_insert(&cert, &key).await?;
    tls::LocalCa::write_files(data_dir, &cert, &key)?;
    Ok(tls::LocalCa::from_pem(&cert, &key)?)
}

/// HTTP/2 flow-control windows for callers: a stream may have 1 MiB in flight, a connection
/// four times that, so one upload held back by a busy bridge does not starve the others on its
/// connection (which would then look paused to their `--header-read-timeout`).
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 4 << 20;

/// Largest HTTP/1.1 read buffer of a connection (and so the longest request head). hyper's
/// default lets each connection's buffer grow to 400 KiB and keep what it grew to: with a
/// thousand clients sending batches that was 80 MB held by idle connections. Bodies stream
/// through it in pieces of at most this size.
const HTTP1_MAX_BUFFER: usize = 16 * 1024;

/// The per-connection HTTP settings: without a timer hyper enforces no header time-out at all,
/// and a client sending a byte a minute would hold its connection forever.
fn http_builder(header_read_timeout: Duration) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(header_read_timeout)
        .max_buf_size(HTTP1_MAX_BUFFER);
    builder
        .http2()
        .timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .keep_alive_interval(Some(Duration::from_secs(30)))
        .keep_alive_timeout(Duration::from_secs(20));
    builder
}

/// What one connection has done, so that an idle HTTP/2 connection can be closed (its client
/// answering pings would otherwise keep it forever). HTTP/1.1 is left to hyper, whose
/// keep-alive timer starts when the last response has gone out.
#[derive(Default)]
struct Activity {
    requests: AtomicU64,
    http2: AtomicBool,
}

impl Activity {
    fn request(&self, version: axum::http::Version) {
        if version == axum::http::Version::HTTP_2 {
            self.http2.store(true, Ordering::Relaxed);
        }
        self.requests.fetch_add(1, Ordering::Relaxed);
    }

    /// Resolves once a whole `period` has passed without a new request on an HTTP/2
    /// connection, or on a connection that has never sent one. In-flight HTTP/2 streams do
    /// not count: the graceful close (GOAWAY) lets them finish.
    async fn idle(&self, period: Duration) {
        let mut seen = self.requests.load(Ordering::Relaxed);
        loop {
            tokio::time::sleep(period).await;
            let now = self.requests.load(Ordering::Relaxed);
            if now == seen && (now == 0 || self.http2.load(Ordering::Relaxed)) {
                return;
            }
            seen = now;
        }
    }
}

/// Serves one connection to its end, closing it gracefully (in-flight requests finish, and a
/// streaming answer streams on) at shutdown or once [`Activity::idle`].
async fn drive<C: GracefulConnection>(
    conn: C,
    activity: &Activity,
    stop: &CancellationToken,
    idle: Duration,
) {
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        () = stop.cancelled() => {}
        () = activity.idle(idle) => {}
    }
    conn.as_mut().graceful_shutdown();
    let _ = conn.await;
}

async fn serve_loop(
    listener: TcpListener,
    tls: Option<(TlsAcceptor, Arc<PgFront>)>,
    app: Router,
    stop: CancellationToken,
    timeouts: (Duration, Duration),
    cap: usize,
) {
    let (drain_timeout, header_read_timeout) = timeouts;
    let connections = TaskTracker::new();
    let builder = Arc::new(http_builder(header_read_timeout));
    let slots = Arc::new(tokio::sync::Semaphore::new(cap));
    loop {
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
            _ = stop.cancelled() => break,
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(err) => {
                    tracing::warn!(cause = %err, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.cancelled() => break,
        };
        let _ = stream.set_nodelay(true);
        let app = app.clone();
        let stop = stop.clone();
        let builder = builder.clone();
        let tls = tls.clone();
        connections.spawn(async move {
            let _slot = slot;
            let activity = Arc::new(Activity::default());
            let counted = activity.clone();
            match tls {
                None => {
                    let service = TowerToHyperService::new(app.map_request(
                        move |mut req: axum::http::Request<hyper::body::Incoming>| {
                            counted.request(req.version());
                            req.extensions_mut().insert(PeerAddr(peer));
                            req
                        },
                    ));
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned();
                    drive(conn, &activity, &stop, header_read_timeout).await;
                }
                Some((acceptor, pg)) => {
                    // PostgreSQL shares the port: its packets start with a zero byte.
                    let mut first = [0u8; 1];
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await {
                        Ok(Ok(1)) if PgFront::starts_postgres(first[0]) => {
                            pg.serve_plain(stream, peer).await;
                            return;
                        }
                        Ok(Ok(1)) => {}
                        _ => return,
                    }
                    let stream = match tokio::time::timeout(
                        HANDSHAKE_TIMEOUT,
                        acceptor.accept(stream),
                    )
                    .await
                    {
                        Ok(Ok(s)) => s,
                        Ok(Err(err)) => {
                            tracing::debug!(peer = %peer, cause = %err, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    if stream.get_ref().1.alpn_protocol() == Some(crate::pgwire::ALPN) {
                        pg.serve_tls(stream, peer).await;
                        return;
                    }
                    let client_cert = stream
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|certs| certs.first())
                        .map(|leaf| ClientCert(leaf.clone().into_owned()));
                    let service = TowerToHyperService::new(app.map_request(
                        move |mut req: axum::http::Request<hyper::body::Incoming>| {
                            counted.request(req.version());
                            if let Some(cert) = &client_cert {
                                req.extensions_mut().insert(cert.clone());
                            }
                            req.extensions_mut().insert(PeerAddr(peer));
                            req
                        },
                    ));
                    let conn = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned();
                    drive(conn, &activity, &stop, header_read_timeout).await;
                }
            }
        });
    }
    drop(listener);
    connections.close();
    if tokio::time::timeout(drain_timeout, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(timeout = ?drain_timeout, "drain timed out; closing remaining connections");
    }
}

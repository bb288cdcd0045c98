//! `cloud db-proxy`: a PostgreSQL endpoint on loopback for one database behind a bridge, as
//! `cloud-sql-proxy` and `tsh proxy db` are. Clients connect without TLS and without a
//! password (only this machine can reach the port); each connection becomes one HTTPS request
//! to the cloud, `GET /v1/bridges/{bridge}/databases/{database}` with the API key and
//! `Upgrade: postgresql`, over which the session then runs. Only 443 (or wherever `--api-url`
//! points) has to leave the network. Cancels (Ctrl-C) travel the same way.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Empty};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tunnel::postgres::{
    FirstPacket, error_response, negotiation, read_first_packet, send_cancel, startup_message,
};

use super::UPGRADE;

/// How long open sessions may run on after SIGTERM.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);
/// How long reaching the cloud (TCP, TLS, the upgrade) may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);

/// What `cloud db-proxy` was asked to do.
pub struct ProxyOptions {
    /// The cloud's base URL (`https://…` in production).
    pub api_url: url::Url,
    /// The CA that signs the cloud's certificate, instead of the system roots.
    pub ca_file: Option<PathBuf>,
    /// The bridge's name.
    pub bridge: String,
    /// The `databases` entry's name.
    pub database: String,
    /// Where local clients connect: a loopback address.
    pub listen: SocketAddr,
    /// The org's API key (from `CLOUD_API_KEY`, trimmed): `Err(true)` when the variable is
    /// set but blank, `Err(false)` when unset.
    pub api_key: Result<String, bool>,
}

/// Why `cloud db-proxy` cannot start.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The key is read from the environment only, never from a flag (`ps` would show it).
    #[error(
        "CLOUD_API_KEY is not set: give db-proxy an API key of the org in the environment (never as a flag, where `ps` would show it)"
    )]
    NoApiKey,
    /// Set empty (a compose file's unset variable): said as such, like `cloud`'s own.
    #[error("CLOUD_API_KEY is set but empty: give it an API key of the org, or unset it")]
    BlankApiKey,
    /// Clients need no password, so only this machine may reach the port.
    #[error(
        "--listen {0} is not a loopback address: clients of db-proxy need no password, so it listens on 127.0.0.1 or ::1 only"
    )]
    NotLoopback(SocketAddr),
    /// The port is taken or not allowed.
    #[error("cannot listen on --listen {0}: {1}{hint}", hint = listen_hint(.0, .1))]
    Listen(SocketAddr, std::io::Error),
    /// `--ca-file` cannot be read.
    #[error("--ca-file {0}: {1}")]
    Ca(PathBuf, String),
    /// The cloud refused the key, or its certificate is not vouched for: sessions could not
    /// open, so db-proxy does not start.
    #[error("{0}")]
    Preflight(String),
    /// `--api-url` has no host, an unknown scheme, or `http://` to another machine.
    #[error(
        "--api-url {0}: expected https://HOST[:PORT] (http:// only to localhost or a loopback address: the API key would cross the network in clear)"
    )]
    Url(String),
    /// Several of the above, found together at start.
    #[error("{} problems with `cloud db-proxy`'s options; nothing was started:\n  {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
    Several(Vec<ProxyError>),
}

impl ProxyError {
    /// One problem as itself, several as [`ProxyError::Several`].
    fn all(mut problems: Vec<ProxyError>) -> ProxyError {
        match problems.len() {
            1 => problems.remove(0),
            _ => ProxyError::Several(problems),
        }
    }
}

/// What to do when the port is taken: the default, 5432, is PostgreSQL's own, which a server on
/// the same machine holds.
fn listen_hint(addr: &SocketAddr, error: &std::io::Error) -> &'static str {
    match (error.kind(), addr.port()) {
        (std::io::ErrorKind::AddrInUse, 5432) => {
            "; 5432 (the default) is PostgreSQL's own port, likely held by a server on this machine: give another with --listen, such as --listen 127.0.0.1:6432"
        }
        (std::io::ErrorKind::AddrInUse, _) => "; give a free port with --listen",
        _ => "",
    }
}

/// How to reach the cloud's upgrade route.
struct Dialer {
    host: String,
    port: u16,
    tls: Option<tokio_rustls::TlsConnector>,
    path: String,
    authorization: String,
}

/// Listens on `opts.listen` and serves each local client until `shutdown`, then lets open
/// sessions finish.
pub async fn run(opts: ProxyOptions, shutdown: CancellationToken) -> Result<(), ProxyError> {
    let (dialer, listener) = prepare(&opts).map_err(ProxyError::all)?;
    let dialer = Arc::new(dialer);
    let addr = listener.local_addr().unwrap_or(opts.listen);
    // Clients that connect meanwhile wait in the listen queue.
    tokio::select! {
        checked = tokio::time::timeout(PREFLIGHT_TIMEOUT, preflight(&dialer, &opts)) => match checked {
            Ok(checked) => checked?,
            Err(_) => tracing::warn!(api_url = %opts.api_url, "the cloud did not answer the check at start within 5 s; listening anyway, sessions fail until it does"),
        },
        // The accept loop below sees the shutdown at once.
        () = shutdown.cancelled() => {}
    }
    tracing::info!(addr = %addr, bridge = %opts.bridge, database = %opts.database, "db-proxy listening");
    let sessions = TaskTracker::new();
    loop {
        let (conn, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    tracing::warn!(cause = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = shutdown.cancelled() => break,
        };
        let _ = conn.set_nodelay(true);
        sessions.spawn(client(conn, peer, dialer.clone()));
    }
    drop(listener);
    sessions.close();
    tracing::info!(
        open = sessions.len(),
        "shutdown: waiting up to 30 s for open sessions to end"
    );
    if tokio::time::timeout(DRAIN_TIMEOUT, sessions.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            open = sessions.len(),
            "drain timed out; closing the remaining sessions"
        );
    }
    Ok(())
}

/// Checks every option (the key, `--listen`, `--api-url`, `--ca-file`) and binds the port,
/// saying each problem at once rather than the first.
fn prepare(opts: &ProxyOptions) -> Result<(Dialer, TcpListener), Vec<ProxyError>> {
    let mut problems = Vec::new();
    match opts.api_key {
        Ok(_) => {}
        Err(true) => problems.push(ProxyError::BlankApiKey),
        Err(false) => problems.push(ProxyError::NoApiKey),
    }
    // The CA file is read for an `https://` cloud only: plain HTTP to loopback uses none.
    let roots = match opts
        .ca_file
        .as_ref()
        .filter(|_| opts.api_url.scheme() == "https")
    {
        Some(path) => match crate::tls::load_certificates(path) {
            Ok(certs) => {
                let mut roots = rustls::RootCertStore::empty();
                roots.add_parsable_certificates(certs);
                Some(roots)
            }
            Err(e) => {
                problems.push(ProxyError::Ca(path.clone(), e.to_string()));
                None
            }
        },
        None => Some(tunnel::roots::public()),
    };
    // `--api-url` is checked even when the CA file is not read.
    let roots = roots.unwrap_or_else(rustls::RootCertStore::empty);
    let dialer = dialer(opts, roots).map_err(|e| problems.push(e)).ok();
    let listener = if opts.listen.ip().is_loopback() {
        bind(opts.listen).map_err(|e| problems.push(e)).ok()
    } else {
        problems.push(ProxyError::NotLoopback(opts.listen));
        None
    };
    match (dialer, listener) {
        (Some(dialer), Some(listener)) if problems.is_empty() => Ok((dialer, listener)),
        _ => Err(problems),
    }
}

/// The local port, bound at once (so that a taken port is said with the other problems).
fn bind(addr: SocketAddr) -> Result<TcpListener, ProxyError> {
    let listener = std::net::TcpListener::bind(addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|e| ProxyError::Listen(addr, e))?;
    TcpListener::from_std(listener).map_err(|e| ProxyError::Listen(addr, e))
}

fn dialer(opts: &ProxyOptions, roots: rustls::RootCertStore) -> Result<Dialer, ProxyError> {
    let url = &opts.api_url;
    let host = url
        .host_str()
        .ok_or_else(|| ProxyError::Url(url.to_string()))?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let port = url
        .port_or_known_default()
        .ok_or_else(|| ProxyError::Url(url.to_string()))?;
    let tls = match url.scheme() {
        "https" => {
            let mut config = rustls::ClientConfig::builder_with_provider(tunnel::tls::provider())
                .with_safe_default_protocol_versions()
                .map_err(|e| ProxyError::Url(e.to_string()))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Some(tokio_rustls::TlsConnector::from(Arc::new(config)))
        }
        // The API key would cross the network in clear: plain HTTP only to this machine.
        "http" if is_loopback_host(&host) => None,
        _ => return Err(ProxyError::Url(url.to_string())),
    };
    let base = url.path().trim_end_matches('/');
    let dialer = Dialer {
        host,
        port,
        tls,
        path: format!(
            "{base}/v1/bridges/{}/databases/{}",
            opts.bridge, opts.database
        ),
        authorization: format!("Bearer {}", opts.api_key.as_deref().unwrap_or_default()),
    };
    dialer.request(&dialer.path, true).map_err(|e| {
        ProxyError::Preflight(format!(
            "cannot form the request to the cloud from --bridge {:?}, --database {:?} and CLOUD_API_KEY ({e}): the names are printable ASCII without spaces, the key printable ASCII",
            opts.bridge, opts.database
        ))
    })?;
    Ok(dialer)
}

fn is_loopback_host(host: &str) -> bool {
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// How long the check at start may take in all before db-proxy listens anyway.
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(5);

/// Asks the cloud, at start, what a session would: whether it vouches for the cloud's
/// certificate and accepts the key (else db-proxy exits, as for any bad flag), and whether the
/// bridge is connected and declares the database (a warning: it may connect later). A cloud
/// that cannot be reached is a warning too: it may be starting.
async fn preflight(dialer: &Dialer, opts: &ProxyOptions) -> Result<(), ProxyError> {
    let base = opts.api_url.path().trim_end_matches('/');
    let request = dialer
        .request(&format!("{base}/v1/bridges"), false)
        .map_err(|e| ProxyError::Preflight(format!("cannot form a request to the cloud: {e}")))?;
    let response = match dialer.exchange(request).await {
        Err(Unreached::Tls(why)) => {
            return Err(ProxyError::Preflight(format!(
                "--api-url {}: TLS to the cloud failed: {why}; give --ca-file the CA that signs the cloud's certificate (data/ca.pem for its self-signed one)",
                opts.api_url
            )));
        }
        Err(Unreached::Other(why)) => {
            tracing::warn!(api_url = %opts.api_url, cause = %why, "cannot reach the cloud; listening anyway, sessions fail until it can be reached");
            return Ok(());
        }
        Ok(response) => response,
    };
    let status = response.status().as_u16();
    let body = http_body_util::Limited::new(response.into_body(), 4 << 20)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    match status {
        200 => {}
        401 => {
            return Err(ProxyError::Preflight(format!(
                "the cloud at {} refused CLOUD_API_KEY: {} (it must be a key of the org that owns bridge {:?})",
                opts.api_url,
                crate::problem::detail_of(&body),
                opts.bridge
            )));
        }
        _ => {
            tracing::warn!(api_url = %opts.api_url, status, detail = %crate::problem::detail_of(&body), "the cloud's check at start failed; listening anyway");
            return Ok(());
        }
    }
    let listed: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    let bridge = listed["bridges"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|b| b["name"] == opts.bridge.as_str());
    let Some(bridge) = bridge else {
        tracing::warn!(bridge = %opts.bridge, "the org has no bridge of this name connected to the cloud right now (not created, not running, or reconnecting); sessions fail until it connects");
        return Ok(());
    };
    let declares = bridge["instances"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|i| i["resources"].as_array().into_iter().flatten())
        .any(|r| r["kind"] == "database" && r["name"] == opts.database.as_str());
    if !declares {
        tracing::warn!(bridge = %opts.bridge, database = %opts.database, "the bridge is connected but declares no such entry in its `databases` list; sessions fail until it does");
    }
    Ok(())
}

/// Why the cloud could not be asked.
enum Unreached {
    /// The cloud's certificate is not vouched for (most often: `--ca-file` is not the
    /// cloud's CA).
    Tls(String),
    /// DNS, TCP or HTTP failed.
    Other(String),
}

/// One local client: declines TLS and GSS encryption (the port is loopback), then relays its
/// session, or its cancel, through the cloud.
async fn client(mut conn: TcpStream, peer: SocketAddr, dialer: Arc<Dialer>) {
    loop {
        let packet = tokio::time::timeout(DIAL_TIMEOUT, read_first_packet(&mut conn))
            .await
            .unwrap_or_else(|_| Err("no packet within 20 s".into()));
        let packet = match packet {
            Ok(packet) => packet,
            Err(why) => {
                tracing::debug!(peer = %peer, why, "unreadable PostgreSQL packet");
                return;
            }
        };
        match packet {
            FirstPacket::Ssl | FirstPacket::GssEnc => {
                if conn.write_all(b"N").await.is_err() {
                    return;
                }
            }
            FirstPacket::Startup { minor, params } => {
                // The cloud is asked for 3.0: a newer version is negotiated down here.
                if let Some(answer) = negotiation(minor, &params)
                    && conn.write_all(&answer).await.is_err()
                {
                    return;
                }
                let mut upstream = match dialer.open().await {
                    Ok(io) => io,
                    Err((code, message)) => {
                        tracing::warn!(peer = %peer, code, why = %message, "session not opened");
                        let _ = conn.write_all(&error_response(code, &message)).await;
                        return;
                    }
                };
                let message =
                    startup_message(params.iter().map(|(k, v)| (k.as_str(), v.as_slice())));
                if upstream.write_all(&message).await.is_err() {
                    return;
                }
                // The session may wait for a slot at the bridge: a client that gives up meanwhile
                // ends it (the cloud then drops its stream, and the bridge logs in for no one).
                // Bytes it sends before its session is ready stay in the socket for the copy.
                let (mut conn_r, mut conn_w) = conn.split();
                let left = async {
                    let mut byte = [0u8; 1];
                    match conn_r.peek(&mut byte).await {
                        Ok(0) | Err(_) => {}
                        Ok(_) => std::future::pending().await,
                    }
                };
                tokio::select! {
                    refusal = refused(&mut conn_w, &mut upstream) => {
                        if let Some((code, why)) = refusal {
                            tracing::warn!(peer = %peer, code, why = %why, "session not opened");
                            return;
                        }
                    }
                    () = left => {
                        tracing::info!(peer = %peer, "session not opened: the client left while it waited");
                        return;
                    }
                }
                match tokio::io::copy_bidirectional(&mut conn, &mut upstream).await {
                    // The first message's 5-byte header was passed on before the copy.
                    Ok((up, down)) => {
                        tracing::info!(peer = %peer, bytes_in = up, bytes_out = down + 5, "session closed")
                    }
                    Err(e) => {
                        tracing::info!(peer = %peer, cause = %e, "session ended with an error")
                    }
                }
                return;
            }
            FirstPacket::Cancel(pid, key) => {
                if let Ok(mut upstream) = dialer.open().await {
                    let _ = send_cancel(&mut upstream, pid, key).await;
                }
                return;
            }
            FirstPacket::Other(code) => {
                let message = format!("unsupported protocol or request code {code}");
                let _ = conn.write_all(&error_response("08P01", &message)).await;
                return;
            }
        }
    }
}

/// Passes the cloud's first message on to the client; when it is an `ErrorResponse` (no such
/// bridge or database, a failed login), its SQLSTATE and message, for this proxy's log to say
/// why the session ended, as the client's does. `Some` also when the stream ended early.
async fn refused(
    client: &mut (impl tokio::io::AsyncWrite + Unpin),
    upstream: &mut TokioIo<Upgraded>,
) -> Option<(String, String)> {
    /// Longer error messages are passed on without being read for the log.
    const MAX_LOGGED: usize = 64 * 1024;
    let mut head = [0u8; 5];
    if let Err(e) = upstream.read_exact(&mut head).await {
        let why = format!("the cloud closed the session at once: {e}");
        let _ = client.write_all(&error_response("08006", &why)).await;
        return Some(("08006".into(), why));
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if !(4..=MAX_LOGGED).contains(&len) {
        return client
            .write_all(&head)
            .await
            .err()
            .map(|e| ("08006".into(), e.to_string()));
    }
    let mut body = vec![0; len - 4];
    if upstream.read_exact(&mut body).await.is_err() {
        let why = "the cloud's answer was cut short";
        let _ = client.write_all(&error_response("08006", why)).await;
        return Some(("08006".into(), why.into()));
    }
    // The message in one write: a pooler in front (PgBouncer) refuses a login message that
    // arrives in pieces. The rest of the greeting follows as the cloud sent it, whole.
    let written = client.write_all(&[&head[..], &body].concat()).await;
    if head[0] != b'E' {
        return written.err().map(|e| ("08006".into(), e.to_string()));
    }
    Some(tunnel::postgres::error_fields(&body))
}

impl Dialer {
    /// The upgraded connection, or the SQLSTATE and message to give the client.
    async fn open(&self) -> Result<TokioIo<Upgraded>, (&'static str, String)> {
        tokio::time::timeout(DIAL_TIMEOUT, self.open_inner())
            .await
            .map_err(|_| {
                (
                    "08001",
                    format!(
                        "the cloud at {}:{} did not answer within {} s",
                        self.host,
                        self.port,
                        DIAL_TIMEOUT.as_secs()
                    ),
                )
            })?
    }

    async fn open_inner(&self) -> Result<TokioIo<Upgraded>, (&'static str, String)> {
        let unreachable = |e: String| {
            (
                "08001",
                format!("cannot reach the cloud at {}:{}: {e}", self.host, self.port),
            )
        };
        let request = self.request(&self.path, true).map_err(unreachable)?;
        let response = self.exchange(request).await.map_err(|e| match e {
            Unreached::Tls(e) => unreachable(format!("TLS: {e} (is --ca-file the cloud's CA?)")),
            Unreached::Other(e) => unreachable(e),
        })?;
        let status = response.status().as_u16();
        if status == 101 {
            return hyper::upgrade::on(response)
                .await
                .map(TokioIo::new)
                .map_err(|e| unreachable(e.to_string()));
        }
        let body = response
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let detail = crate::problem::detail_of(&body);
        Err(match status {
            401 => (
                "28P01",
                format!("the cloud refused CLOUD_API_KEY: {detail}"),
            ),
            404 => ("3D000", detail),
            _ => ("08001", format!("the cloud answered {status}: {detail}")),
        })
    }

    /// `GET path` with the API key; with `upgrade`, asking for the PostgreSQL upgrade.
    fn request(
        &self,
        path: &str,
        upgrade: bool,
    ) -> Result<hyper::Request<Empty<bytes::Bytes>>, String> {
        let mut request = hyper::Request::get(path)
            .header(hyper::header::HOST, &self.host)
            .header(hyper::header::AUTHORIZATION, &self.authorization);
        if upgrade {
            request = request
                .header(hyper::header::CONNECTION, "upgrade")
                .header(hyper::header::UPGRADE, UPGRADE);
        }
        request.body(Empty::new()).map_err(|e| e.to_string())
    }

    /// Sends `request` to the cloud on a new connection.
    async fn exchange(
        &self,
        request: hyper::Request<Empty<bytes::Bytes>>,
    ) -> Result<hyper::Response<hyper::body::Incoming>, Unreached> {
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| Unreached::Other(e.to_string()))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(self.host.clone())
                    .map_err(|e| Unreached::Other(e.to_string()))?;
                let stream = tls.connect(name, tcp).await.map_err(|e| {
                    let certificate = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)));
                    if certificate {
                        Unreached::Tls(e.to_string())
                    } else {
                        Unreached::Other(format!("TLS: {e}"))
                    }
                })?;
                send(TokioIo::new(stream), request).await
            }
            None => send(TokioIo::new(tcp), request).await,
        }
        .map_err(Unreached::Other)
    }
}

/// Sends `request` on a new HTTP/1.1 connection that may be upgraded.
async fn send<T>(
    io: T,
    request: hyper::Request<Empty<bytes::Bytes>>,
) -> Result<hyper::Response<hyper::body::Incoming>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = conn.with_upgrades().await;
    });
    sender
        .send_request(request)
        .await
        .map_err(|e| e.to_string())
}

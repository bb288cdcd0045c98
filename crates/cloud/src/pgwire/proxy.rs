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

use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tunnel::postgres::{
    FirstPacket, error_response, negotiation, read_first_packet, send_cancel, startup_message,
};

use dial::Dialer;
use start::{PREFLIGHT_TIMEOUT, preflight, prepare};

mod dial;
mod start;

/// How long a local client may take to send its first packet (the startup message, or a
/// request for TLS).
const FIRST_PACKET: Duration = Duration::from_secs(20);
/// How long open sessions may run on after SIGTERM.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

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
    #[error(
        "CLOUD_API_KEY is set but blank (empty or only whitespace): give it an API key of the org, or unset it"
    )]
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
    /// `--bridge` or `--database` is no name the cloud could route to: said at start rather
    /// than as every session's failure.
    #[error("{0} {1:?} is not a valid name: expected {2}")]
    Name(&'static str, String, &'static str),
    /// The key holds more than printable ASCII (a paste gone wrong).
    #[error(
        "CLOUD_API_KEY holds characters other than printable ASCII (a space or an invisible character pasted with it?): give the key as `cloud api-key create` printed it"
    )]
    ApiKeyChars,
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

/// One local client: declines TLS and GSS encryption (the port is loopback), then relays its
/// session, or its cancel, through the cloud.
async fn client(mut conn: TcpStream, peer: SocketAddr, dialer: Arc<Dialer>) {
    loop {
        let packet = tokio::time::timeout(FIRST_PACKET, read_first_packet(&mut conn))
            .await
            .unwrap_or_else(|_| Err(format!("no packet within {} s", FIRST_PACKET.as_secs())));
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
